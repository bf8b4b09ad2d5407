package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/peterldowns/pgtestdb/migrators/common"

	"github.com/oncepay/oncepay/db"
	"github.com/oncepay/oncepay/internal/postgres"
)

// A Citus cluster keeps its metadata per database, and a distributed table
// lives in a database of the same name on every node. A test's database on
// Citus is therefore one database on each node, each cloned from that
// node's copy of a migrated template database: the coordinator's copy keeps
// the metadata that names the shards, the workers' copies hold the shards
// under the same names, and the clones agree with each other as the
// templates did. Nobody may be connected to a template while it is cloned,
// Citus's own maintenance daemon included: a finished template refuses
// connections (ALLOW_CONNECTIONS false), which is also how a later process
// knows it is finished.

// citusTemplateRevision names how makeTemplate makes a template: raise it
// when that changes, so that no process clones a template made the old way.
const citusTemplateRevision = "r1"

// citusCluster is the Citus cluster DATABASE_URL names, when it names the
// coordinator of one.
type citusCluster struct {
	base    *url.URL // the coordinator, as DATABASE_URL names it
	workers []string // host:port of each worker
}

var (
	citusMu     sync.Mutex
	citusFound  = map[string]*citusCluster{} // by the URL it was found at; nil for a plain PostgreSQL
	citusTplFor = map[string]bool{}          // templates made or found ready by this process
)

// detectCitus reports the Citus cluster behind raw, or nil for a plain
// PostgreSQL (no citus extension in its database, or no workers).
func detectCitus(raw string) (*citusCluster, error) {
	citusMu.Lock()
	defer citusMu.Unlock()
	if c, ok := citusFound[raw]; ok {
		return c, nil
	}
	c, err := lookForCitus(raw)
	if err != nil {
		return nil, err
	}
	citusFound[raw] = c
	return c, nil
}

