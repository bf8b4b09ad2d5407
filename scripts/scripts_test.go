// Package scripts holds the shell scripts behind the Makefile's targets;
// its tests run them as a user would.
package scripts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

// postgresSh runs scripts/postgres.sh with args and the extra environment
// env (DATABASE_URL unset, so that it starts its own cluster) and returns
// what it printed on stdout and on stderr.
func postgresSh(t *testing.T, env []string, args ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"postgres.sh"}, args...)...)
	cmd.Env = append(append(os.Environ(), "DATABASE_URL=", "PG_SERVER_OPTS=-c fsync=off"), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("postgres.sh %q: %v\n%s", args, err, errOut.String())
	}
	return strings.TrimSpace(out.String()), errOut.String()
}

// privateCluster names a cluster of the test's own under .data/postgres,
// stopped and removed (its folder and, as root, the folder it links to)
// when the test ends.
func privateCluster(t *testing.T, prefix string) (name, dir string) {
	t.Helper()
	name = fmt.Sprintf("%s-%d", prefix, os.Getpid())
	dir = filepath.Join("..", ".data", "postgres", name)
	t.Cleanup(func() {
		postgresSh(t, nil, "--stop", name)
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			_ = os.RemoveAll(real)
		}
		_ = os.RemoveAll(dir)
	})
	return name, dir
}

// postmasterPID is the running server's pid, from its postmaster.pid.
func postmasterPID(t *testing.T, dir string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		t.Fatalf("the cluster does not run: %v", err)
	}
	return strings.SplitN(string(raw), "\n", 2)[0]
}

// A cluster still running the server binary of before a package upgrade
// (building Citus installs postgresql-server-dev, which moved 15.18 to
// 15.20 under a running cluster: every PL/pgSQL call then failed with
// "could not load library plpgsql.so: undefined symbol") is restarted on
// the installed binary, on the same port, with one line saying so; a
// cluster that runs the installed version is left alone. The installed
// version is faked through POSTGRES_SH_INSTALLED_VERSION; the cluster, the
// version it reports and the restart are real.
func TestPostgresRestartsAServerOlderThanTheInstalledOne(t *testing.T) {
	t.Parallel()
	name, dir := privateCluster(t, "scripts-test-upgrade")
	url, _ := postgresSh(t, nil, name)
	first := postmasterPID(t, dir)

	again, stderr := postgresSh(t, nil, name)
	if again != url || postmasterPID(t, dir) != first || stderr != "" {
		t.Fatalf("a cluster on the installed version was touched: URL %s (was %s), pid %s (was %s), said %q", again, url, postmasterPID(t, dir), first, stderr)
	}

	upgraded, stderr := postgresSh(t, []string{"POSTGRES_SH_INSTALLED_VERSION=99.1"}, name)
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "the installed server is 99.1") || !strings.Contains(lines[0], "restarting it") {
		t.Fatalf("postgres.sh said %q, want one line saying it restarts the cluster on the installed 99.1", stderr)
	}
	if upgraded != url {
		t.Fatalf("restarted on %s, want the same URL %s", upgraded, url)
	}
	if postmasterPID(t, dir) == first {
		t.Fatal("the server was not restarted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("the restarted cluster does not answer: %v", err)
	}
	defer conn.Close(ctx)
	// PL/pgSQL is what an old server fails to load after an upgrade.
	if _, err := conn.Exec(ctx, `DO $$ BEGIN PERFORM 1; END $$`); err != nil {
		t.Fatalf("PL/pgSQL on the restarted cluster: %v", err)
	}
}

// A .ci/run whose make test fails stops the PostgreSQL and Citus clusters
// the run started (a CI machine's clone is thrown away, its servers would
// run on), and so does one that passes; a cluster that ran before the run
// is left running. The real .ci/run and scripts/postgres.sh run in a copy
// of the checkout whose Makefile's test target starts a cluster and fails
// (or passes).
func TestCIRunStopsTheClustersItStarted(t *testing.T) {
	t.Parallel()
	clone, err := os.MkdirTemp("", "oncepay-ci-run-")
	if err != nil {
		t.Fatal(err)
	}
	// The servers run as the postgres user, who must reach their folders.
	if err := os.Chmod(clone, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{".ci/run", "scripts/postgres.sh"} {
		raw, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(clone, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(clone, f), raw, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	makefile := "test:\n\t@scripts/postgres.sh ci-started >/dev/null\n\t@exit $${TEST_EXIT}\n"
	if err := os.WriteFile(filepath.Join(clone, "Makefile"), []byte(makefile), 0o644); err != nil {
		t.Fatal(err)
	}
	sh := func(env []string, args ...string) (string, error) {
		cmd := exec.Command("bash", args...)
		cmd.Dir = clone
		cmd.Env = append(append(os.Environ(), "DATABASE_URL=", "PG_SERVER_OPTS=-c fsync=off"), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		for _, c := range []string{"ci-before", "ci-started"} {
			if out, err := sh(nil, "scripts/postgres.sh", "--stop", c); err != nil {
				t.Errorf("stop %s: %v\n%s", c, err, out)
			}
		}
		_ = os.RemoveAll(clone)
	})
	running := func(c string) bool {
		raw, err := os.ReadFile(filepath.Join(clone, ".data", "postgres", c, "data", "postmaster.pid"))
		if err != nil {
			return false
		}
		return exec.Command("kill", "-0", strings.SplitN(string(raw), "\n", 2)[0]).Run() == nil
	}
	if out, err := sh(nil, "scripts/postgres.sh", "ci-before"); err != nil {
		t.Fatalf("start the cluster that runs before: %v\n%s", err, out)
	}
	for _, exit := range []string{"2", "0"} {
		out, err := sh([]string{"TEST_EXIT=" + exit}, ".ci/run")
		if exit != "0" && err == nil || exit == "0" && err != nil {
			t.Fatalf(".ci/run with make test exiting %s: %v\n%s", exit, err, out)
		}
		if running("ci-started") {
			t.Errorf(".ci/run with make test exiting %s left the cluster it started running:\n%s", exit, out)
		}
		if !running("ci-before") {
			t.Fatalf(".ci/run with make test exiting %s stopped a cluster that ran before it:\n%s", exit, out)
		}
	}
}
