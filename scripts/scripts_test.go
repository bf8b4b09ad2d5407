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
