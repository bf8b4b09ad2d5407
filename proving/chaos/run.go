package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Run builds the binaries, starts the stack, drives the load through the
// schedule's faults, lets the system settle, checks the invariants and
// stops everything it started, also on failure. The error is for a run that
// could not be carried out (a build failed, a process did not start); broken
// invariants are Report.Violations.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	began := time.Now()
	logf := cfg.Logf
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, err
	}
	// The nats-server is only built when needed, and the need is known
	// only from the API binary: build that first.
	bin, err := Build(ctx, cfg.RepoDir, cfg.WorkDir, cfg.Race, false)
	if err != nil {
		return nil, err
	}
	rep = &Report{Seed: cfg.Seed, Intents: cfg.Intents, Concurrency: cfg.Concurrency, Race: cfg.Race, WorkDir: cfg.WorkDir,
		CrashEvery: cfg.CrashEvery, Lease: cfg.Lease, ClientAttempts: cfg.ClientAttempts, DBFaults: cfg.DBFaults, NetFaults: cfg.NetFaults}
	outbox := cfg.Outbox == OutboxOn
	switch cfg.Outbox {
	case OutboxAuto:
		outbox = HasOutbox(ctx, bin.API)
		rep.OutboxNote = "auto: the API binary has no `api outbox` commands, so no dispatcher or consumer runs"
		if outbox {
			rep.OutboxNote = "auto: the API binary has `api outbox` commands"
		}
	case OutboxOn:
		rep.OutboxNote = "on (forced)"
	default:
		rep.OutboxNote = "off (forced)"
	}
	if outbox {
		if bin, err = Build(ctx, cfg.RepoDir, cfg.WorkDir, cfg.Race, true); err != nil {
			return nil, err
		}
	}
	rep.Features = Features{Dispatcher: outbox, Fulfillment: outbox}
	plan := NewPlan(cfg.Seed, PlanOptions{Intents: cfg.Intents, Outbox: outbox, ProxyRate: cfg.ProxyRate, CrashEvery: cfg.CrashEvery,
		Postgres: cfg.DBFaults, Network: cfg.NetFaults, Cluster: cfg.Cluster})
	rep.Plan, rep.PlanHash = plan, plan.Hash()
	if err := writeJSON(filepath.Join(cfg.WorkDir, "plan.json"), plan); err != nil {
		return nil, err
	}
	logf("chaos: seed %d, schedule %s, %d intents, %d timed faults, outbox %v; work dir %s",
		cfg.Seed, rep.PlanHash, cfg.Intents, len(plan.Steps), outbox, cfg.WorkDir)

	dbURL := cfg.DatabaseURL
	// The deferred stops below read the report through report: a run that
	// fails to start returns no report (rep is nil by then), and its
	// databases are kept all the same.
	report := rep
	var pg *Postgres
	var citus *Citus
	var workers []*pgxpool.Pool
	switch {
	case cfg.Cluster:
		if citus, err = StartCitus(ctx, cfg.WorkDir); err != nil {
			return nil, err
		}
		rep.Cluster = &ClusterFacts{Workers: len(citus.Workers)}
		defer func() {
			keep := cfg.KeepPostgres || err != nil || len(report.Violations) > 0
			citus.Close(keep)
			if keep {
				report.Cluster.Dirs = citus.Dirs()
			}
		}()
		dbURL = citus.URL()
		for _, w := range citus.Workers {
			p, err := openDB(ctx, w.URL())
			if err != nil {
				return nil, err
			}
			defer p.Close()
			workers = append(workers, p)
		}
		logf("chaos: private Citus cluster, coordinator at %s, %d workers (folders %s)", dbURL, len(citus.Workers), strings.Join(citus.Dirs(), ", "))
	case dbURL == "":
		if pg, err = StartPostgres(ctx, cfg.WorkDir); err != nil {
			return nil, err
		}
		// After the stack has stopped (deferred below, so run first).
		defer func() {
			keep := cfg.KeepPostgres || err != nil || len(report.Violations) > 0
			pg.Close(keep)
			if keep {
				report.PostgresDir = pg.Dir()
			}
		}()
		dbURL = pg.URL()
		logf("chaos: private PostgreSQL at %s (folder %s)", dbURL, pg.Dir())
	}
	db, err := openDB(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	st, err := startStack(ctx, bin, cfg.WorkDir, dbURL, cfg.Seed, outbox, cfg.NetFaults, cfg.Cluster, cfg.ProviderKeyRetention, cfg.Lease)
	if err != nil {
		return nil, err
	}
	st.pg, st.citus = pg, citus
	defer st.stop()
	r := &runner{cfg: cfg, plan: plan, db: db, workers: workers, stack: st, rep: rep, faults: &faultCounts{}, outages: &record[Outage]{}, linkFaults: &record[LinkFault]{},
		psp: &pspAdmin{url: st.pspURL, hc: &http.Client{Timeout: 10 * time.Second, Transport: bearer{key: st.pspKey, next: http.DefaultTransport}}}}
	if err := r.run(ctx); err != nil {
		return rep, err
	}
	rep.Total = time.Since(began)
	return rep, nil
}

