package chaos

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// FaultKind names one kind of injected fault; the report counts each.
type FaultKind string

// The faults a run injects. The comment says what each one tests.
const (
	// ResponseDropped: the proxy forwards a POST, the API commits and
	// answers, and the proxy closes the client's connection (RST) instead of
	// relaying the answer: the server committed, the response never
	// arrives. The client's retry must get the stored answer, never a
	// second effect.
	ResponseDropped FaultKind = "response_dropped"
	// ConnectionReset: the proxy resets the client's connection before the
	// request reaches any API. The retry is the first execution.
	ConnectionReset FaultKind = "connection_reset"
	// APIKilled: SIGKILL of one API process mid-load and its restart on the
	// same port. Requests in flight are cut (the proxy answers 502), pending
	// claims stay leased until a retry or the recoverer takes them over
	// (a crash after an external call, for real).
	APIKilled FaultKind = "api_killed"
	// BackendsTerminated: pg_terminate_backend on every connection of the
	// APIs (application_name = 'oncepay'): transactions in flight abort, the
	// pools reconnect. Counted per terminated backend.
	BackendsTerminated FaultKind = "pg_backend_terminated"
	// WorkerBackendsTerminated: in a cluster run, pg_terminate_backend on
	// a Citus worker of every connection the coordinator holds to it
	// (application_name 'citus_internal ...'): the APIs' statements and
	// transactions on that worker's shards fail mid-way, the coordinator
	// connects again. Counted per terminated backend.
	WorkerBackendsTerminated FaultKind = "pg_worker_backend_terminated"
	// RecorderKilled: the API process that is recording a provider's answer
	// (phase 2 of a payment or refund, or the webhook worker applying it) is
	// SIGKILLed right there: the money moved and we have no record of it yet
	// (caught in the act instead of by chance). A retry, the other
	// process's recoverer or the webhook must find the charge by reference.
	RecorderKilled FaultKind = "api_killed_after_provider_call"
	// ProviderFailed: the provider answers 503 before charging
	// (fail_next and fail_rate): an unknown outcome, retried with the same
	// provider key.
	ProviderFailed FaultKind = "provider_5xx"
	// ProviderTimedOut: the provider charges and then hangs until our call
	// times out (timeout_next): the outcome is unknown but the money moved.
	ProviderTimedOut FaultKind = "provider_timeout"
	// ProviderDropped: the provider charges and drops the connection
	// unanswered (drop_next and drop_rate): charge-then-drop.
	ProviderDropped FaultKind = "provider_charge_then_drop"
	// WebhookDuplicated: the provider delivers a webhook again with the same
	// delivery id. Counted per extra delivery.
	WebhookDuplicated FaultKind = "webhook_duplicated"
	// WebhookReordered: the provider delivers the webhooks of one batch
	// window in reverse order. Counted per window.
	WebhookReordered FaultKind = "webhook_reorder_window"
	// DispatcherKilled: the API process whose outbox dispatcher published a
	// batch and is waiting to mark it published is SIGKILLed right there:
	// the events are published again after the lease and the consumers'
	// inbox absorbs the duplicates.
	DispatcherKilled FaultKind = "dispatcher_killed_between_publish_and_mark"
	// MarkBlocked: a dispatcher's mark was held up past its lock timeout
	// (when no process could be caught to kill): the mark fails, which the
	// outbox treats exactly like a crash.
	MarkBlocked FaultKind = "dispatcher_mark_failed"
	// BrokerKilled: SIGKILL of the nats-server and its restart on the same
	// port and store: publishes fail meanwhile, consumers reconnect. In a
	// cluster run one server of the three (the stream's leader every
	// second time): the stream keeps its quorum and elects another leader,
	// publishes in flight fail or wait for it, and the restarted server
	// catches up.
	BrokerKilled FaultKind = "broker_killed"
	// OperatorReplayed: `api outbox replay <event-id>` of a published event:
	// the consumers get it again and must ignore it: their inbox, not the
	// broker's deduplication, makes it harmless.
	OperatorReplayed FaultKind = "operator_replay"
	// PostgresKilled: SIGKILL of the postmaster under load (every second
	// time of every server process at once), down for 0.2-2 s, then started
	// again: crash recovery from the WAL. Every answer a client got before
	// must still be true, and the APIs reconnect by themselves.
	PostgresKilled FaultKind = "postgres_killed"
	// PostgresOutage: the database stopped (fast shutdown) for 2 to 20 s,
	// then started: the APIs stay up (/healthz 200, /readyz 503 meanwhile),
	// answer 5xx instead of promises, and pick up where they were.
	PostgresOutage FaultKind = "postgres_outage"
	// NetworkLatency: every chunk of data on the link between the APIs and
	// one dependency (PostgreSQL, NATS or the provider) late by 200 to 800
	// ms, for 2 to 8 s.
	NetworkLatency FaultKind = "network_latency"
	// NetworkCut: every connection on the link reset, the ones in the
	// middle of an exchange included, and every new one as soon as it
	// sends, for 0.5 to 2 s.
	NetworkCut FaultKind = "network_cut"
	// NetworkBlackhole: the dependency accepts and never answers (the data
	// goes nowhere, nothing is closed) for 1 to 6 s: every wait on it must
	// be bounded.
	NetworkBlackhole FaultKind = "network_blackhole"
	// NetworkBandwidth: the link limited to 16 to 64 KB/s for 2 to 8 s.
	NetworkBandwidth FaultKind = "network_bandwidth"
)

