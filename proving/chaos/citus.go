package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/jackc/pgx/v5"
)

// CitusWorkers is how many workers a Citus cluster of the run has.
const CitusWorkers = 2

// Citus is the database of a cluster run (Config.Cluster): a Citus
// coordinator and CitusWorkers workers, each a private PostgreSQL cluster
// of the run (Postgres: initdb in a temporary folder, a free 127.0.0.1
// port, durable commits) started with shared_preload_libraries=citus, the
// citus extension created in the postgres database of every node, the
// coordinator's host set and the workers added to its metadata, as
// scripts/citus.sh does for `make run-citus`. The APIs connect to the
// coordinator; their migrations (000011) distribute the schema by tenant.
// The logs are citus-coordinator.log, citus-worker-1.log, ... in the work
// folder.
type Citus struct {
	Coordinator *Postgres
	Workers     []*Postgres
}

// citusInstalled reports whether the server binaries of bindir have the
// citus extension (Debian's layout: ../lib/citus.so, the control file under
// /usr/share/postgresql/MAJOR/extension).
func citusInstalled(bindir string) error {
	lib := filepath.Join(filepath.Dir(bindir), "lib", "citus.so")
	control := filepath.Join("/usr/share/postgresql", filepath.Base(filepath.Dir(bindir)), "extension", "citus.control")
	for _, f := range []string{lib, control} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("citus is not installed for the PostgreSQL in %s (%s missing): "+
				"scripts/citus.sh --install installs it (CITUS_SRC=path/to/citus-13.x.tar.gz builds it)", bindir, f)
		}
	}
	return nil
}

// StartCitus starts the coordinator and the workers and forms the cluster.
// On error whatever was started is stopped and removed.
func StartCitus(ctx context.Context, workDir string) (_ *Citus, err error) {
	bindir, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	if err := citusInstalled(bindir); err != nil {
		return nil, err
	}
	c := &Citus{}
	defer func() {
		if err != nil {
			c.Close(false)
		}
	}()
	// The three nodes start side by side: each is mostly waiting for the
	// disk (initdb, CREATE EXTENSION).
	preload := []string{"shared_preload_libraries=citus"}
	names := []string{"citus-coordinator"}
	for i := range CitusWorkers {
		names = append(names, fmt.Sprintf("citus-worker-%d", i+1))
	}
	started := make([]*Postgres, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			if started[i], errs[i] = startPostgres(ctx, workDir, name, preload); errs[i] != nil {
				return
			}
			if err := execOn(ctx, started[i].URL(), `SET client_min_messages = warning`, `CREATE EXTENSION IF NOT EXISTS citus`); err != nil {
				errs[i] = fmt.Errorf("create the citus extension on %s: %w", name, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, n := range started {
			if n != nil {
				n.Close(false)
			}
		}
		return nil, err
	}
	c.Coordinator, c.Workers = started[0], started[1:]
	stmts := []string{fmt.Sprintf(`SELECT citus_set_coordinator_host('127.0.0.1', %d)`, c.Coordinator.port)}
	for _, w := range c.Workers {
		stmts = append(stmts, fmt.Sprintf(`SELECT citus_add_node('127.0.0.1', %d)`, w.port))
	}
	if err := execOn(ctx, c.Coordinator.URL(), stmts...); err != nil {
		return nil, fmt.Errorf("register the workers with the coordinator: %w", err)
	}
	return c, nil
}

// execOn runs stmts, one after the other, on one connection to url.
func execOn(ctx context.Context, url string, stmts ...string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// nodes lists the coordinator and the workers started so far.
func (c *Citus) nodes() []*Postgres {
	var out []*Postgres
	if c.Coordinator != nil {
		out = append(out, c.Coordinator)
	}
	return append(out, c.Workers...)
}

// URL is the coordinator's postgres database: what the APIs connect to.
func (c *Citus) URL() string { return c.Coordinator.URL() }

// Dirs lists the nodes' folders (kept when the run failed).
func (c *Citus) Dirs() []string {
	var out []string
	for _, n := range c.nodes() {
		out = append(out, n.Dir())
	}
	return out
}

// Close stops every node, the workers first, and removes their folders
// unless keep.
func (c *Citus) Close(keep bool) {
	nodes := c.nodes()
	for i := len(nodes) - 1; i >= 0; i-- {
		nodes[i].Close(keep)
	}
}