// runner holds one run's parts.
type runner struct {
	cfg        Config
	plan       *Plan
	db         *pgxpool.Pool
	workers    []*pgxpool.Pool
	tenants    []string
	stack      *stack
	psp        *pspAdmin
	proxy      *Proxy
	driver     *driver
	faults     *faultCounts
	outages    *record[Outage]
	linkFaults *record[LinkFault]
	stats      loadStats
	rep        *Report
}

func (r *runner) run(ctx context.Context) error {
	logf := r.cfg.Logf
	skus, err := scanAll(ctx, r.db, `SELECT DISTINCT sku FROM products ORDER BY 1`,
		func(row pgx.Rows) (s string, err error) { return s, row.Scan(&s) })
	if err != nil {
		return fmt.Errorf("read the catalog: %w", err)
	}
	if len(skus) == 0 {
		return errors.New("the catalog is empty: the APIs did not seed the demo tenants")
	}
	before, err := stock(ctx, r.db)
	if err != nil {
		return err
	}
	if r.tenants, err = scanAll(ctx, r.db, `SELECT id::text FROM tenants ORDER BY 1`,
		func(row pgx.Rows) (s string, err error) { return s, row.Scan(&s) }); err != nil {
		return fmt.Errorf("read the tenants: %w", err)
	}
	if r.rep.Cluster != nil {
		if err := r.describeCluster(ctx); err != nil {
			return err
		}
		f := r.rep.Cluster
		logf("chaos: citus %s, %d distributed and %d reference tables, shards per worker %v; %d nats-servers",
			f.Citus, f.Distributed, f.Reference, f.Shards, f.NATSServers)
	}
	if r.proxy, err = StartProxy(r.plan, r.stack.addrs()); err != nil {
		return err
	}
	defer r.proxy.Close()
	if r.driver, err = newDriver(r.plan, r.proxy.URL(), skus, r.cfg.IntentBudget, r.cfg.ClientAttempts, r.cfg.Concurrency, &r.stats); err != nil {
		return err
	}

	loadBegan := time.Now()
	outcomes := r.load(ctx)
	r.rep.Load = time.Since(loadBegan)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("load interrupted: %w", err)
	}
	logf("chaos: load done in %v; settling", r.rep.Load.Round(time.Second))

	settleBegan := time.Now()
	r.proxy.SetFaulty(false)
	if r.stack.links != nil {
		r.stack.links.heal(ctx)
	}
	if err := r.psp.reset(ctx); err != nil {
		return err
	}
	if err := r.stack.ensureUp(ctx); err != nil {
		return err
	}
	if _, err := r.settle(ctx); err != nil {
		return err
	}
	r.resume(ctx, outcomes)
	unsettled, err := r.settle(ctx)
	if err != nil {
		return err
	}
	r.rep.Settle = time.Since(settleBegan)
	r.rep.Unsettled = unsettled
	if unsettled != "" {
		logf("chaos: not settled: %s", unsettled)
	}

	h, err := r.snapshot(ctx, before, outcomes)
	if err != nil {
		return err
	}
	r.finish(ctx, h)
	return nil
}

// load runs every intent with Concurrency clients and feeds the schedule's
// steps to the executor as the intents reach them.
func (r *runner) load(ctx context.Context) []Outcome {
	// Three lanes: process kills one after the other (never two processes
	// down at once: an API is never restarted while the database is away),
	// network faults one after the other (each holds its link broken for
	// a while), everything else beside them, so that a slow restart or a
	// long network fault does not hold back the provider's faults.
	kills := make(chan Step, len(r.plan.Steps))
	others := make(chan Step, len(r.plan.Steps))
	network := make(chan Step, len(r.plan.Steps))
	ex := &executor{stack: r.stack, db: r.db, workers: r.workers, tenants: r.tenants, psp: r.psp, faults: r.faults, outages: r.outages, linkFaults: r.linkFaults, logf: r.cfg.Logf}
	var exWG sync.WaitGroup
	exWG.Go(func() { ex.run(ctx, kills) })
	exWG.Go(func() { ex.run(ctx, others) })
	exWG.Go(func() { ex.run(ctx, network) })
	release := func(s Step) {
		switch s.Kind {
		case StepKillAPI, StepKillRecorder, StepKillDispatcher, StepKillBroker, StepKillPostgres, StepPostgresOutage:
			kills <- s
		case StepNetLatency, StepNetCut, StepNetBlackhole, StepNetBandwidth:
			network <- s
		default:
			others <- s
		}
	}

	outcomes := make([]Outcome, len(r.plan.Intents))
	intents := make(chan Intent)
	var wg sync.WaitGroup
	for range r.cfg.Concurrency {
		wg.Go(func() {
			for in := range intents {
				outcomes[in.Index] = r.driver.run(ctx, in)
			}
		})
	}
	next, began := 0, time.Now()
	tenth := max(1, len(r.plan.Intents)/10)
feed:
	for i, in := range r.plan.Intents {
		for next < len(r.plan.Steps) && r.plan.Steps[next].At <= i {
			release(r.plan.Steps[next])
			next++
		}
		select {
		case intents <- in:
		case <-ctx.Done():
			break feed
		}
		if (i+1)%tenth == 0 {
			r.cfg.Logf("chaos: %d/%d intents started after %v; %d calls, %d retries, faults %v",
				i+1, len(r.plan.Intents), time.Since(began).Round(time.Second), r.stats.calls.Load(), r.stats.retries.Load(), r.faults.snapshot())
		}
	}
	close(intents)
	wg.Wait()
	for ; next < len(r.plan.Steps); next++ {
		release(r.plan.Steps[next]) // the ends of windows
	}
	close(kills)
	close(others)
	close(network)
	exWG.Wait()
	return outcomes
}