// FaultKinds lists every fault, in report order.
var FaultKinds = []FaultKind{
	ResponseDropped, ConnectionReset, APIKilled, RecorderKilled, BackendsTerminated, WorkerBackendsTerminated, ProviderFailed, ProviderTimedOut,
	ProviderDropped, WebhookDuplicated, WebhookReordered, DispatcherKilled, MarkBlocked, BrokerKilled, OperatorReplayed,
	PostgresKilled, PostgresOutage, NetworkLatency, NetworkCut, NetworkBlackhole, NetworkBandwidth,
}

// needsOutbox reports whether a fault kind exists only with the outbox
// dispatcher and the broker.
func needsOutbox(k FaultKind) bool {
	return k == DispatcherKilled || k == MarkBlocked || k == BrokerKilled || k == OperatorReplayed
}

// needsOwnPostgres reports whether a fault kind exists only when the run
// owns its PostgreSQL (Config.DatabaseURL empty, Config.DBFaults).
func needsOwnPostgres(k FaultKind) bool {
	return k == PostgresKilled || k == PostgresOutage
}

// needsCluster reports whether a fault kind exists only in a cluster run
// (Config.Cluster).
func needsCluster(k FaultKind) bool {
	return k == WorkerBackendsTerminated
}

// needsNetwork reports whether a fault kind exists only with the fault
// proxies in front of the dependencies (Config.NetFaults).
func needsNetwork(k FaultKind) bool {
	return k == NetworkLatency || k == NetworkCut || k == NetworkBlackhole || k == NetworkBandwidth
}

// StepKind names one timed action of the schedule.
type StepKind string

// The actions of the schedule's timeline.
const (
	StepKillAPI         StepKind = "kill_api"
	StepTerminatePG     StepKind = "pg_terminate_backend"
	StepTerminateWorker StepKind = "pg_terminate_worker_backends"
	StepProviderFail    StepKind = "provider_fail_next"
	StepProviderTimeout StepKind = "provider_timeout_next"
	StepProviderDrop    StepKind = "provider_drop_next"
	StepProviderRates   StepKind = "provider_rates"
	StepWebhookDup      StepKind = "webhook_duplicates"
	StepWebhookReorder  StepKind = "webhook_reorder"
	StepKillRecorder    StepKind = "kill_recorder"
	StepKillDispatcher  StepKind = "kill_dispatcher"
	StepKillBroker      StepKind = "kill_broker"
	StepReplay          StepKind = "operator_replay"
	StepKillPostgres    StepKind = "kill_postgres"
	StepPostgresOutage  StepKind = "postgres_outage"
	StepNetLatency      StepKind = "net_latency"
	StepNetCut          StepKind = "net_cut"
	StepNetBlackhole    StepKind = "net_blackhole"
	StepNetBandwidth    StepKind = "net_bandwidth"
)

// Step is one action of the timeline. It fires when intent At starts.
type Step struct {
	At   int      `json:"at"`
	Kind StepKind `json:"kind"`
	// Target is the API process (0 or 1) a kill hits, the nats-server (0
	// to 2) a broker kill of a cluster run hits, the Citus worker (0 or 1)
	// whose connections a worker step terminates.
	Target int `json:"target,omitempty"`
	// N is the count of a one-shot provider fault or of webhook duplicates;
	// for a window, 0 turns it off; for a kill of PostgreSQL, 1 kills every
	// server process at once, 0 the postmaster alone; for a broker kill of
	// a cluster run, 1 kills the stream's leader of the moment instead of
	// Target.
	N int `json:"n,omitempty"`
	// Down is how long a killed process (or a stopped database) stays down
	// before its restart, or how long a network fault lasts.
	Down time.Duration `json:"down,omitempty"`
	// Dep is the dependency whose link a network fault breaks
	// (Dependencies); N is its latency in ms or its rate in KB/s.
	Dep string `json:"dep,omitempty"`
	// Pick chooses among candidates (the event an operator replays).
	Pick uint64 `json:"pick,omitempty"`
}

