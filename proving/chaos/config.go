// A run's configuration and its defaults.

package chaos

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"
)

// Outbox modes of Config.Outbox.
const (
	OutboxAuto = "auto"
	OutboxOn   = "on"
	OutboxOff  = "off"
)

// Config describes one run.
type Config struct {
	// Seed determines the schedule: the intents, the faults, their order.
	Seed uint64
	// Intents is the number of order+pay intents.
	Intents int
	// Concurrency is the number of concurrent clients (default 16).
	Concurrency int
	// RepoDir is the module root the binaries are built from.
	RepoDir string
	// WorkDir receives the binaries, every process's log, the broker's
	// store, plan.json and history.json.
	WorkDir string
	// DatabaseURL names a fresh, empty (or freshly migrated) database the
	// run owns: the invariants read all of it. Empty: the run starts a
	// private PostgreSQL cluster of its own (StartPostgres) and uses its
	// postgres database.
	DatabaseURL string
	// DBFaults schedules the database's own faults, postgres_killed and
	// postgres_outage. They need the private cluster: DatabaseURL must be
	// empty.
	DBFaults bool
	// NetFaults puts a fault proxy (toxiproxy) between the APIs and each of
	// PostgreSQL, NATS and the provider, and schedules network faults on
	// those links: latency, connections cut, a peer that never answers, a
	// narrow link.
	NetFaults bool
	// Cluster runs against the scaled-out topology: a Citus cluster of the
	// run's own (StartCitus: a coordinator and two workers; the APIs on the
	// coordinator, the schema distributed by tenant) and, with the outbox,
	// a JetStream cluster of three nats-servers with an R3 stream. It adds
	// the cluster's faults (a worker's connections from the coordinator
	// terminated, broker kills of one server, the stream's leader among
	// them). The whole-database faults and the network faults do not fit
	// it: DBFaults and NetFaults must be off, DatabaseURL empty.
	Cluster bool
	// KeepPostgres keeps the private cluster's folder also when the run
	// passed (a failed run always keeps it).
	KeepPostgres bool
	// Race builds the processes with the race detector; a data race they
	// report is a violation.
	Race bool
	// Outbox is OutboxAuto (default: on when the API binary has the `api
	// outbox` commands), OutboxOn or OutboxOff. On runs a nats-server,
	// injects the dispatcher, broker and replay faults and checks the
	// publishing and fulfillment invariants.
	Outbox string
	// ProxyRate is the share of calls whose first attempt the proxy breaks
	// (default 0.1).
	ProxyRate float64
	// CrashEvery is the number of intents per process crash (default 400,
	// about one every ten seconds here); negative turns crashes off.
	CrashEvery int
	// Lease is the APIs' IDEMPOTENCY_LEASE (default 6s; the service's own
	// default is 30s).
	Lease time.Duration
	// ClientAttempts bounds each call's HTTP attempts (default 10; the Go
	// client's own default is 5).
	ClientAttempts int
	// IntentBudget bounds one intent, retries included (default 2m).
	IntentBudget time.Duration
	// ProviderKeyRetention is how long the provider simulator remembers an
	// idempotency key (default 5s, where Stripe keeps 24h): every resumed
	// attempt meets a provider that has forgotten its key and must find its
	// charge by reference (keys live for our replay horizon, not the
	// provider's).
	ProviderKeyRetention time.Duration
	// SettleTimeout bounds each settle phase (default 3m).
	SettleTimeout time.Duration
	// Logf receives progress lines (default: none).
	Logf func(format string, args ...any)
}

func (c *Config) defaults() error {
	if c.Intents <= 0 {
		return errors.New("chaos: Intents must be positive")
	}
	if c.RepoDir == "" || c.WorkDir == "" {
		return errors.New("chaos: RepoDir and WorkDir are required")
	}
	// The processes run in the work folder and are started by the paths of
	// their binaries in it: a relative folder would name them twice.
	var err error
	if c.WorkDir, err = filepath.Abs(c.WorkDir); err != nil {
		return fmt.Errorf("chaos: WorkDir: %w", err)
	}
	if c.Cluster && (c.DBFaults || c.NetFaults || c.DatabaseURL != "") {
		return errors.New("chaos: a cluster run starts its own Citus cluster and takes neither database nor network faults: " +
			"DBFaults and NetFaults off, DatabaseURL empty")
	}
	if c.DBFaults && c.DatabaseURL != "" {
		return errors.New("chaos: DBFaults crash the database: they need the run's own cluster, not DatabaseURL")
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 16
	}
	if c.Outbox == "" {
		c.Outbox = OutboxAuto
	}
	if c.Outbox != OutboxAuto && c.Outbox != OutboxOn && c.Outbox != OutboxOff {
		return fmt.Errorf("chaos: Outbox %q: want auto, on or off", c.Outbox)
	}
	if c.ProxyRate == 0 {
		c.ProxyRate = 0.1
	}
	if c.CrashEvery == 0 {
		c.CrashEvery = 400
	}
	if c.Lease <= 0 {
		c.Lease = 6 * time.Second
	}
	if c.ClientAttempts <= 0 {
		c.ClientAttempts = 10
	}
	if c.IntentBudget <= 0 {
		c.IntentBudget = 2 * time.Minute
	}
	if c.ProviderKeyRetention <= 0 {
		c.ProviderKeyRetention = 5 * time.Second
	}
	if c.SettleTimeout <= 0 {
		c.SettleTimeout = 3 * time.Minute
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return nil
}
