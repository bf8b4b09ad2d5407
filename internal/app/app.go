// Package app wires the service together: it builds every part from the
// configuration with explicit constructors, runs the server and the
// background workers, and shuts them down in order. Nothing else in the
// service reads the environment.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/attention"
	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/demo"
	"github.com/oncepay/oncepay/internal/fulfillment"
	"github.com/oncepay/oncepay/internal/httpapi"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/retention"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/tracing"
	"github.com/oncepay/oncepay/internal/webhooks"
)

// App is the service with everything it runs.
type App struct {
	cfg    Config
	logger *slog.Logger
	now    func() time.Time
	opts   options
	pool   *pgxpool.Pool
	ln     net.Listener
	// conns bounds the connections ln holds open (MAX_CONNECTIONS).
	conns *httpapi.ConnLimiter
	// handler serves the starting answers until Start has built the API
	// (startup.go), then the API.
	handler  *switchHandler
	api      http.Handler
	verifier *webhooks.Verifier
	srv      *http.Server
	// served receives the end of srv.Serve.
	served chan error
	// dbAnswered and brokerAnswered say, while Start runs, what it no
	// longer waits for (waitingFor).
	dbAnswered, brokerAnswered atomic.Bool

	orders    *orders.Service
	payments  *payments.Service
	recoverer *operation.Recoverer
	sweeper   *retention.Sweeper

	// nats is the embedded broker (nil with NATS_URL set).
	nats       *broker.Embedded
	nc         *nats.Conn
	js         jetstream.JetStream
	dispatcher *outbox.Dispatcher
	// events wakes the dispatcher after a commit that appended events.
	events      *outbox.Signal
	fulfillment *fulfillment.Consumer
	outboxAdmin *outbox.Admin
	// webhookWorker applies received provider webhooks.
	webhookWorker *webhooks.Worker
	tenants       *tenants.Service
	// traces is the OTLP exporting tracer provider New built (nil with
	// tracing off, or with a provider from WithTracerProvider); Close
	// flushes it.
	traces *sdktrace.TracerProvider
	// tp is what every part traces with (tracing.Disabled with tracing
	// off); traced says tracing is on, dbTracer (nil when off) is the
	// query tracer of the pool Start opens. New sets them.
	tp       trace.TracerProvider
	traced   bool
	dbTracer pgx.QueryTracer
}

// Option changes how New builds the service. Only tests use options: they
// reach the parts production never configures (fault injection).
type Option func(*options)

type options struct {
	operationHooks   operation.Hooks
	outboxHooks      outbox.DispatcherHooks
	fulfillmentHooks fulfillment.Hooks
	tracerProvider   trace.TracerProvider
}

// WithTracerProvider traces the service with tp instead of the OTLP
// exporter cfg.TracesEndpoint configures: the trace tests pass the SDK's
// with an in-memory recorder (default: none, unless the endpoint is set).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracerProvider = tp }
}

// WithOperationHooks injects faults into every idempotent operation
// (operation.Hooks): the failure drills' crash after the provider call and
// lost database connection before a commit (default none).
func WithOperationHooks(h operation.Hooks) Option {
	return func(o *options) { o.operationHooks = h }
}

// WithOutboxHooks injects faults into the outbox dispatcher (drill 6: it
// dies after publishing, before marking the event published; default none).
func WithOutboxHooks(h outbox.DispatcherHooks) Option {
	return func(o *options) { o.outboxHooks = h }
}

// WithFulfillmentHooks injects faults into the fulfillment consumer (drill
// 4: it commits and dies before the ack; default none).
func WithFulfillmentHooks(h fulfillment.Hooks) Option {
	return func(o *options) { o.fulfillmentHooks = h }
}