// ProxyFault is what the proxy does to one HTTP attempt.
type ProxyFault string

// Proxy faults.
const (
	ProxyPass  ProxyFault = ""
	ProxyDrop  ProxyFault = "drop"
	ProxyReset ProxyFault = "reset"
)

// Intent is one customer's business intent: an order, its payment, maybe
// refunds. Every POST of it has its own key, derived from the seed.
type Intent struct {
	Index  int    `json:"index"`
	Tenant string `json:"tenant"`
	// Lines are (catalog index, quantity); the catalog is sorted by SKU.
	Lines [][2]int `json:"lines"`
	// Method is the first payment method.
	Method string `json:"method"`
	// SecondCard pays again with pm_card_ok under a new key after a decline.
	SecondCard bool `json:"second_card,omitempty"`
	// DoublePay sends a second payment of the same order under another key,
	// concurrently: a client that lost track of its key. The order must
	// still be charged once.
	DoublePay bool `json:"double_pay,omitempty"`
	// Refunds are per-mille parts of the order total, one key each.
	Refunds []int `json:"refunds,omitempty"`
	// ConcurrentRefunds sends the refunds at the same time.
	ConcurrentRefunds bool `json:"concurrent_refunds,omitempty"`
	// Cancel gives the order up: CancelFirst before paying it (the pay
	// must then be refused and never reach the provider), CancelRacing at
	// the same time as the payment (whichever takes the order's lock first
	// wins; the order must never end cancelled and charged).
	Cancel CancelMode `json:"cancel,omitempty"`
	// GiveUp cancels the payment by its key (POST
	// /v1/payments/cancel-by-key): GiveUpFirst before the payment request
	// is sent (a request still in the network: it must be refused and
	// never reach the provider), GiveUpRacing at the same time as it,
	// GiveUpAfter once it ended, whatever it answered. A give-up intent has
	// no other payment, refund or cancel.
	GiveUp GiveUpMode `json:"give_up,omitempty"`
}

// GiveUpMode is when an intent gives its payment up by its key.
type GiveUpMode string

// The give-ups of an intent.
const (
	GiveUpNone   GiveUpMode = ""
	GiveUpFirst  GiveUpMode = "first"
	GiveUpRacing GiveUpMode = "racing"
	GiveUpAfter  GiveUpMode = "after"
)

// CancelMode is when an intent cancels its order.
type CancelMode string

// The cancels of an intent.
const (
	CancelNone   CancelMode = ""
	CancelFirst  CancelMode = "first"
	CancelRacing CancelMode = "racing"
)

// Key returns the idempotency key of one call of the intent, e.g. "pay" or
// "refund-1".
func (p *Plan) Key(in Intent, call string) string {
	return fmt.Sprintf("chaos-%d-%d-%s", p.Seed, in.Index, call)
}

// Plan is a run's whole schedule: the intents, the timeline of faults, and
// the proxy's fault for every attempt of every key. NewPlan derives it from
// the seed alone, so the same seed replays the same schedule.
type Plan struct {
	Seed    uint64   `json:"seed"`
	Intents []Intent `json:"intents"`
	Steps   []Step   `json:"steps"`
	// Proxy maps a key to the faults of its attempts (index 0 is the first
	// attempt); attempts beyond the slice pass.
	Proxy map[string][]ProxyFault `json:"proxy"`
}

// PlanOptions shape NewPlan.
type PlanOptions struct {
	Intents int
	// Outbox adds the dispatcher, broker and replay faults.
	Outbox bool
	// ProxyRate is the share of calls whose first attempt the proxy breaks
	// (half dropped after commit, half reset); a tenth of those are broken
	// on the second attempt too.
	ProxyRate float64
	// CrashEvery is the number of intents per process crash (an API killed
	// at a random moment, or caught recording a provider outcome); at least
	// three crashes happen. Zero or less: no process crashes at all.
	CrashEvery int
	// Postgres adds the database faults (postgres_killed, postgres_outage):
	// the run owns its PostgreSQL.
	Postgres bool
	// Cluster adds the faults of the scaled-out topology: the Citus
	// workers' connections terminated, and more broker kills, each of one
	// server of the three (Target, or the stream's leader).
	Cluster bool
	// Network adds the network faults between the APIs and their
	// dependencies (network_latency, network_cut, network_blackhole,
	// network_bandwidth), each on a link drawn from Dependencies.
	Network bool
}

