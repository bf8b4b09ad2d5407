package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
)

// maxListed bounds the violations listed per kind; the rest are counted.
const maxListed = 20

// Print writes the report for a person: what ran, what was injected, what
// was checked, and every violation (up to maxListed per kind).
func (rep *Report) Print(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("oncepay chaos run")
	p("  seed %d (schedule %s), %d intents, %d concurrent clients, race detector %v", rep.Seed, rep.PlanHash, rep.Intents, rep.Concurrency, rep.Race)
	pgNote := " (a server of the caller's: no database faults)"
	if rep.DBFaults {
		pgNote = " (the run's own cluster, killed and stopped on schedule)"
	}
	if c := rep.Cluster; c != nil {
		p("  stack: 2 x api serve, 1 pspsim, Citus %s (the run's own: a coordinator and %d workers; %d tables distributed by tenant, %d reference tables; shards %s)%s",
			c.Citus, c.Workers, c.Distributed, c.Reference, nodeCounts(c.Shards), map[bool]string{true: fmt.Sprintf(", %d nats-servers as a JetStream cluster (stream R%d)", c.NATSServers, c.StreamReplicas), false: ""}[rep.Features.Dispatcher])
		p("  cluster run: no whole-database faults (postgres_killed, postgres_outage) and no network faults; the APIs reach the coordinator and the servers directly")
	} else {
		p("  stack: 2 x api serve, 1 pspsim, PostgreSQL%s%s", pgNote, map[bool]string{true: ", 1 nats-server", false: ""}[rep.Features.Dispatcher])
	}
	if rep.NetFaults {
		p("  the APIs reach PostgreSQL, NATS and the provider through fault proxies (toxiproxy) that break the links on schedule")
	}
	crashes := "off"
	if rep.CrashEvery > 0 {
		crashes = fmt.Sprintf("one per %d intents", rep.CrashEvery)
	}
	p("  process crashes %s; IDEMPOTENCY_LEASE %v; client attempts per call %d", crashes, rep.Lease, rep.ClientAttempts)
	p("  outbox: %s", rep.OutboxNote)
	p("  time: load %v, settle %v, total %v", rep.Load.Round(time.Second), rep.Settle.Round(time.Second), rep.Total.Round(time.Second))
	p("  work dir: %s", rep.WorkDir)
	if rep.Cluster != nil && len(rep.Cluster.Dirs) > 0 {
		p("  Citus nodes kept in %s (their logs: citus-*.log in the work dir)", strings.Join(rep.Cluster.Dirs, ", "))
	}
	if rep.PostgresDir != "" {
		p("  PostgreSQL cluster kept in %s (its log: postgres.log in the work dir)", rep.PostgresDir)
	}
	if rep.Unsettled != "" {
		p("  NOT SETTLED when settling stopped: %s", rep.Unsettled)
	}
	p("load")
	p("  calls: %d orders, %d payments, %d refunds, %d cancels; HTTP attempts %d; client retries %d; replayed answers %d; resumed after settling %d",
		rep.Calls[OpOrder], rep.Calls[OpPay], rep.Calls[OpRefund], rep.Calls[OpCancel], rep.Attempts, rep.Retries, rep.Replayed, rep.Resumed)
	if n := rep.Calls[OpGiveUp]; n > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(rep.GiveUps)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, rep.GiveUps[k]))
		}
		p("  payments given up by their keys: %d (%s)", n, strings.Join(parts, ", "))
	}
	p("  proxy: %d requests, %d cut by a dying API (502), %d with no API up (503)", rep.Proxy.Requests, rep.Proxy.Cut, rep.Proxy.NoBackend)
	p("  provider: %d charges in the ledger; webhooks: %d events, %d delivered, %d abandoned, %d attempts",
		rep.Charges, rep.Webhooks.Events, rep.Webhooks.Delivered, rep.Webhooks.Abandoned, rep.Webhooks.Attempts)
	p("  provider key retention %v (ours: 45 days)", rep.KeyRetention)
	p("  answered 500 internal_error: %d (every fault of the run is one the contract answers 503)", rep.InternalErrors)
	for _, l := range rep.InternalErrorLines {
		p("    %s", l)
	}
	if rep.DBFaults {
		o := rep.Outages
		p("database away %d times, %v in all (longest %v); calls whose client gave up meanwhile: %d (resumed after settling)",
			o.Count, o.Away.Round(time.Millisecond), o.Longest.Round(time.Millisecond), rep.GaveUp)
		p("  probes of the APIs meanwhile: %d; /healthz 200: %d; /readyz 503: %d", o.Probes, o.Healthy, o.NotReady)
		p("  back: /readyz 200 at most %v after the database, LISTEN again at most %v after it",
			o.Ready.Round(time.Millisecond), o.Listening.Round(time.Millisecond))
	}
	p("recovery paths seen in the API logs")
	for _, path := range apiPaths {
		p("  %-45s %d", path[1], rep.Paths[path[1]])
	}
	p("faults injected")
	for _, k := range FaultKinds {
		if needsOutbox(k) && !rep.Features.Dispatcher {
			p("  %-45s n/a (no outbox)", k)
			continue
		}
		if needsOwnPostgres(k) && !rep.DBFaults {
			p("  %-45s n/a (no database faults)", k)
			continue
		}
		if needsCluster(k) && rep.Cluster == nil {
			p("  %-45s n/a (no cluster)", k)
			continue
		}
		if needsNetwork(k) && !rep.NetFaults {
			p("  %-45s n/a (no network faults)", k)
			continue
		}
		if why, ok := rep.Unplaced[k]; ok {
			p("  %-45s 0 NOT PLACED: %s", k, why)
			continue
		}
		p("  %-45s %d", k, rep.Faults[k])
	}
	if c := rep.Cluster; c != nil {
		for _, k := range []FaultKind{BackendsTerminated, WorkerBackendsTerminated, BrokerKilled} {
			if k == BrokerKilled && !rep.Features.Dispatcher {
				continue
			}
			p("  %s by node: %s", k, nodeCounts(c.ByNode[k]))
		}
	}
	if rep.NetFaults {
		p("  network faults by link: %s %d, %s %d, %s %d", DepPostgres, rep.NetworkByLink[DepPostgres],
			DepNATS, rep.NetworkByLink[DepNATS], DepProvider, rep.NetworkByLink[DepProvider])
		mb := func(dep string) float64 { return float64(rep.LinkBytes[dep]) / (1 << 20) }
		p("  carried through the links: %s %.1f MiB, %s %.1f MiB, %s %.1f MiB", DepPostgres, mb(DepPostgres), DepNATS, mb(DepNATS), DepProvider, mb(DepProvider))
	}
	p("invariants")
	for _, k := range Kinds {
		p("  %-45s %d", k, rep.ByKind[k])
	}
	for _, k := range Kinds {
		listed := 0
		for _, v := range rep.Violations {
			if v.Kind != k {
				continue
			}
			if listed == maxListed {
				p("  ... and %d more %s", rep.ByKind[k]-maxListed, k)
				break
			}
			p("  VIOLATION %s", v)
			listed++
		}
	}
	if len(rep.Violations) == 0 {
		p("result: PASS: 0 violations")
		return
	}
	p("result: FAIL: %d violations (replay: --seed %d --intents %d)", len(rep.Violations), rep.Seed, rep.Intents)
}

