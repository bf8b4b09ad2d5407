// Package scripts holds the shell scripts behind the Makefile's targets;
// its tests run them as a user would.
package scripts

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A mistyped flag is not taken for the name of a new cluster: postgres.sh
// refuses it in one line, exit status 2, and creates nothing.
func TestPostgresRefusesANameThatIsNotOne(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--install"}, {"-x"}, {"a/b"}, {"dev", "extra"}, {"--stop", "--all"}} {
		cmd := exec.Command("bash", append([]string{"postgres.sh"}, args...)...)
		cmd.Env = append(os.Environ(), "DATABASE_URL=")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("postgres.sh %q: %v, want exit status 2 (output %q)", args, err, out)
		}
		if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "is not a cluster name") {
			t.Errorf("postgres.sh %q said %q, want one line naming the mistake", args, out)
		}
		name := args[len(args)-1]
		if _, err := os.Stat(filepath.Join("..", ".data", "postgres", name)); err == nil {
			t.Errorf("postgres.sh %q created a cluster directory %q", args, name)
		}
	}
}