// settle polls until nothing is in flight any more, at most SettleTimeout,
// and gives up early when nothing moved for settleStall. It returns what was
// still unsettled when it stopped ("" when settled).
func (r *runner) settle(ctx context.Context) (string, error) {
	deadline := time.Now().Add(r.cfg.SettleTimeout)
	last, moved := "", time.Now()
	for {
		what, err := r.inFlight(ctx)
		if err != nil || what == "" {
			return what, err
		}
		if what != last {
			last, moved = what, time.Now()
		}
		if time.Now().After(deadline) || time.Since(moved) > settleStall {
			return what, nil
		}
		if err := pause(ctx, 250*time.Millisecond); err != nil {
			return what, err
		}
	}
}

// settleStall is how long settle waits without any progress: longer than
// every lease and backoff of the system (the outbox's 30s lease above all).
const settleStall = 75 * time.Second

// inFlight describes the work still under way, "" when there is none.
func (r *runner) inFlight(ctx context.Context) (string, error) {
	checks := [][2]string{
		{"pending payments", `SELECT count(*) FROM payments WHERE status = 'pending'`},
		{"pending refunds", `SELECT count(*) FROM refunds WHERE status = 'pending'`},
		{"pending money records", `SELECT count(*) FROM api_idempotency WHERE state = 'pending' AND operation <> 'orders.create'`},
		{"unprocessed webhooks", `SELECT count(*) FROM webhook_receipts WHERE processed_at IS NULL`},
	}
	if r.rep.Features.Dispatcher {
		checks = append(checks, [2]string{"unpublished events", `SELECT count(*) FROM outbox_events WHERE published_at IS NULL`})
	}
	if r.rep.Features.Fulfillment {
		checks = append(checks, [2]string{"unconsumed events", `SELECT count(*) FROM outbox_events e
			WHERE e.event_type IN ('payment.succeeded', 'refund.succeeded') AND NOT EXISTS (
				SELECT 1 FROM processed_messages m
				WHERE m.tenant_id = e.tenant_id AND m.message_id = e.id::text AND m.subscriber = 'fulfillment')`})
	}
	var parts []string
	for _, c := range checks {
		var n int
		if err := r.db.QueryRow(ctx, c[1]).Scan(&n); err != nil {
			return "", fmt.Errorf("%s: %w", c[0], err)
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, c[0]))
		}
	}
	d, err := r.psp.deliveries(ctx)
	if err != nil {
		return "", err
	}
	if d.Pending > 0 {
		parts = append(parts, fmt.Sprintf("%d webhooks not delivered", d.Pending))
	}
	return strings.Join(parts, ", "), nil
}

// resume sends every call that got no definite answer again, with its key,
// one intent's calls in order: a real client resuming its intents.
func (r *runner) resume(ctx context.Context, outcomes []Outcome) {
	for i := range outcomes {
		o := &outcomes[i]
		for j := range o.Calls {
			c := &o.Calls[j]
			if c.Definite() {
				continue
			}
			res := r.driver.resume(ctx, r.plan.Intents[o.Intent], *o, *c)
			c.Resumed = &res
			r.rep.Resumed++
		}
	}
}

// snapshot records the History.
func (r *runner) snapshot(ctx context.Context, before []Stock, outcomes []Outcome) (History, error) {
	h := History{Features: r.rep.Features, Outcomes: outcomes}
	var err error
	if h.DB, err = snapshotDB(ctx, r.db); err != nil {
		return h, err
	}
	h.DB.StockBefore = before
	if h.Ledger, err = fetchLedger(ctx, r.psp.hc, r.stack.pspURL); err != nil {
		return h, err
	}
	if r.rep.Features.Dispatcher {
		if h.Stream, err = fetchStream(ctx, r.stack.natsURL); err != nil {
			return h, err
		}
	}
	h.DataRaces = int(r.stack.races.Load())
	h.Outages = r.outages.list()
	h.LinkFaults = r.linkFaults.list()
	return h, nil
}

