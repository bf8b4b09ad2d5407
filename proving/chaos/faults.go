package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os/exec"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/proving/pspsim"
)

// faultCounts counts injected faults by kind, and the network faults by
// the dependency whose link they broke.
type faultCounts struct {
	mu    sync.Mutex
	n     map[FaultKind]int
	links map[string]int
	// nodes counts a cluster run's faults per node of the cluster
	// ("coordinator", "worker-1", "nats-0", ...).
	nodes map[FaultKind]map[string]int
	// unplaced says, per kind, why a step that was to inject it could not
	// place it in time (the last such step's reason): a trap that caught
	// nothing, a terminate step that found no connection. It matters only
	// for a kind that ends the run never injected (Report.Unplaced).
	unplaced map[FaultKind]string
}

// notPlaced records that a step of kind k ran and could not place its
// fault in time, and why.
func (f *faultCounts) notPlaced(k FaultKind, why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unplaced == nil {
		f.unplaced = map[FaultKind]string{}
	}
	f.unplaced[k] = why
}

func (f *faultCounts) unplacedSnapshot() map[FaultKind]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.unplaced)
}

func (f *faultCounts) addNode(k FaultKind, node string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.nodes == nil {
		f.nodes = map[FaultKind]map[string]int{}
	}
	if f.nodes[k] == nil {
		f.nodes[k] = map[string]int{}
	}
	f.nodes[k][node] += n
}

func (f *faultCounts) nodeSnapshot() map[FaultKind]map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[FaultKind]map[string]int{}
	for k, m := range f.nodes {
		out[k] = maps.Clone(m)
	}
	return out
}

func (f *faultCounts) addLink(dep string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.links == nil {
		f.links = map[string]int{}
	}
	f.links[dep]++
}

func (f *faultCounts) linkSnapshot() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.links)
}

func (f *faultCounts) add(k FaultKind, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = map[FaultKind]int{}
	}
	f.n[k] += n
}

func (f *faultCounts) snapshot() map[FaultKind]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[FaultKind]int, len(f.n))
	for k, v := range f.n {
		out[k] = v
	}
	return out
}

// pspAdmin changes the simulator's faults. PUT /admin/faults replaces all
// settings, so every change reads the current ones (with one-shot counters
// as consumed so far) and writes them back with the change applied.
type pspAdmin struct {
	url string
	hc  *http.Client
	mu  sync.Mutex
}

func (a *pspAdmin) update(ctx context.Context, change func(*pspsim.Faults)) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var f pspsim.Faults
	if err := getJSON(ctx, a.hc, a.url+"/admin/faults", &f); err != nil {
		return fmt.Errorf("read provider faults: %w", err)
	}
	change(&f)
	body, err := json.Marshal(f)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, a.url+"/admin/faults", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := a.hc.Do(req)
	if err != nil {
		return fmt.Errorf("set provider faults: %w", err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<16))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("set provider faults: %d %s", res.StatusCode, raw)
	}
	return nil
}

// reset clears every provider fault (the settle phase).
func (a *pspAdmin) reset(ctx context.Context) error {
	return a.update(ctx, func(f *pspsim.Faults) { *f = pspsim.Faults{} })
}

// deliveries returns the simulator's webhook delivery counters.
func (a *pspAdmin) deliveries(ctx context.Context) (pspsim.DeliveryStats, error) {
	var d pspsim.DeliveryStats
	err := getJSON(ctx, a.hc, a.url+"/admin/deliveries", &d)
	return d, err
}

// replayAge is how old an event must be for its replay to pass the
// broker's duplicate window (JetStream's default is two minutes).
const replayAge = 150 * time.Second

// executor runs the schedule's steps, one after the other, as the load
// reaches them.
type executor struct {
	stack  *stack
	db     *pgxpool.Pool
	psp    *pspAdmin
	faults *faultCounts
	// outages records the database's absences (databaseDown), linkFaults
	// the network faults (netFault).
	outages    *record[Outage]
	linkFaults *record[LinkFault]
	// workers are pools on the Citus workers (nil without the cluster);
	// tenants are the tenants' ids, which every locking read of a trap
	// names (Citus locks rows of one shard at a time).
	workers []*pgxpool.Pool
	tenants []string
	// trapWithin bounds how long a trap is tried (default trapWindow).
	trapWithin time.Duration
	logf       func(format string, args ...any)
}

// unplaced records that a step could not place its fault in time and logs
// it. A fault not placed in time fails no run by itself: a short run
// reports such kinds and passes, a long run fails when the kind was never
// injected at all (Report.RunFailures).
func (e *executor) unplaced(k FaultKind, why string) {
	e.faults.notPlaced(k, why)
	e.logf("chaos: %s not placed: %s", k, why)
}