// New prepares the running service (api serve) without touching its
// dependencies: it checks what the configuration alone decides (the
// retention policy, the webhook secrets) and listens on cfg.HTTPAddr, so a
// bad setting or a taken port fails at once. Start serves HTTP, waits for the
// database and the broker and builds every part; Serve runs them. The
// operator commands do not use it; they build their one service
// (commands.go).
func New(cfg Config, logger *slog.Logger, now func() time.Time, opts ...Option) (*App, error) {
	a := &App{cfg: cfg, logger: logger, now: now}
	for _, opt := range opts {
		opt(&a.opts)
	}
	if err := retention.Check(cfg.Retention, cfg.Horizons, covers(Operations())); err != nil {
		return nil, fmt.Errorf("refusing to start: %w", err)
	}
	if err := parseDatabaseURL(cfg.DatabaseURL); err != nil {
		return nil, err
	}
	var err error
	if a.verifier, err = webhooks.NewVerifier(cfg.PSPWebhookSecrets, now); err != nil {
		return nil, fmt.Errorf("webhook secrets: %w", err)
	}
	// Tracing is on with a provider: then the request, its queries, the
	// provider calls, the outbox, the consumer, the recoverer and the
	// webhook worker start spans, and log lines carry trace_id and span_id.
	// Off, none of them is even wrapped (tracing.Disabled). Building the
	// exporter only reads its configuration: it sends nothing before the
	// first span ends.
	tp, traces, err := tracerProvider(context.Background(), cfg, a.opts)
	if err != nil {
		return nil, err
	}
	a.traces = traces
	if tp != nil {
		a.traced = true
		logger = slog.New(tracing.LogHandler(logger.Handler()))
		a.logger = logger
		// The pool Start opens (connectDatabase) traces every query.
		a.dbTracer = otelpgx.NewTracer(otelpgx.WithTracerProvider(tp), otelpgx.WithMeterProvider(metricnoop.NewMeterProvider()))
	} else {
		tp = tracing.Disabled()
	}
	a.tp = tp
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		shutdownTraces(traces)
		return nil, fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	a.conns = httpapi.NewConnLimiter(cfg.MaxConnections)
	a.ln = a.conns.Listener(ln)
	a.handler = newSwitchHandler(httpapi.Starting(a.waitingFor, logger))
	return a, nil
}