func lookForCitus(raw string) (*citusCluster, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, raw)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	var has bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`).Scan(&has); err != nil || !has {
		return nil, err
	}
	rows, err := conn.Query(ctx, `SELECT nodename, nodeport FROM pg_dist_node WHERE groupid <> 0 AND noderole = 'primary' ORDER BY nodeid`)
	if err != nil {
		return nil, err
	}
	var workers []string
	for rows.Next() {
		var host string
		var port int
		if err := rows.Scan(&host, &port); err != nil {
			return nil, err
		}
		workers = append(workers, net.JoinHostPort(host, strconv.Itoa(port)))
	}
	if err := rows.Err(); err != nil || len(workers) == 0 {
		return nil, err
	}
	return &citusCluster{base: u, workers: workers}, nil
}

// urlOf returns the URL of database name on the node at hostport ("" for
// the coordinator), as the same user.
func (c *citusCluster) urlOf(hostport, name string) string {
	u := *c.base
	if hostport != "" {
		u.Host = hostport
	}
	u.Path = "/" + name
	q := u.Query()
	if q.Get("sslmode") == "" {
		q.Set("sslmode", "disable")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// nodes lists the workers, then the coordinator (""): the order databases
// are made in, so that the coordinator never names a database a worker
// lacks.
func (c *citusCluster) nodes() []string { return append(append([]string{}, c.workers...), "") }

// exec runs statements, one by one, in database dbname of node hostport.
func (c *citusCluster) exec(ctx context.Context, hostport, dbname string, statements ...string) error {
	conn, err := pgx.Connect(ctx, c.urlOf(hostport, dbname))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, s := range statements {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s on %s: %w", s, c.nodeName(hostport), err)
		}
	}
	return nil
}

func (c *citusCluster) nodeName(hostport string) string {
	if hostport == "" {
		return "the coordinator " + c.base.Host
	}
	return "worker " + hostport
}

// template makes sure the migrated template database exists on every node
// and returns its name. Processes (go test runs packages in parallel) take
// turns with an advisory lock on the coordinator.
func (c *citusCluster) template(ctx context.Context) (string, error) {
	hash, err := common.HashDirs(db.Migrations, "*.sql", "migrations")
	if err != nil {
		return "", err
	}
	name := "oncepay_citus_tpl_" + citusTemplateRevision + "_" + hash[:16]
	citusMu.Lock()
	defer citusMu.Unlock()
	if citusTplFor[name] {
		return name, nil
	}
	lock, err := pgx.Connect(ctx, c.urlOf("", trimSlash(c.base.Path)))
	if err != nil {
		return "", err
	}
	defer lock.Close(ctx)
	if _, err := lock.Exec(ctx, `SELECT pg_advisory_lock(hashtext('oncepay testdb citus template'))`); err != nil {
		return "", err
	}
	var ready bool
	if err := lock.QueryRow(ctx, `SELECT count(*) = 1 AND bool_and(NOT datallowconn) FROM pg_database WHERE datname = $1`, name).Scan(&ready); err != nil {
		return "", err
	}
	if !ready {
		if err := c.makeTemplate(ctx, name); err != nil {
			return "", fmt.Errorf("make the Citus template database %s: %w", name, err)
		}
	}
	citusTplFor[name] = true
	return name, nil
}

func (c *citusCluster) makeTemplate(ctx context.Context, name string) error {
	admin := trimSlash(c.base.Path)
	coordinator := c.base.Hostname()
	coordinatorPort := c.base.Port()
	if err := c.dropEverywhere(ctx, name); err != nil { // a template a crashed run left half made
		return err
	}
	for _, n := range c.nodes() {
		// Four shards per table, not Citus's default 32: a test's database
		// is cloned on every node, and a clone's cost grows with the
		// relations it copies. Four still spread a table over both
		// workers, so a statement that fans out still shows it.
		if err := c.exec(ctx, n, admin, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize(),
			"ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" SET citus.shard_count = 4"); err != nil {
			return err
		}
		if err := c.exec(ctx, n, name, "SET client_min_messages = warning", "CREATE EXTENSION citus"); err != nil {
			return err
		}
	}
	register := []string{fmt.Sprintf("SELECT citus_set_coordinator_host('%s', %s)", coordinator, coordinatorPort)}
	for _, w := range c.workers {
		host, port, _ := net.SplitHostPort(w)
		register = append(register, fmt.Sprintf("SELECT citus_add_node('%s', %s)", host, port))
	}
	if err := c.exec(ctx, "", name, register...); err != nil {
		return err
	}
	if err := postgres.Migrate(ctx, c.urlOf("", name), nil); err != nil {
		return err
	}
	for _, n := range c.nodes() {
		if err := c.exec(ctx, n, admin,
			"ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" ALLOW_CONNECTIONS false",
			fmt.Sprintf("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '%s'", name),
		); err != nil {
			return err
		}
	}
	return nil
}

// dropEverywhere drops database name on every node. The nodes connect to
// each other's copies (the maintenance daemons: 2PC recovery, deadlock
// detection, metadata), and a connection FORCE ended comes straight back:
// every copy refuses new connections first, then each is dropped.
func (c *citusCluster) dropEverywhere(ctx context.Context, name string) error {
	var errs []error
	for _, n := range c.nodes() {
		err := c.exec(ctx, n, trimSlash(c.base.Path), fmt.Sprintf(`DO $$ BEGIN
			IF EXISTS (SELECT 1 FROM pg_database WHERE datname = '%s') THEN
				ALTER DATABASE %s ALLOW_CONNECTIONS false;
			END IF; END $$`, name, pgx.Identifier{name}.Sanitize()))
		errs = append(errs, err)
	}
	nodes := c.nodes()
	for i := len(nodes) - 1; i >= 0; i-- { // the coordinator first
		errs = append(errs, c.drop(ctx, nodes[i], name))
	}
	return errors.Join(errs...)
}

// drop drops database name on node n, if it is there. FORCE ends the
// sessions in it, but Citus's maintenance daemon may be starting there just
// then: that is "being accessed by other users" (55006) for a moment, and
// worth another try.
func (c *citusCluster) drop(ctx context.Context, n, name string) error {
	for {
		err := c.exec(ctx, n, trimSlash(c.base.Path), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// citusURL returns the URL of a fresh, migrated database for t on the Citus
// cluster c: a clone of the template on every node. It is dropped when t
// ends, unless t failed (then it is kept for inspection, like pgtestdb's).
func citusURL(t testing.TB, c *citusCluster) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tpl, err := c.template(ctx)
	if err != nil {
		t.Fatalf("testdb on Citus: %v", err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "oncepay_citus_" + hex.EncodeToString(b[:])
	admin := trimSlash(c.base.Path)
	for _, n := range c.nodes() {
		if err := c.exec(ctx, n, admin, "SET client_min_messages = warning",
			"CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{tpl}.Sanitize()); err != nil {
			t.Fatalf("testdb on Citus: %v", err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testdb on Citus: kept database %s on every node", name)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.dropEverywhere(ctx, name); err != nil {
			t.Errorf("testdb on Citus: %v", err)
		}
	})
	return c.urlOf("", name)
}