// Tenants are the demo tenants the intents belong to, with their API keys.
var Tenants = map[string]string{"acme": "sk_test_acme", "globex": "sk_test_globex"}

// NewPlan derives the schedule from seed. Every number in it comes from
// PCG streams keyed by the seed, and every intent from a stream of its own,
// so the schedule does not depend on timing.
func NewPlan(seed uint64, o PlanOptions) *Plan {
	n := max(o.Intents, 1)
	p := &Plan{Seed: seed, Proxy: map[string][]ProxyFault{}}
	for i := range n {
		r := rand.New(rand.NewPCG(seed, uint64(i)+1))
		in := Intent{Index: i, Tenant: "acme"}
		if r.IntN(2) == 1 {
			in.Tenant = "globex"
		}
		lines := 1 + r.IntN(3)
		for _, c := range r.Perm(6)[:lines] {
			in.Lines = append(in.Lines, [2]int{c, 1 + r.IntN(3)})
		}
		switch x := r.IntN(100); {
		case x < 85:
			in.Method = "pm_card_ok"
			in.DoublePay = r.IntN(100) < 5
		case x < 95:
			in.Method = "pm_card_declined"
		default:
			in.Method = "pm_card_insufficient_funds"
		}
		if in.Method != "pm_card_ok" {
			in.SecondCard = r.IntN(10) < 7
		}
		if r.IntN(4) == 0 {
			in.Refunds = [][]int{{1000}, {500}, {300, 300}, {600, 600}, {250}}[r.IntN(5)]
			in.ConcurrentRefunds = len(in.Refunds) > 1 && r.IntN(2) == 0
		}
		switch x := r.IntN(100); {
		case x < 3:
			in.Cancel = CancelFirst
		case x < 9:
			in.Cancel = CancelRacing
		case x < 11:
			in.GiveUp = GiveUpFirst
		case x < 14:
			in.GiveUp = GiveUpRacing
		case x < 17:
			in.GiveUp = GiveUpAfter
		}
		if in.GiveUp != GiveUpNone {
			in.SecondCard, in.DoublePay, in.Refunds, in.ConcurrentRefunds = false, false, nil, false
		}
		p.Intents = append(p.Intents, in)
		for _, call := range p.calls(in) {
			if r.Float64() >= o.ProxyRate {
				continue
			}
			f := ProxyDrop
			if r.IntN(2) == 0 {
				f = ProxyReset
			}
			faults := []ProxyFault{f}
			if r.IntN(10) == 0 {
				faults = append(faults, ProxyDrop)
			}
			p.Proxy[p.Key(in, call)] = faults
		}
	}
	p.Steps = timeline(rand.New(rand.NewPCG(seed, 0)), n, o)
	return p
}

// calls lists the call names of an intent that may be sent.
func (p *Plan) calls(in Intent) []string {
	out := []string{"order", "pay"}
	if in.Cancel != CancelNone {
		out = append(out, "cancel")
	}
	if in.GiveUp != GiveUpNone {
		out = append(out, "give-up")
	}
	if in.SecondCard {
		out = append(out, "pay-2")
	}
	if in.DoublePay {
		out = append(out, "pay-dup")
	}
	for i := range in.Refunds {
		out = append(out, fmt.Sprintf("refund-%d", i+1))
	}
	return out
}