// run executes steps until the channel closes. A step that fails is
// logged, and what it broke is repaired, so the run goes on.
func (e *executor) run(ctx context.Context, steps <-chan Step) {
	for st := range steps {
		if ctx.Err() != nil {
			continue // drain
		}
		if err := e.exec(ctx, st); err != nil && ctx.Err() == nil {
			e.logf("chaos: step %s at intent %d: %v", st.Kind, st.At, err)
			if err := e.stack.ensureUp(ctx); err != nil {
				e.logf("chaos: restart after failed step: %v", err)
			}
		}
	}
}

func (e *executor) exec(ctx context.Context, st Step) error {
	switch st.Kind {
	case StepKillAPI:
		e.stack.killAPI(st.Target)
		e.faults.add(APIKilled, 1)
		return e.stack.restartAPI(ctx, st.Target, st.Down)
	case StepTerminatePG:
		n, err := terminateBackends(ctx, terminateWithin, func(ctx context.Context) (n int, err error) {
			err = e.db.QueryRow(ctx, terminateAPIBackends).Scan(&n)
			return n, err
		})
		e.faults.add(BackendsTerminated, n)
		if e.workers != nil {
			e.faults.addNode(BackendsTerminated, "coordinator", n)
		}
		if n == 0 && ctx.Err() == nil {
			e.unplaced(BackendsTerminated, terminateFailure(err))
		}
		return err
	case StepTerminateWorker:
		return e.terminateWorker(ctx, st.Target)
	case StepProviderFail:
		return e.psp.update(ctx, func(f *pspsim.Faults) { f.FailNext += st.N })
	case StepProviderDrop:
		return e.psp.update(ctx, func(f *pspsim.Faults) { f.DropNext += st.N })
	case StepProviderTimeout:
		return e.psp.update(ctx, func(f *pspsim.Faults) { f.TimeoutNext += st.N })
	case StepProviderRates:
		return e.psp.update(ctx, func(f *pspsim.Faults) {
			f.FailRate, f.DropRate = 0, 0
			if st.N > 0 {
				f.FailRate, f.DropRate = 0.15, 0.05*float64(st.N)
			}
		})
	case StepWebhookDup:
		if st.N == 0 {
			e.awaitDuplicate(ctx)
		}
		return e.psp.update(ctx, func(f *pspsim.Faults) { f.WebhookDuplicates = st.N })
	case StepWebhookReorder:
		if st.N > 0 {
			e.faults.add(WebhookReordered, 1)
		}
		return e.psp.update(ctx, func(f *pspsim.Faults) { f.WebhookReorder = st.N > 0 })
	case StepKillDispatcher:
		return e.killDispatcher(ctx, st.Down)
	case StepKillRecorder:
		return e.killRecorder(ctx, st.Down)
	case StepKillBroker:
		return e.killBroker(ctx, st)
	case StepReplay:
		return e.replay(ctx, st.Pick)
	case StepKillPostgres, StepPostgresOutage:
		return e.databaseDown(ctx, st)
	case StepNetLatency, StepNetCut, StepNetBlackhole, StepNetBandwidth:
		return e.netFault(ctx, st)
	}
	return fmt.Errorf("unknown step %q", st.Kind)
}

// awaitDuplicate, before a duplicates window closes, waits (at most 30 s)
// until the provider has delivered some webhook more than once in the run.
// The steps run one after the other, so a step that waited long before
// (a restart) can leave the window's two ends back to back, with no charge
// between them: the window then stays open until one was duplicated, or
// the load has long ended.
func (e *executor) awaitDuplicate(ctx context.Context) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if d, err := e.psp.deliveries(ctx); err == nil && d.Succeeded+d.Abandoned+d.Pending > d.Events {
			return
		}
		if pause(ctx, 100*time.Millisecond) != nil {
			return
		}
	}
	if ctx.Err() == nil {
		e.unplaced(WebhookDuplicated, "no webhook delivered twice while the duplicates window was open and 30s after")
	}
}