// giveUpOutcome is what a give-up did, by its final answer.
func giveUpOutcome(c Call) string {
	if !c.Definite() && c.Resumed != nil {
		c = *c.Resumed
	}
	if c.Status >= 200 && c.Status < 300 {
		return c.ResourceStatus
	}
	return answerName(c)
}

// RunFailures lists what fails a completed run besides its invariant
// violations, one line each. A long run (short false) fails on every fault
// kind it should have injected and did not. A short run (the one of `make
// test`: 200 intents, where each timed fault has one or two chances) fails
// only on a kind that was never injected for another reason than a step
// that could not place it in time (Unplaced: on a busy machine the moment
// a trap waits for may not come within its window, and that says nothing
// about the service); it fails on any request answered 500, since every
// fault of the run is one the contract answers 503.
func (rep *Report) RunFailures(short bool) []string {
	var out []string
	var missing []FaultKind
	for _, k := range rep.MissingFaults() {
		if _, ok := rep.Unplaced[k]; ok && short {
			continue // reported (Print), not failed on
		}
		missing = append(missing, k)
	}
	if len(missing) > 0 {
		var why []string
		for _, k := range missing {
			if w, ok := rep.Unplaced[k]; ok {
				why = append(why, fmt.Sprintf("%s: %s", k, w))
			}
		}
		line := fmt.Sprintf("fault kinds never injected: %v", missing)
		if len(why) > 0 {
			line += " (" + strings.Join(why, "; ") + ")"
		}
		out = append(out, line)
	}
	if short && rep.InternalErrors > 0 {
		out = append(out, fmt.Sprintf("%d requests answered 500 internal_error (their log lines are in the report above)", rep.InternalErrors))
	}
	return out
}

