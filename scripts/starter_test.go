package scripts

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// starterCopy is a git repository in a folder of the test's own holding
// the checkout's files (as git ls-files lists them), changed by edit and
// committed: what a fork's clean clone is.
func starterCopy(t *testing.T, edit func(dir string)) string {
	t.Helper()
	dir := t.TempDir()
	list, err := exec.Command("git", "-C", "..", "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(list), "\x00"), "\x00") {
		raw, err := os.ReadFile(filepath.Join("..", f))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		info, err := os.Stat(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), raw, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	edit(dir)
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-qm", "a clone"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

func appendTo(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

// make starter refuses, before it renames or builds anything, a tree it
// cannot make a starter of, and says in its last line why and where: a
// marked block without its end (or an end without its begin), a line a
// reader follows that names what the starter removes, a path of its list
// that is gone, and a module path that is none.
func TestStarterRefusesWhatItCannotCut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		module string
		edit   func(t *testing.T, dir string)
		want   []string // in what it printed
	}{
		{"a block never ended", "example.com/acme/pay", func(t *testing.T, dir string) {
			appendTo(t, filepath.Join(dir, "docs", "TESTING.md"), "\n<!-- starter:remove begin -->\nthe demo\n")
		}, []string{"docs/TESTING.md:", `"starter:remove begin" never ended`, "unbalanced markers"}},
		{"an end without a begin", "example.com/acme/pay", func(t *testing.T, dir string) {
			appendTo(t, filepath.Join(dir, "Makefile"), "\n# starter:remove end\n")
		}, []string{"Makefile:", `"starter:remove end" without a "starter:remove begin"`}},
		{"a line names a removed package", "example.com/acme/pay", func(t *testing.T, dir string) {
			appendTo(t, filepath.Join(dir, "README.md"), "\nThe chaos engine is `proving/chaos`.\n")
		}, []string{"README.md:", "proving/chaos", "name something the starter removed"}},
		{"a removed path is gone already", "example.com/acme/pay", func(t *testing.T, dir string) {
			if err := os.RemoveAll(filepath.Join(dir, "proving", "cmd", "outboxbench")); err != nil {
				t.Fatal(err)
			}
		}, []string{"proving/cmd/outboxbench is gone already"}},
		{"no module path", "acme pay", func(*testing.T, string) {}, []string{`"acme pay" is not a module path`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := starterCopy(t, func(dir string) { tc.edit(t, dir) })
			cmd := exec.Command("bash", "scripts/starter.sh", tc.module)
			cmd.Dir = dir
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("starter.sh %s: %v, want it to fail\n%s%s", tc.module, err, stdout.String(), stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("starter.sh said %q, want it to say %q", stderr.String(), w)
				}
			}
			if strings.Contains(stderr.String(), "goroutine ") || strings.Contains(stdout.String(), "renamed") {
				t.Errorf("starter.sh went on past the refusal:\n%s%s", stdout.String(), stderr.String())
			}
			if raw, err := os.ReadFile(filepath.Join(dir, "go.mod")); err != nil || !bytes.Contains(raw, []byte("module github.com/oncepay/oncepay\n")) {
				t.Errorf("the module was renamed although the starter was refused (%v)", err)
			}
		})
	}
}