// timeline spreads the timed faults over the run: each kind a number of
// times that grows with the run, at least once, between 5% and 90% of the
// intents (process crashes before 80%, so that the last restart happens
// while the load still runs).
func timeline(r *rand.Rand, n int, o PlanOptions) []Step {
	var steps []Step
	at := func() int { return n/20 + r.IntN(max(1, n*85/100)) }
	early := func() int { return n/20 + r.IntN(max(1, n*75/100)) }
	times := func(per, least int) int { return max(least, n/per) }
	if o.CrashEvery > 0 {
		// Both APIs are killed at least once, then crashes alternate between
		// a kill at a random moment and a kill caught recording a provider
		// outcome.
		kills := 0
		for i := range max(3, n/o.CrashEvery) {
			if i < 2 || i%2 == 1 {
				steps = append(steps, Step{At: early(), Kind: StepKillAPI, Target: kills % 2, Down: time.Duration(200+r.IntN(1800)) * time.Millisecond})
				kills++
			} else {
				steps = append(steps, Step{At: early(), Kind: StepKillRecorder, Down: time.Duration(200+r.IntN(800)) * time.Millisecond})
			}
		}
	}
	for range times(400, 1) {
		steps = append(steps, Step{At: at(), Kind: StepTerminatePG})
	}
	for range times(200, 1) {
		steps = append(steps, Step{At: at(), Kind: StepProviderFail, N: 1 + r.IntN(3)})
		steps = append(steps, Step{At: at(), Kind: StepProviderDrop, N: 1 + r.IntN(2)})
	}
	for range times(400, 1) {
		steps = append(steps, Step{At: at(), Kind: StepProviderTimeout, N: 1})
	}
	window := max(5, n/50)
	for _, k := range []StepKind{StepProviderRates, StepWebhookDup, StepWebhookReorder} {
		for range times(1500, 1) {
			start := at()
			steps = append(steps, Step{At: start, Kind: k, N: 1 + r.IntN(2)}, Step{At: start + window, Kind: k})
		}
	}
	if o.Outbox {
		for range times(1000, 1) {
			steps = append(steps, Step{At: early(), Kind: StepKillDispatcher, Down: time.Duration(200+r.IntN(800)) * time.Millisecond})
		}
		for range times(2500, 1) {
			steps = append(steps, Step{At: early(), Kind: StepKillBroker, Down: time.Duration(200+r.IntN(1800)) * time.Millisecond})
		}
		for range times(200, 2) {
			steps = append(steps, Step{At: at(), Kind: StepReplay, Pick: r.Uint64()})
		}
	}
	// Drawn last, so that the other faults of a seed stay where they were.
	// Early, like the process crashes: the database is back while the load
	// still runs.
	if o.Postgres {
		for i := range times(2000, 1) {
			steps = append(steps, Step{At: early(), Kind: StepKillPostgres, N: i % 2, Down: time.Duration(200+r.IntN(1800)) * time.Millisecond})
		}
		for range times(2500, 1) {
			steps = append(steps, Step{At: early(), Kind: StepPostgresOutage, Down: time.Duration(2000+r.IntN(18001)) * time.Millisecond})
		}
	}
	// Drawn after those, for the same reason. Every dependency meets every
	// kind once before the kinds repeat on links drawn at random.
	if o.Network {
		deps := Dependencies
		if !o.Outbox { // no broker to reach
			deps = []string{DepPostgres, DepProvider}
		}
		ms := func(lo, hi int) time.Duration { return time.Duration(lo+r.IntN(hi-lo+1)) * time.Millisecond }
		for i := range times(1000, 1) {
			for j, k := range []StepKind{StepNetLatency, StepNetCut, StepNetBlackhole, StepNetBandwidth} {
				dep := deps[(i+j)%len(deps)]
				if i >= len(deps) {
					dep = deps[r.IntN(len(deps))]
				}
				st := Step{At: at(), Kind: k, Dep: dep}
				switch k {
				case StepNetLatency:
					st.N, st.Down = 200+r.IntN(601), ms(2000, 8000)
				case StepNetCut:
					st.Down = ms(500, 2000)
				case StepNetBlackhole:
					st.Down = ms(1000, 6000)
				case StepNetBandwidth:
					st.N, st.Down = 16+r.IntN(49), ms(2000, 8000)
				}
				steps = append(steps, st)
			}
		}
	}
	// Drawn after those, for the same reason. Every broker kill hits one
	// server of the cluster: a server drawn at random, or, every second
	// time, whichever leads the stream then.
	if o.Cluster {
		for i := range times(400, 2) {
			steps = append(steps, Step{At: at(), Kind: StepTerminateWorker, Target: i % 2})
		}
		if o.Outbox {
			for range times(2500, 1) {
				steps = append(steps, Step{At: early(), Kind: StepKillBroker, Down: time.Duration(200+r.IntN(1800)) * time.Millisecond})
			}
			kills := 0
			for i := range steps {
				if steps[i].Kind == StepKillBroker {
					steps[i].Target, steps[i].N = r.IntN(3), kills%2
					kills++
				}
			}
		}
	}
	// Stable order: by position, then as generated.
	slices.SortStableFunc(steps, func(a, b Step) int { return a.At - b.At })
	return steps
}

// Hash names the schedule: two runs with the same hash ran the same
// schedule.
func (p *Plan) Hash() string {
	raw, err := json.Marshal(p)
	if err != nil {
		return "unhashable: " + err.Error()
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:8])
}

// proxyFault returns what the proxy does to attempt (0-based) of key.
func (p *Plan) proxyFault(key string, attempt int) ProxyFault {
	f := p.Proxy[key]
	if attempt < len(f) {
		return f[attempt]
	}
	return ProxyPass
}