// MissingFaults lists the fault kinds the run should have injected (every
// kind; the outbox kinds only with the outbox, the database's own only with
// database faults) but did not.
func (rep *Report) MissingFaults() []FaultKind {
	var out []FaultKind
	for _, k := range FaultKinds {
		if needsOutbox(k) && !rep.Features.Dispatcher || needsOwnPostgres(k) && !rep.DBFaults || needsNetwork(k) && !rep.NetFaults ||
			needsCluster(k) && rep.Cluster == nil {
			continue
		}
		if k == MarkBlocked {
			continue // the fallback of DispatcherKilled, not a fault of its own
		}
		if k == DispatcherKilled && rep.Faults[MarkBlocked] > 0 {
			// The dispatcher's bookkeeping runs on connections with a short
			// lock timeout, so the trap often sees the mark fail rather than
			// wait: the same publish-without-mark path, without the kill.
			// internal/outbox TestDrill6DispatcherDiesAfterPublishBeforeMark
			// kills a dispatcher there deterministically.
			continue
		}
		if rep.Faults[k] == 0 {
			out = append(out, k)
		}
	}
	return slices.Clip(out)
}

// nodeCounts prints per-node counts in the order of the nodes' names
// ("none" for none).
func nodeCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// WriteJSON writes the report (without the history, which history.json in
// the work folder holds) as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// Report is the result of a run. Violations must be empty.
type Report struct {
	Seed        uint64 `json:"seed"`
	PlanHash    string `json:"plan_hash"`
	Intents     int    `json:"intents"`
	Concurrency int    `json:"concurrency"`
	Race        bool   `json:"race"`
	// CrashEvery, Lease and ClientAttempts are the run's settings.
	CrashEvery     int           `json:"crash_every"`
	Lease          time.Duration `json:"lease"`
	ClientAttempts int           `json:"client_attempts"`
	// OutboxNote says why the outbox faults were (not) injected.
	OutboxNote string `json:"outbox_note"`
	// DBFaults: the run owned its PostgreSQL and took it away; PostgresDir
	// is the cluster's folder when it was kept.
	DBFaults bool `json:"db_faults"`
	// NetFaults: the APIs reached their dependencies through fault proxies
	// that broke the links on schedule; NetworkByLink counts the faults per
	// dependency.
	NetFaults     bool           `json:"net_faults"`
	NetworkByLink map[string]int `json:"network_by_link,omitempty"`
	// LinkBytes is what each fault proxy carried, both ways: 0 would mean
	// the APIs went around it.
	LinkBytes   map[string]int64 `json:"link_bytes,omitempty"`
	PostgresDir string           `json:"postgres_dir,omitempty"`
	// Cluster describes the scaled-out topology of a cluster run (nil
	// otherwise).
	Cluster *ClusterFacts `json:"cluster,omitempty"`
	// Outages sums up the database's absences; GaveUp counts the calls
	// whose client gave up while the database was away (resumed after
	// settling, see gaveUpDuringOutage).
	Outages  OutageStats       `json:"outages"`
	GaveUp   int               `json:"gave_up_during_outages"`
	Features Features          `json:"features"`
	Faults   map[FaultKind]int `json:"faults"`
	Calls    map[string]int    `json:"calls"`
	// GiveUps counts the give-ups (cancels by key) by what they did: the
	// outcome of a definite answer, or what else they ended on.
	GiveUps    map[string]int   `json:"give_ups"`
	Attempts   int64            `json:"attempts"`
	Retries    int64            `json:"retries"`
	Replayed   int64            `json:"replayed"`
	Resumed    int              `json:"resumed"`
	Proxy      ProxyStats       `json:"proxy"`
	Webhooks   WebhookStats     `json:"webhooks"`
	Charges    int              `json:"charges"`
	Load       time.Duration    `json:"load"`
	Settle     time.Duration    `json:"settle"`
	Total      time.Duration    `json:"total"`
	Unsettled  string           `json:"unsettled,omitempty"`
	Violations []Violation      `json:"violations"`
	ByKind     map[Kind]int     `json:"by_kind"`
	Steps      map[StepKind]int `json:"steps"`
	// Paths counts API log lines that show recovery paths at work.
	Paths map[string]int `json:"paths"`
	// InternalErrors counts the requests the APIs answered 500
	// internal_error; InternalErrorLines are the first few of their log
	// lines. The run's faults are infrastructure faults, answered 503: a
	// short run fails on any 500 (RunFailures).
	InternalErrors     int      `json:"internal_errors"`
	InternalErrorLines []string `json:"internal_error_lines,omitempty"`
	// Unplaced says, for each fault kind the run never injected although
	// its steps ran, why they could not place it in time (a trap that
	// caught no process at that point, a terminate step that found no
	// connection): on a busy machine the moment a trap waits for may not
	// come. A short run reports these kinds; a long one fails on them.
	Unplaced map[FaultKind]string `json:"unplaced,omitempty"`
	// KeyRetention is the provider's key retention during the run.
	KeyRetention time.Duration `json:"key_retention"`
	WorkDir      string        `json:"work_dir"`
	History      *History      `json:"-"`
	Plan         *Plan         `json:"-"`
}