// build builds every part on the connected database and broker (Start):
// it seeds the demo tenants in demo mode, declares the stream and the
// consumer, and makes the API handler.
func (a *App) build(ctx context.Context) (err error) {
	cfg, logger, now, pool, o := a.cfg, a.logger, a.now, a.pool, a.opts
	tp, traced := a.tp, a.traced
	a.tenants = NewTenants(pool, cfg, now)
	if err := a.waitFor(ctx, depDatabase, func(ctx context.Context) error {
		return databaseTransient(CheckNoDemoKeys(ctx, cfg, a.tenants))
	}); err != nil {
		return err
	}
	var demoTenants []tenants.Tenant
	if cfg.DemoMode {
		if err := a.waitFor(ctx, depDatabase, func(ctx context.Context) (err error) {
			demoTenants, err = a.tenants.SeedDemo(ctx)
			return databaseTransient(err)
		}); err != nil {
			return err
		}
	}

	specs := Operations()
	m := metrics.New()
	m.Declare(knownSeries(specs))
	idem := newStore(cfg, now, idempotency.WithObserver(func(op idempotency.Operation, outcome idempotency.Outcome) {
		m.Idempotency(string(op), string(outcome))
	}))
	a.events = outbox.NewSignal()
	ops := operation.NewRunner(pool, idem, logger,
		operation.WithWriteTimeout(cfg.WriteTimeout),
		operation.WithAfterCommit(a.events.Committed),
		operation.WithHooks(o.operationHooks),
		operation.WithRecoveryBound(recoveryBound(cfg)),
		operation.WithTracerProvider(tp))
	orderSvc := orders.NewService(pool, ops, now)
	a.orders = orderSvc
	for _, t := range demoTenants {
		if err := a.waitFor(ctx, depDatabase, func(ctx context.Context) error {
			return databaseTransient(orderSvc.SeedCatalog(ctx, t.ID, orders.DemoCatalog()))
		}); err != nil {
			return fmt.Errorf("seed the catalog of demo tenant %s: %w", t.Slug, err)
		}
	}
	providerOpts := []payments.ProviderOption{
		payments.WithAPIKey(cfg.PSPAPIKey), payments.WithTimeout(cfg.PSPTimeout), payments.WithCallObserver(m.ProviderCall),
	}
	if traced {
		providerOpts = append(providerOpts, payments.WithTracerProvider(tp))
	}
	provider := payments.NewProvider(cfg.PSPURL, providerOpts...)
	a.payments = payments.NewService(pool, ops, orderSvc, provider, logger, now)
	a.recoverer = operation.NewRecoverer(ops, a.payments.Operations()...)
	if err := CheckOperations(specs, a.recoverer.Resumes); err != nil {
		return fmt.Errorf("refusing to start: %w", err)
	}
	m.WatchOutbox(func(ctx context.Context) (int64, time.Duration, int64, error) { return outbox.Stats(ctx, pool) })
	m.WatchAttention(func(ctx context.Context) (map[string]int64, error) { return openAttention(ctx, pool) })
	if err := a.startEvents(ctx, cfg, logger, now, m, orderSvc, o, tp); err != nil {
		return err
	}
	a.webhookWorker = webhooks.NewWorker(pool, a.payments, logger, now, webhooks.WithRoundTimeout(cfg.WriteTimeout),
		webhooks.WithSignal(a.events), webhooks.WithApplyObserver(m.WebhookProcessed), webhooks.WithTracerProvider(tp))
	demoOpts := []demo.HandlerOption{
		demo.WithDemoMode(cfg.DemoMode),
		demo.WithReplay(func(ctx context.Context, id uuid.UUID) error {
			_, err := a.outboxAdmin.Replay(ctx, id)
			return err
		}),
	}
	if cfg.PSPURL != "" { // without one there is no provider to ask for its ledger or faults
		demoOpts = append(demoOpts, demo.WithSimulator(demo.NewSimulator(cfg.PSPURL, demo.WithAPIKey(cfg.PSPAPIKey), demo.WithTimeout(cfg.PSPTimeout))))
	}
	if a.sweeper, err = newSweeper(pool, cfg, idem, logger, now,
		retention.WithReportObserver(func(r retention.Report) { m.Swept(r.Deleted, r.Stuck) })); err != nil {
		return err
	}
	admission := httpapi.NewAdmission(cfg.MaxInFlight, cfg.AdmissionWait, httpapi.WithShedObserver(m.Shed))
	m.WatchAdmission(admission.InFlight, admission.Limit())
	m.WatchConnections(a.conns.Open, a.conns.Limit(), a.conns.Reclaimed)
	a.api = httpapi.New(pool, m.Handler(),
		webhooks.NewReceiver(pool, a.verifier, logger, now,
			webhooks.WithNotify(a.webhookWorker.Notify), webhooks.WithResultObserver(m.Webhook)),
		a.tenants,
		orders.NewHandler(orderSvc),
		payments.NewHandler(a.payments),
		outbox.NewHandler(pool),
		demo.NewHandler(pool, orderSvc, a.payments, logger, now, demoOpts...),
		logger,
		httpapi.WithOutboxAdmin(outbox.NewAdminHandler(a.outboxAdmin), cfg.AdminToken),
		httpapi.WithAttentionAdmin(attention.NewAdminHandler(NewAttentionAdmin(pool, idem, now, logger.With("component", "attention-admin"))), cfg.AdminToken),
		httpapi.WithRequestObserver(m.HTTP),
		httpapi.WithAdmission(admission),
		httpapi.WithRequestTimeout(cfg.WriteTimeout))
	if traced {
		// The request's server span (and the trace context a client sent)
		// wraps the whole handler; httpapi names it after the route and
		// puts the tenant and the idempotency decision on it. The starting
		// answers before build are not traced.
		a.api = otelhttp.NewHandler(a.api, "http request",
			otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(tracing.Propagator()),
			otelhttp.WithMeterProvider(metricnoop.NewMeterProvider())) // requests are counted by WithRequestObserver
	}
	return nil
}

// tracerProvider returns the provider to trace with: the one the options
// give, or an OTLP exporter to cfg.TracesEndpoint (also returned, for Close
// to flush), or nil with tracing off.
func tracerProvider(ctx context.Context, cfg Config, o options) (trace.TracerProvider, *sdktrace.TracerProvider, error) {
	if o.tracerProvider != nil {
		return o.tracerProvider, nil, nil
	}
	if cfg.TracesEndpoint == "" {
		return nil, nil, nil
	}
	sdk, err := tracing.NewProvider(ctx, cfg.TracesEndpoint)
	if err != nil {
		return nil, nil, err
	}
	return sdk, sdk, nil
}

// shutdownTraces exports the spans still buffered, for at most five
// seconds: a collector that does not answer must not hold up a shutdown.
func shutdownTraces(tp *sdktrace.TracerProvider) {
	if tp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = tp.Shutdown(ctx) // the spans are lost either way; the service's own work is done
}