// finish fills the report from the history and the counters.
func (r *runner) finish(ctx context.Context, h History) {
	rep := r.rep
	rep.History = &h
	rep.Violations = Check(h)
	rep.ByKind = map[Kind]int{}
	for _, v := range rep.Violations {
		rep.ByKind[v.Kind]++
	}
	rep.Calls, rep.GiveUps = map[string]int{}, map[string]int{}
	for _, o := range h.Outcomes {
		for _, c := range o.Calls {
			rep.Calls[c.Op]++
			if c.Op == OpGiveUp {
				rep.GiveUps[giveUpOutcome(c)]++
			}
		}
	}
	rep.Attempts, rep.Retries, rep.Replayed = r.stats.attempts.Load(), r.stats.retries.Load(), r.stats.replayed.Load()
	rep.Proxy = r.proxy.Stats()
	rep.Charges = len(h.Ledger.Charges)
	rep.Steps = map[StepKind]int{}
	for _, s := range r.plan.Steps {
		rep.Steps[s.Kind]++
	}
	f := r.faults.snapshot()
	f[ResponseDropped] = int(rep.Proxy.Dropped)
	f[ConnectionReset] = int(rep.Proxy.Reset)
	f[ProviderFailed] = int(r.stack.pspLog.failed.Load())
	f[ProviderDropped] = int(r.stack.pspLog.dropped.Load())
	f[ProviderTimedOut] = int(r.stack.pspLog.hung.Load())
	if d, err := r.psp.deliveries(ctx); err == nil {
		rep.Webhooks = WebhookStats{Events: d.Events, Delivered: d.Succeeded, Abandoned: d.Abandoned, Attempts: d.Attempts}
		f[WebhookDuplicated] = max(0, d.Succeeded+d.Abandoned+d.Pending-d.Events)
	}
	rep.Faults = f
	rep.NetworkByLink = r.faults.linkSnapshot()
	if rep.Cluster != nil {
		rep.Cluster.ByNode = r.faults.nodeSnapshot()
		if h.Stream != nil {
			rep.Cluster.StreamReplicas = h.Stream.Replicas
		}
	}
	if r.stack.links != nil {
		rep.LinkBytes = r.stack.links.bytes()
	}
	rep.Outages = outageStats(h.Outages)
	rep.GaveUp = GaveUpDuringOutages(h)
	rep.Paths = r.stack.apiLog.counts()
	rep.InternalErrors, rep.InternalErrorLines = r.stack.apiLog.internalErrors()
	unplaced := r.faults.unplacedSnapshot()
	for _, k := range rep.MissingFaults() {
		if why, ok := unplaced[k]; ok {
			if rep.Unplaced == nil {
				rep.Unplaced = map[FaultKind]string{}
			}
			rep.Unplaced[k] = why
		}
	}
	rep.KeyRetention = r.cfg.ProviderKeyRetention
	if err := writeJSON(filepath.Join(r.cfg.WorkDir, "history.json"), h); err != nil {
		r.cfg.Logf("chaos: save history: %v", err)
	}
}

// describeCluster records the Citus cluster's facts: the extension's
// version, the tables the migrations distributed, where their shards are.
func (r *runner) describeCluster(ctx context.Context) error {
	f := r.rep.Cluster
	f.NATSServers = len(r.stack.nats)
	if err := r.db.QueryRow(ctx, `SELECT extversion FROM pg_extension WHERE extname = 'citus'`).Scan(&f.Citus); err != nil {
		return fmt.Errorf("the citus extension: %w", err)
	}
	if err := r.db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE partmethod = 'h'), count(*) FILTER (WHERE partmethod = 'n')
		FROM pg_dist_partition`).Scan(&f.Distributed, &f.Reference); err != nil {
		return fmt.Errorf("the distributed tables: %w", err)
	}
	if f.Distributed == 0 {
		return errors.New("the migrations distributed no table on the Citus cluster")
	}
	f.Shards = map[string]int{}
	for i, w := range r.stack.citus.Workers {
		var n int
		if err := r.db.QueryRow(ctx, `SELECT count(*) FROM pg_dist_shard_placement WHERE nodeport = $1`, w.port).Scan(&n); err != nil {
			return fmt.Errorf("the shards of worker %d: %w", i+1, err)
		}
		f.Shards[fmt.Sprintf("worker-%d", i+1)] = n
	}
	return nil
}

func writeJSON(path string, v any) error {
	raw, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}
