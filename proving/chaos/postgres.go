package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Postgres is a private PostgreSQL cluster the run starts itself, so that
// it may crash it: a fresh initdb in a temporary folder, one postmaster on
// a free 127.0.0.1 port, durable commits (the server's defaults: fsync and
// synchronous_commit on, as a production server has them). Its log goes to
// postgres.log in the work folder. The run kills, stops and starts it while
// the load runs (postgres_killed, postgres_outage); it always comes back on
// the same port and data directory, so the APIs' DATABASE_URL never changes.
type Postgres struct {
	bindir string
	// dir holds the data directory and the unix socket; it is removed at
	// the end unless the run failed.
	dir     string
	data    string
	port    int
	workDir string
	// name is the server's log (name.log in the work folder): "postgres",
	// or the node of a Citus cluster ("citus-coordinator", ...).
	name string
	// options are server settings beyond the run's own (-c name=value).
	options []string
	// cred runs initdb and the server as the "postgres" user when the run
	// is root (initdb refuses to run as root); nil otherwise.
	cred *syscall.Credential
	// home is the server's HOME: the postgres user's when it runs as that
	// user, so that libpq in it (a Citus node connecting to another) looks
	// for client certificates in a folder it may read, not in root's.
	home  string
	races atomic.Int64

	mu   sync.Mutex
	proc *proc
	// held is set while a fault step keeps the server down on purpose, so
	// that no repair (stack.ensureUp) starts it early.
	held atomic.Bool
}

// postgresBinDir finds the PostgreSQL server binaries the way
// scripts/postgres.sh does: the newest /usr/lib/postgresql/*/bin with initdb
// and pg_ctl (Debian's layout), else the folder of an initdb on PATH.
func postgresBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(d string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		return v
	}
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, d := range dirs {
		if executable(filepath.Join(d, "initdb")) && executable(filepath.Join(d, "pg_ctl")) && executable(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && executable(filepath.Join(filepath.Dir(p), "postgres")) {
		return filepath.Dir(p), nil
	}
	return "", errors.New("PostgreSQL server binaries (initdb, postgres) not found: install them (apt-get install postgresql), " +
		"or run without database faults on a server of your own (--db-faults=false with DATABASE_URL)")
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// StartPostgres creates a cluster in a fresh temporary folder and starts
// it. As root, the folder is given to the "postgres" user and initdb and the
// server run as that user.
func StartPostgres(ctx context.Context, workDir string) (*Postgres, error) {
	return startPostgres(ctx, workDir, "postgres", nil)
}

// startPostgres is StartPostgres for a server logging to name.log, with
// more settings (options, each "name=value").
func startPostgres(ctx context.Context, workDir, name string, options []string) (_ *Postgres, err error) {
	bindir, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "oncepay-chaos-pg-")
	if err != nil {
		return nil, err
	}
	pg := &Postgres{bindir: bindir, dir: dir, data: filepath.Join(dir, "data"), workDir: workDir, name: name, options: options}
	defer func() {
		if err != nil {
			pg.Close(false)
		}
	}()
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, the server must run as the postgres user: %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		pg.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		pg.home = u.HomeDir
		if err := os.Chown(dir, int(uid), int(gid)); err != nil {
			return nil, err
		}
	}
	// --no-sync: initdb's own fsync of a folder made for one run took 4 of
	// its 6 seconds on the shared disk; the server's commits stay durable.
	initdb := exec.CommandContext(ctx, filepath.Join(bindir, "initdb"), "-D", pg.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	if pg.port, err = freePort(); err != nil {
		return nil, err
	}
	if err := pg.Start(ctx); err != nil {
		return nil, err
	}
	return pg, nil
}

// URL is the connection URL of the cluster's postgres database.
func (pg *Postgres) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", pg.port)
}

// Dir is the folder of the data directory (kept when the run failed).
func (pg *Postgres) Dir() string { return pg.dir }

func (pg *Postgres) current() *proc {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return pg.proc
}

// alive reports whether the postmaster runs.
func (pg *Postgres) alive() bool {
	p := pg.current()
	return p != nil && p.alive()
}

// Start starts the postmaster and returns once it accepts connections:
// after a kill that is after crash recovery. The server processes a killed
// postmaster left behind may still hold the shared memory or the port for a
// moment; a start that fails then is tried again, within readyTimeout.
func (pg *Postgres) Start(ctx context.Context) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		err := pg.startOnce(ctx)
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		if err := pause(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

func (pg *Postgres) startOnce(ctx context.Context) error {
	ready, fire := signalOnce()
	watch := func(line string) {
		if strings.Contains(line, "database system is ready to accept connections") {
			fire()
		}
	}
	args := []string{"-D", pg.data, "-p", strconv.Itoa(pg.port), "-k", pg.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300"}
	for _, o := range pg.options {
		args = append(args, "-c", o)
	}
	attr := procAttr()
	attr.Credential = pg.cred
	env := baseEnv()
	if pg.home != "" {
		env = append(env, "HOME="+pg.home) // the last one counts
	}
	p, err := spawn(procSpec{name: pg.name, bin: filepath.Join(pg.bindir, "postgres"), args: args, env: env,
		logDir: pg.workDir, runDir: pg.dir, attr: attr, races: &pg.races, watch: watch})
	if err != nil {
		return err
	}
	pg.mu.Lock()
	pg.proc = p
	pg.mu.Unlock()
	return p.waitReady(ctx, ready, readyTimeout)
}

// Kill SIGKILLs the postmaster: no shutdown checkpoint, so the next start
// runs crash recovery from the WAL. The server processes it leaves behind
// notice their postmaster's death and exit by themselves (those that are
// still there after a second get SIGKILL too), unless all is set: then
// every server process is SIGKILLed at the same moment, as when the
// machine or the container goes. It returns once none is left.
func (pg *Postgres) Kill(all bool) error {
	p := pg.current()
	if p == nil || !p.alive() {
		return errors.New("postgres is not running")
	}
	pid := p.cmd.Process.Pid
	// Stopped first, so that no server process is forked between the
	// listing and the kill.
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	children, err := childPIDs(pid)
	if err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return err
	}
	// Not p.kill: its exit is only seen once every server process has
	// closed the log pipe they share, and a straggler is killed below.
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if all {
		for _, c := range children {
			_ = syscall.Kill(c, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(time.Second)
	for {
		left := slices.DeleteFunc(slices.Clone(children), processGone)
		if len(left) == 0 && !p.alive() {
			return nil
		}
		if time.Now().After(deadline) {
			for _, c := range left {
				_ = syscall.Kill(c, syscall.SIGKILL)
			}
		}
		if time.Now().After(deadline.Add(10 * time.Second)) {
			return fmt.Errorf("postgres processes %v still there 11s after the postmaster was killed", left)
		}
		time.Sleep(10 * time.Millisecond) // polling the kernel for their exit, bounded above
	}
}

// Stop shuts the server down the way an operator's `pg_ctl stop -m fast`
// does (SIGINT: sessions are terminated, a shutdown checkpoint is written)
// and returns once it has exited; after a minute it is killed instead.
func (pg *Postgres) Stop() error {
	p := pg.current()
	if p == nil || !p.alive() {
		return errors.New("postgres is not running")
	}
	_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGINT)
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		return pg.Kill(true)
	}
}

// Close stops the server and removes its folder unless keep.
func (pg *Postgres) Close(keep bool) {
	if p := pg.current(); p != nil && p.alive() {
		if err := pg.Stop(); err != nil {
			p.kill()
		}
	}
	if !keep {
		_ = os.RemoveAll(pg.dir)
	}
}