// The results of oncepay_consumer_messages_total.
const (
	consumedProcessed = "processed" // the effect was applied
	consumedDuplicate = "duplicate" // the inbox had the message id
)

// knownSeries are the metric label values known before the first request:
// every registered operation and every result each mechanism reports.
func knownSeries(specs []operation.Spec) metrics.Known {
	k := metrics.Known{
		ProviderCalls:     payments.ProviderCalls(),
		WebhookDeliveries: webhooks.DeliveryResults(),
		WebhookProcessed:  webhooks.ProcessResults(),
		SweptTables:       retention.TableNames(),
		PublishResults:    outbox.AttemptResults(),
		Consumers:         map[string][]string{fulfillment.Subscriber: {consumedProcessed, consumedDuplicate}},
	}
	for _, r := range attention.Reasons() {
		k.AttentionReasons = append(k.AttentionReasons, string(r))
	}
	for _, s := range specs {
		k.Operations = append(k.Operations, string(s.Name))
	}
	for _, o := range idempotency.Outcomes() {
		k.Outcomes = append(k.Outcomes, string(o))
	}
	return k
}

// recoveryBound is the recoverer's bound of cfg.
func recoveryBound(cfg Config) operation.RecoveryBound {
	return operation.RecoveryBound{MaxAttempts: cfg.RecovererMaxAttempts, Backoff: cfg.RecovererBackoff, MaxBackoff: cfg.RecovererBackoffMax}
}

// openAttention counts the open items of the needs-attention queue by
// reason, for the metrics.
func openAttention(ctx context.Context, pool *pgxpool.Pool) (map[string]int64, error) {
	counts, err := attention.OpenCounts(ctx, pool)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(counts))
	for r, n := range counts {
		out[string(r)] = n
	}
	return out, nil
}

// connectBroker connects the broker (embedding one unless NATS_URL is
// set), retrying a NATS_URL that does not answer yet until ctx ends.
func (a *App) connectBroker(ctx context.Context) error {
	cfg, logger := a.cfg, a.logger
	natsURL := cfg.NATSURL
	if natsURL == "" {
		var err error
		if a.nats, err = broker.StartEmbedded(cfg.NATSStoreDir, logger.With("component", "nats")); err != nil {
			return err
		}
		natsURL = a.nats.ClientURL()
	}
	return a.waitFor(ctx, depBroker, func(context.Context) error {
		nc, js, err := broker.Connect(natsURL, "oncepay-api", logger.With("component", "nats"), broker.WithPingInterval(cfg.NATSPingInterval))
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
			return permanent(err) // it answered, and refused us: waiting will not change that
		}
		a.nc, a.js = nc, js
		return err
	})
}

// startEvents declares the stream on the connected broker, and builds the
// outbox dispatcher and the fulfillment consumer (rule 6); Serve runs them.
func (a *App) startEvents(ctx context.Context, cfg Config, logger *slog.Logger, now func() time.Time, m *metrics.Metrics, orderSvc *orders.Service, o options, tp trace.TracerProvider) (err error) {
	js := a.js
	if err := a.waitFor(ctx, depBroker, func(ctx context.Context) error {
		return brokerTransient(broker.EnsureStreams(ctx, js, broker.StreamsConfig{DuplicateWindow: cfg.NATSDuplicateWindow, MaxAge: cfg.NATSStreamMaxAge, Replicas: cfg.NATSStreamReplicas}))
	}); err != nil {
		return err
	}
	if cfg.OutboxDispatcher {
		if a.dispatcher, err = outbox.NewDispatcher(a.pool, js, logger.With("component", "outbox"), now,
			outbox.WithPollInterval(cfg.OutboxPollInterval), outbox.WithMaxAttempts(cfg.OutboxMaxAttempts), outbox.WithAtomicBatches(cfg.OutboxAtomicMin), outbox.WithLinger(cfg.OutboxLinger),
			outbox.WithPublishTimeout(cfg.OutboxPublishTimeout), outbox.WithLease(cfg.OutboxLease), outbox.WithDatabaseTimeout(cfg.WriteTimeout),
			outbox.WithPublishObserver(m.OutboxPublish), outbox.WithSignal(a.events), outbox.WithHooks(o.outboxHooks),
			outbox.WithTracerProvider(tp)); err != nil {
			return err
		}
	}
	if cfg.FulfillmentConsumer {
		a.fulfillment = fulfillment.New(a.pool, js, orderSvc, logger.With("component", "fulfillment"), now,
			fulfillment.WithProcessTimeout(cfg.WriteTimeout),
			fulfillment.WithCommitObserver(func(_ string, outcome fulfillment.Outcome) {
				result := consumedProcessed
				if outcome == fulfillment.Duplicate {
					result = consumedDuplicate
				}
				m.Consumed(fulfillment.Subscriber, result)
			}),
			fulfillment.WithHooks(o.fulfillmentHooks),
			fulfillment.WithTracerProvider(tp))
		if err := a.waitFor(ctx, depBroker, func(ctx context.Context) error {
			_, err := a.fulfillment.Declare(ctx)
			return brokerTransient(err)
		}); err != nil {
			return err
		}
	}
	a.outboxAdmin = outbox.NewAdmin(a.pool, js, logger.With("component", "outbox-admin"))
	return nil
}