// ClusterFacts describe a cluster run's topology and what its faults hit.
type ClusterFacts struct {
	// Citus is the extension's version; Distributed and Reference count
	// the tables the migrations distributed by tenant and copied to every
	// node; Shards counts the shards per worker ("worker-1": n).
	Citus       string         `json:"citus"`
	Workers     int            `json:"workers"`
	Distributed int            `json:"distributed_tables"`
	Reference   int            `json:"reference_tables"`
	Shards      map[string]int `json:"shards_per_worker"`
	// NATSServers and StreamReplicas: the JetStream cluster and its event
	// stream's replicas (0 without the outbox).
	NATSServers    int `json:"nats_servers"`
	StreamReplicas int `json:"stream_replicas"`
	// ByNode counts faults per node: pg_backend_terminated on the
	// "coordinator", pg_worker_backend_terminated per "worker-N",
	// broker_killed per "nats-N" (and how many of those hit the "stream
	// leader").
	ByNode map[FaultKind]map[string]int `json:"faults_by_node"`
	// Dirs are the nodes' folders when they were kept.
	Dirs []string `json:"dirs,omitempty"`
}

// OutageStats sum up the database's absences of a run.
type OutageStats struct {
	// Count and Away: how many, and how long the database was away in all.
	Count int           `json:"count"`
	Away  time.Duration `json:"away"`
	// Longest is the longest absence.
	Longest time.Duration `json:"longest"`
	// Probes of the APIs while it was away, and how many answered
	// /healthz 200 and /readyz 503.
	Probes   int `json:"probes"`
	Healthy  int `json:"healthy"`
	NotReady int `json:"not_ready"`
	// Ready and Listening are the longest an API took, after the database
	// was back, to answer /readyz 200 and to LISTEN again.
	Ready     time.Duration `json:"ready"`
	Listening time.Duration `json:"listening"`
}

func outageStats(all []Outage) OutageStats {
	var s OutageStats
	for _, o := range all {
		s.Count++
		d := o.Ended.Sub(o.Began)
		s.Away += d
		s.Longest = max(s.Longest, d)
		for _, p := range o.Probes {
			s.Probes++
			if p.Alive && p.Healthz == http.StatusOK {
				s.Healthy++
			}
			if p.Alive && p.Readyz == http.StatusServiceUnavailable {
				s.NotReady++
			}
		}
		for _, b := range o.Back {
			s.Ready = max(s.Ready, b.Ready)
			s.Listening = max(s.Listening, b.Listening)
		}
	}
	return s
}

// WebhookStats are the provider's webhook deliveries.
type WebhookStats struct {
	Events, Delivered, Abandoned, Attempts int
}