// terminateWorker ends, on Citus worker i, every connection the
// coordinator holds to it (application_name "citus_internal ..."): the
// APIs' statements and transactions that run on that worker's shards
// fail mid-way, and the coordinator connects again.
func (e *executor) terminateWorker(ctx context.Context, i int) error {
	if i < 0 || i >= len(e.workers) {
		return fmt.Errorf("no Citus worker %d", i)
	}
	n, err := terminateBackends(ctx, terminateWithin, func(ctx context.Context) (n int, err error) {
		err = e.workers[i].QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()
			  AND application_name LIKE 'citus_internal%'`).Scan(&n)
		return n, err
	})
	e.faults.add(WorkerBackendsTerminated, n)
	e.faults.addNode(WorkerBackendsTerminated, fmt.Sprintf("worker-%d", i+1), n)
	if n == 0 && ctx.Err() == nil {
		e.unplaced(WorkerBackendsTerminated, fmt.Sprintf("worker-%d: %s", i+1, terminateFailure(err)))
	}
	return err
}

// terminateFailure says why a terminate step terminated nothing within
// terminateWithin: the database never answered (err), or it had no
// connection to terminate.
func terminateFailure(err error) string {
	if err != nil {
		return fmt.Sprintf("the database did not answer within %v: %v", terminateWithin, err)
	}
	return fmt.Sprintf("no connection to terminate within %v", terminateWithin)
}

// terminateAPIBackends terminates the APIs' connections to the database
// (the stack names them oncepay-api-N) and counts them.
const terminateAPIBackends = `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
	WHERE application_name ~ '^oncepay-api-[0-9]+$' AND datname = current_database()`

// terminateWithin bounds how long a step that terminates backends waits
// for the database to be back (a postgres_outage lasts up to about 6 s)
// or for a backend to terminate.
const terminateWithin = 30 * time.Second

// terminateBackends runs terminate, which terminates backends and counts
// them, until it terminated at least one, polling for up to within: a step
// that meets the database away (its outage or kill, timed independently of
// the steps) or no connection to terminate at that moment waits for them,
// so the fault is injected instead of skipped. It returns the last error
// when the database never answered, and 0 with no error when it answered
// but had nothing to terminate.
func terminateBackends(ctx context.Context, within time.Duration, terminate func(context.Context) (int, error)) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		n, err := terminate(ctx)
		if err == nil && n > 0 {
			return n, nil
		}
		if err == nil || ctx.Err() == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return 0, last
		case <-tick.C:
		}
	}
}

// killBroker SIGKILLs one nats-server (in a cluster run the one the step
// names, or, with st.N == 1, the event stream's leader of the moment) and
// starts it again on its ports and store after st.Down.
func (e *executor) killBroker(ctx context.Context, st Step) error {
	i := 0
	if e.stack.cluster {
		i = st.Target % len(e.stack.nats)
		if st.N == 1 {
			leader, err := e.stack.streamLeader(ctx)
			if err != nil {
				e.logf("chaos: the stream's leader: %v; killing nats-%d instead", err, i)
			} else {
				i = leader
				e.faults.addNode(BrokerKilled, "stream leader", 1)
			}
		}
		e.faults.addNode(BrokerKilled, fmt.Sprintf("nats-%d", i), 1)
		e.logf("chaos: killing nats-%d for %v", i, st.Down.Round(time.Millisecond))
	}
	e.stack.killNATS(i)
	e.faults.add(BrokerKilled, 1)
	return e.stack.restartNATS(ctx, i, st.Down)
}

// replay runs the operator's `api outbox replay <event-id>` on a published
// payment.succeeded or refund.succeeded event chosen by pick. It prefers
// events published more than replayAge ago: JetStream drops a message id it
// saw within its duplicate window (two minutes by default), so only an older
// event reaches the consumers again and tests their inbox.
func (e *executor) replay(ctx context.Context, pick uint64) error {
	var id string
	for _, age := range []time.Duration{replayAge, 0} {
		where := `FROM outbox_events WHERE event_type IN ('payment.succeeded', 'refund.succeeded')
			AND published_at IS NOT NULL AND published_at < now() - make_interval(secs => $1)`
		var n int64
		if err := e.db.QueryRow(ctx, `SELECT count(*) `+where, age.Seconds()).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			continue
		}
		if err := e.db.QueryRow(ctx, `SELECT id::text `+where+` ORDER BY seq OFFSET $2 LIMIT 1`, age.Seconds(), int64(pick%uint64(n))).Scan(&id); err != nil {
			return err
		}
		break
	}
	if id == "" {
		e.unplaced(OperatorReplayed, "no payment.succeeded or refund.succeeded event published yet")
		return nil
	}
	// An operator whose replay fails (the broker is down: another step of
	// the schedule may have killed it for up to two seconds) runs it again.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		cmd := exec.CommandContext(ctx, e.stack.bin.API, "outbox", "replay", id)
		cmd.Env = append(baseEnv(), "DATABASE_URL="+e.stack.dbURL, "NATS_URL="+e.stack.natsURL, "LOG_LEVEL=warn")
		cmd.Dir = e.stack.dir
		cmd.SysProcAttr = procAttr()
		out, err := cmd.CombinedOutput()
		if err == nil {
			e.faults.add(OperatorReplayed, 1)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("api outbox replay %s: %w\n%s", id, err, out)
		case <-time.After(wait):
		}
	}
}
