package main

// helps are the commands' own help texts, printed by "api <command> --help"
// and "api help <command>".
var helps = map[string]string{
	"serve": `Usage: api serve [--tuning FILE]

Run the HTTP API until SIGINT or SIGTERM, with its background workers: the
outbox dispatcher (publishes events to NATS JetStream), the fulfillment
consumer, the webhook worker, the payment recoverer and the retention sweeper.
Without NATS_URL it runs a NATS server inside the process (files under
NATS_STORE_DIR) that accepts only clients with a token made for this
process. The payment provider is PSP_URL; "make run" starts the payment
simulator as its own process and sets it.

It listens at once: /healthz answers 200 and every other path 503 while it
waits for the database and the broker, retrying each with backoff (every retry
is logged) for at most two minutes (the tuning's StartupTimeout); past it, it
exits naming what never answered. Once both answer it applies pending
migrations (unless AUTO_MIGRATE=false), builds everything, serves the API and
prints "oncepay is ready at <url>" on stdout (and, in demo mode, the demo
tenants' API keys); logs are JSON lines on stderr. On a signal it stops
accepting requests, gives in-flight ones 15s (ShutdownTimeout) to finish, then
stops the workers. Work cut off is either committed or resumed by a client's
retry or the recoverer.

Flags:
  --tuning FILE   a JSON object of tuning fields that override their measured
                  defaults, e.g. {"OutboxLinger": "20ms", "RecovererInterval": "5s"};
                  docs/CONFIGURATION.md ("Tuning") lists them. An unknown field,
                  a bad duration or a value out of range refuses to start

Environment (default in brackets; docs/CONFIGURATION.md says when to change each):
  DATABASE_URL          PostgreSQL URL (required)
  HTTP_ADDR             listen address [127.0.0.1:8080]
  DEMO_MODE             seed tenants acme/globex (keys sk_test_acme, sk_test_globex),
                        a catalog, and the demo UI's chaos endpoints [false]
  AUTO_MIGRATE          apply migrations at start [true]
  LOG_LEVEL             debug, info, warn or error [info]
  DB_MAX_CONNS          the connection pool's size [20]
  WRITE_TIMEOUT         bound of one request's work and of a worker's round [10s]
  IDEMPOTENCY_LEASE     a pending payment's claim; longer than WRITE_TIMEOUT [30s]
  PSP_URL               the payment provider (required)
  PSP_API_KEY           the provider's bearer token [empty: none sent]
  PSP_TIMEOUT           one provider call; shorter than WRITE_TIMEOUT [5s]
  PSP_WEBHOOK_SECRETS   whsec_ secrets that verify the provider's webhooks; required
                        outside demo mode [the public demo secret, demo mode only]
  NATS_URL              NATS server with JetStream, credentials in the URL
                        (nats://user:password@host:4222), or a cluster's servers
                        comma-separated; set it whenever more than one API
                        process runs [empty: embedded]
  NATS_STORE_DIR        the embedded server's files [.data/nats]
  NATS_STREAM_REPLICAS  the event stream's replicas, 3 on a 3-server cluster;
                        never lowered at start [1]
  OUTBOX_DISPATCHER, FULFILLMENT_CONSUMER
                        run these workers in this process [true]
  SWEEP_INTERVAL        in-process sweeper, 0 disables [1m]
  RETENTION_MONEY       how long payments' and refunds' keys are kept; at least
                        the settlement horizon [45d]
  ADMIN_TOKEN           bearer token of /admin/outbox/... and /admin/attention, at
                        least 32 characters [empty: not routed]
  OTEL_EXPORTER_OTLP_ENDPOINT
                        export traces with OTLP over HTTP; the other standard
                        OTEL_* variables apply [empty: no tracing]

Endpoints: /v1/... (the API, described by GET /openapi.yaml), /webhooks/psp,
/healthz, /readyz, /metrics (Prometheus), and the demo UI at /.
`,
	"migrate": `Usage: api migrate up | down [N] | version

Manage the schema of DATABASE_URL (db/migrations, embedded in the binary) and
print the schema version afterwards.

  up         apply every pending migration
  down [N]   revert the last N migrations (default 1); their tables and data are dropped
  version    print the applied version, and whether a failed migration left it dirty

api serve applies pending migrations itself unless AUTO_MIGRATE=false.

Environment: DATABASE_URL (required).
`,
	"tenants": `Usage: api tenants create --slug SLUG [--name NAME]

Create a tenant and print its API key. The key is shown once: only its
SHA-256 is stored, so store it now. Clients send it as
"Authorization: Bearer <key>"; every resource belongs to exactly one tenant.

Flags:
  --slug SLUG   the tenant's identifier: 2-40 lowercase letters, digits or dashes (required)
  --name NAME   its display name (default: the slug)

Environment: DATABASE_URL (required); migrations are applied first unless
AUTO_MIGRATE=false.

Example:
  DATABASE_URL=$(scripts/postgres.sh dev) api tenants create --slug initech --name "Initech"
`,
	"keys": `Usage: api keys create --tenant SLUG
       api keys list --tenant SLUG
       api keys revoke KEY-PREFIX-OR-ID...
       api keys rotate --tenant SLUG [--overlap D]

Manage tenants' API keys. A key is shown once, when it is made: only its
SHA-256 and its first 12 characters (the prefix, e.g. sk_live_ab12) are
stored. A tenant may have several keys at once.

  create   give the tenant one more key and print it; its other keys keep working
  list     print each key's id, prefix, when it was created and when it
           stops or stopped working ("-": it has no end); never the key
  revoke   make the keys named stop working now: each by its id, its prefix
           as list shows it (refused when two keys share it: use the id), or
           the key itself. Revoking a revoked key changes nothing
  rotate   give the tenant a new key, print it, and make every key it had
           stop working after the overlap (at once with --overlap 0): the
           time its clients need to switch. A key that already stops
           sooner keeps its end

A running API may accept a revoked key from its authentication cache for at
most its AuthCacheTTL [30s; a tuning field] more, and never a rotated key
past its overlap once AuthCacheTTL has passed since the rotation.

Flags:
  --tenant SLUG   the tenant (create, list, rotate; required)
  --overlap D     how long the old keys keep working after a rotation: a
                  duration such as 30m, 24h or 7d [24h]

Environment: DATABASE_URL (required); migrations are applied first unless
AUTO_MIGRATE=false.

Example:
  api keys rotate --tenant initech --overlap 1h
  api keys revoke sk_test_acme sk_test_globex   (a demo database served for real)
`,
	"sweep": `Usage: api sweep [--once] [--tuning FILE]

Delete expired records in small batches that never stall live traffic:
finished idempotency records past their Idempotency-Expires, and published
outbox events, webhook receipts and processed messages past their retention
(docs/CONTRACT.md; RETENTION_MONEY lengthens that of payments and refunds).
Pending (unsettled) operations are never deleted; those more than 15 minutes
past their lease are reported as stuck. Any number of sweepers may run at
once. api serve runs one itself every SWEEP_INTERVAL.

Flags:
  --once          sweep once, print what was deleted, and exit
                  (default: sweep every SWEEP_INTERVAL until SIGINT or SIGTERM)
  --tuning FILE   a tuning file, as api serve takes: SweepBatch [250] rows per
                  delete statement, SweepDutyCycle [0.0625] of the time spent
                  deleting while there is a backlog

Environment: DATABASE_URL (required), SWEEP_INTERVAL [1m], RETENTION_MONEY
[45d]. It refuses to start with a retention shorter than a horizon it must
cover.
`,
	"outbox": `Usage: api outbox stuck [--limit N] | retry <event-id> | replay <event-id>

Operate the transactional outbox, across all tenants. With ADMIN_TOKEN set,
the running API offers the same under /admin/outbox/.

  stuck [--limit N]   list the events the dispatcher gave up on after
                      10 failed publishes (at most N, default 50)
  retry <event-id>    make a stuck or backing-off event due now, with fresh
                      attempts; the dispatcher publishes it on its next round.
                      A published event is left alone (see replay)
  replay <event-id>   publish an event again, now, with its original id as
                      Nats-Msg-Id, whatever its state. Inside the stream's
                      duplicate window (2m; NATSDuplicateWindow) JetStream drops
                      it; after it, consumers receive it and their inbox
                      ignores it. Use it when a consumer missed an event

Environment: DATABASE_URL (required). replay also reads NATS_URL, or, when it
is empty, finds the running API's embedded NATS server and its token through
NATS_STORE_DIR [.data/nats] (run it as the user that runs api serve: only that
user may read the token).
`,
	"attention": `Usage: api attention list [--resolved] [--limit N] | show <id> |
       resolve <id> --retry|--close --note TEXT

Operate the needs-attention queue, across all tenants: what no retry can
settle and a person has to look at. An item is raised, in the same
transaction as what caused it, for
  - a payment or refund attempt whose provider record is about other money
    (reason mismatch): the attempt is held, and its client's retry answers
    409 awaiting_operator without running anything;
  - an attempt still without an outcome after 10 recoveries (the tuning's
    RecovererMaxAttempts; reason recovery_exhausted): held the same way;
  - a provider webhook about other money (reason mismatch): never applied,
    set aside with its receipt marked processed.
The metric oncepay_attention_open_items counts the open ones by reason. With
ADMIN_TOKEN set, the running API shows the same under GET /admin/attention.

  list [--resolved] [--limit N]   the open items, oldest first (or the resolved
                                  ones, newest first); at most N, default 50
  show <id>                       one item: what was found, its attempt or webhook,
                                  the payment or refund, its resolution
  resolve <id> --retry --note T   release the item's held attempt for another try
                                  with a fresh bound of recoveries: its client's retry
                                  or the recoverer resumes it from its recovery point
                                  (for an outage that is over, or a provider record
                                  corrected at the provider)
  resolve <id> --close --note T   record that it was settled outside the service (the
                                  odd charge refunded at the provider by hand, say). A
                                  held attempt stays held: its client keeps getting
                                  409 awaiting_operator

Environment: DATABASE_URL (required).
`,
	"idempotency": `Usage: api idempotency show --tenant SLUG --operation OP --key KEY [--body]

Show the idempotency record of one request: its state (pending, completed,
failed), recovery point, lease, the recoverer's count and backoff, request
fingerprint, the resource it made, its stored response's status and expiry,
and its attention items (a held attempt has an open one). The stored response
body is printed only with --body: it may hold a customer's data.

Flags:
  --tenant SLUG     the tenant's slug (required)
  --operation OP    orders.create, payments.create or refunds.create (required)
  --key KEY         the Idempotency-Key the client sent (required)
  --body            print the stored response body too

Environment: DATABASE_URL (required).
`,
	"version": `Usage: api version

Print the module version and the VCS revision the binary was built from.
`,
}
