// Package chaos proves, under real faults, what the rest of the service
// promises: duplicate deliveries are normal, duplicate side effects never
// happen. It is the engine of `make chaos` (proving/cmd/chaos) and of TestChaosShort.
//
// A run starts the real stack as separate processes: a private PostgreSQL
// cluster of its own (initdb in a temporary folder; or a database of the
// caller's, without database faults), two `api serve` processes on one
// database, one `pspsim` provider simulator (whose ledger is the ground
// truth for money), and, when the build has the outbox dispatcher, one
// nats-server. Clients built on the public Go client (package client)
// drive seeded order+pay intents, some with refunds, through a fault-injecting
// HTTP proxy. A seeded schedule (Plan) injects the faults of the brief's
// failure drills while the load runs: responses dropped after the server
// committed, connection resets, SIGKILL and restart of an API process,
// pg_terminate_backend on the APIs' connections, provider 5xx, timeouts and
// charge-then-drop, duplicate and reordered webhooks, and (with the outbox)
// a dispatcher killed between publish and mark, a broker killed and
// restarted, and operator replays of events; on its own cluster, the
// postmaster SIGKILLed (crash recovery on restart) and the database stopped
// for 2 to 20 seconds, while the APIs are probed (/healthz 200, /readyz
// 503) and must come back by themselves. The same seed gives the same
// schedule.
//
// A cluster run (Config.Cluster, `--cluster`) starts the scaled-out
// topology instead: a Citus cluster of its own (a coordinator and two
// workers, StartCitus; the APIs on the coordinator, the migrations
// distributing the schema by tenant) and three nats-servers as one
// JetStream cluster with an R3 stream. Its faults are those of the
// topology: the APIs' backends terminated on the coordinator, every
// connection of the coordinator to a worker terminated on that worker, one
// broker server of the three killed (now and then the stream's leader),
// besides the process crashes, the provider's faults, the webhooks' and
// the operator's replays. It takes neither the whole-database nor the
// network faults.
//
// After the load the run lets the system settle (bounded polling, never
// sleeps), resumes every intent whose client gave up (with its key, as a
// real client would), takes a History (a snapshot of the database, the
// provider's ledger, the broker's stream and every client outcome) and runs
// Check over it: a pure function that reports every Violation of the
// invariants (charged exactly once, no charge without a payment, refunds
// agree with the provider, one event per state change, every event
// published, stock taken once per fulfilled order, every intent definite,
// every answer a client got still true in the database, no client left with
// an unresolved 5xx, APIs up while the database was away and back after it). Check's own tests feed it recorded
// histories with one violation each.
//
// It implements no rule of the brief itself; it is the evidence for all of
// them, above all that the dedup decision commits with the mutation, that
// events leave through an outbox and are consumed through an inbox, that
// the operation's identity reaches the provider, and that the broker's
// deduplication never replaces idempotent effects. docs/RELIABILITY.md
// explains it.
package chaos