// brokerTransient marks an error of a JetStream request at start as
// permanent unless it is one a retry can mend: no answer in time (the
// connection broke and was mended while the request was out: its answer
// never comes), or no connection at that moment. Start retries those,
// each attempt bounded (waitFor), instead of waiting for an answer that is
// lost until STARTUP_TIMEOUT. Anything else (a stream configured with
// more replicas, a window longer than the stream's age) is the
// configuration's, and waiting will not change it.
func brokerTransient(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionClosed):
		return err
	}
	return permanentSetup(err)
}

// databaseTransient marks an error of a setup step on the database as
// permanent unless a retry can mend it: the database did not answer or the
// connection broke (postgres.IsUnavailable), or an operator or a restart
// ended the session (SQLSTATE class 57P: a terminated backend, a shutdown,
// a server still starting). The setup steps (the demo keys' check, the demo
// seeds) are idempotent, so Start repeats them like a connection; before,
// one terminated backend made the process exit (found by the chaos run).
func databaseTransient(err error) error {
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case postgres.IsUnavailable(err), errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "57P"):
		return err
	}
	return permanentSetup(err)
}

// Addr is the address the API listens on.
func (a *App) Addr() net.Addr { return a.ln.Addr() }

// Recoverer returns the recoverer of abandoned payment and refund attempts
// (for tests, which run it when they mean to).
func (a *App) Recoverer() *operation.Recoverer { return a.recoverer }

// Tenants returns the tenants service (for tests, which create tenants of
// their own).
func (a *App) Tenants() *tenants.Service { return a.tenants }

// Orders returns the orders service (for tests, which give a tenant that
// demo mode did not seed a catalog).
func (a *App) Orders() *orders.Service { return a.orders }

// Sweeper returns the retention sweeper (for `api sweep` and tests).
func (a *App) Sweeper() *retention.Sweeper { return a.sweeper }

// Handler returns the API's HTTP handler (nil until Start has built it).
func (a *App) Handler() http.Handler { return a.api }

// Pool returns the database pool.
func (a *App) Pool() *pgxpool.Pool { return a.pool }

// Close releases what New and Start acquired. Call it after Serve, or a
// Start that failed, returned; calling it again does nothing.
func (a *App) Close() {
	if a.srv != nil {
		_ = a.srv.Close() // Serve's shutdown drained it already, or Start failed
	}
	if a.ln != nil {
		_ = a.ln.Close() // closed with srv, or it never served
	}
	if a.dispatcher != nil {
		a.dispatcher.Close()
	}
	if a.nc != nil {
		a.nc.Close()
	}
	if a.nats != nil {
		a.nats.Shutdown()
	}
	if a.pool != nil {
		a.pool.Close()
	}
	shutdownTraces(a.traces)
}

// Start serves HTTP at once and brings the service up: it waits for the
// database and the broker together, retrying each with backoff and logging
// every retry; once the database answers it applies the migrations
// (AUTO_MIGRATE), seeds the demo tenants in demo mode and builds every part,
// and from then on the API answers. Until then /healthz answers 200 and
// every other path, /readyz too, 503 service_unavailable (httpapi.Starting).
// All of it must happen within StartupTimeout. Past it, or when a
// dependency refuses us for good (a role or database that does not exist,
// a broker that rejects our credentials), Start stops serving, releases what
// it opened and returns one line that says what never came. Serve runs the
// workers.
func (a *App) Start(ctx context.Context) (err error) {
	a.srv = a.httpServer(a.handler)
	a.served = make(chan error, 1)
	go func() { a.served <- a.srv.Serve(a.ln) }()
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	ctx, cancel := context.WithTimeoutCause(ctx, a.cfg.StartupTimeout, errStartupTimeout)
	defer cancel()
	if err := a.connect(ctx); err != nil {
		return err
	}
	if a.cfg.AutoMigrate {
		if err := postgres.Migrate(ctx, a.cfg.DatabaseURL, a.logger); err != nil {
			return err
		}
	}
	if err := a.build(ctx); err != nil {
		if errors.Is(context.Cause(ctx), errStartupTimeout) {
			return fmt.Errorf("not ready within STARTUP_TIMEOUT (%s): %w", a.cfg.StartupTimeout, err)
		}
		return err
	}
	a.handler.serve(a.api)
	return nil
}

// Serve runs the background workers, beside the API that Start serves,
// until ctx is cancelled, then shuts down in order: stop accepting and drain
// in-flight requests (at most ShutdownTimeout), then stop the workers (at
// most ShutdownTimeout again; workers still running then are reported and
// left to their own bounds). Work cut off by the shutdown is safe: it is
// either committed or resumed by a retry or by the recoverer of another
// process. Every request and every worker round is bounded (WriteTimeout),
// so a dependency that never answers cannot hold the shutdown, nor Close
// after it. Call it after Start returned nil.
func (a *App) Serve(ctx context.Context) error {
	srv, errc := a.srv, a.served
	workers, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWorkers()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		running = map[string]bool{}
	)
	run := func(name string, fn func(context.Context) error) {
		wg.Add(1)
		mu.Lock()
		running[name] = true
		mu.Unlock()
		go func() {
			defer wg.Done()
			defer func() {
				mu.Lock()
				delete(running, name)
				mu.Unlock()
			}()
			if err := fn(workers); err != nil && !errors.Is(err, context.Canceled) {
				a.logger.Error("worker stopped", "worker", name, "error", err.Error())
			}
		}()
	}
	run("webhooks-worker", func(ctx context.Context) error { return a.webhookWorker.Run(ctx, a.cfg.WebhookWorkerInterval) })
	if a.dispatcher != nil {
		run("outbox-dispatcher", a.dispatcher.Run)
	}
	if a.fulfillment != nil {
		run("fulfillment", a.fulfillment.Run)
	}
	if a.cfg.SweepInterval > 0 {
		run("retention-sweeper", func(ctx context.Context) error { return a.sweeper.Run(ctx, a.cfg.SweepInterval) })
	}
	if a.cfg.RecovererInterval > 0 {
		run("recoverer", func(ctx context.Context) error { return a.recoverer.Run(ctx, a.cfg.RecovererInterval) })
	}

	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
	}
	a.logger.Info("shutting down: draining in-flight requests", "timeout", a.cfg.ShutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if err != nil {
		err = fmt.Errorf("drain API requests: %w", err)
	}
	stopWorkers()
	stopped := make(chan struct{})
	go func() {
		wg.Wait()
		close(stopped)
	}()
	workersDeadline := time.NewTimer(a.cfg.ShutdownTimeout)
	defer workersDeadline.Stop()
	select {
	case <-stopped:
	case <-workersDeadline.C:
		mu.Lock()
		names := slices.Sorted(maps.Keys(running))
		mu.Unlock()
		err = errors.Join(err, fmt.Errorf("background workers still running %s after they were told to stop: %s", a.cfg.ShutdownTimeout, strings.Join(names, ", ")))
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(fmt.Errorf("serve: %w", serveErr), err)
	}
	return err
}

func (a *App) httpServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler: h,
		// Slow clients must not hold connections forever; writes get more
		// time than reads because a started write runs to its end anyway.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       a.cfg.ReadTimeout,
		WriteTimeout:      a.cfg.WriteTimeout + 5*time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		// The limiter learns which connections are idle, to close the
		// longest idle one when a new client finds every slot taken.
		ConnState: a.conns.ConnState,
		// "OPTIONS *" reaches the handler (and its problem+json 404)
		// instead of net/http's own empty 200.
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     slog.NewLogLogger(a.logger.Handler(), slog.LevelWarn),
	}
}
