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
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

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
	"github.com/oncepay/oncepay/internal/retention"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/tracing"
	"github.com/oncepay/oncepay/internal/webhooks"
)

// App is the service with everything it runs.
type App struct {
	cfg     Config
	logger  *slog.Logger
	pool    *pgxpool.Pool
	ln      net.Listener
	handler http.Handler

	orders    *orders.Service
	payments  *payments.Service
	recoverer *operation.Recoverer
	sweeper   *retention.Sweeper

	// nats is the embedded broker (nil with NATS_URL set).
	nats       *broker.Embedded
	nc         *nats.Conn
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

// New builds the running service (api serve): it connects to the database,
// applies migrations (unless disabled), seeds the demo tenants in demo mode,
// starts listening on cfg.HTTPAddr, connects the broker (embedding one
// without NATS_URL), and builds every part. Serve runs them. The operator
// commands do not use it; they build their one service (commands.go).
func New(ctx context.Context, cfg Config, logger *slog.Logger, now func() time.Time, opts ...Option) (_ *App, err error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	// Tracing is on with a provider: then the request, its queries, the
	// provider calls, the outbox, the consumer, the recoverer and the
	// webhook worker start spans, and log lines carry trace_id and span_id.
	// Off, none of them is even wrapped (tracing.Disabled).
	tp, traces, err := tracerProvider(ctx, cfg, o)
	if err != nil {
		return nil, err
	}
	traced := tp != nil
	var dbTracer pgx.QueryTracer
	if traced {
		logger = slog.New(tracing.LogHandler(logger.Handler()))
		dbTracer = otelpgx.NewTracer(otelpgx.WithTracerProvider(tp), otelpgx.WithMeterProvider(metricnoop.NewMeterProvider()))
	} else {
		tp = tracing.Disabled()
	}
	pool, err := openDatabase(ctx, cfg, dbTracer)
	if err != nil {
		shutdownTraces(traces)
		return nil, err
	}
	// a is not the named result: every error path returns nil for it, and
	// the cleanup must still see what was opened so far.
	a := &App{cfg: cfg, logger: logger, pool: pool, traces: traces}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	a.tenants = NewTenants(pool, cfg, now)
	var demoTenants []tenants.Tenant
	if cfg.DemoMode {
		if demoTenants, err = a.tenants.SeedDemo(ctx); err != nil {
			return nil, err
		}
	}
	if a.ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}

	specs := Operations()
	if err := retention.Check(cfg.Retention, cfg.Horizons, covers(specs)); err != nil {
		return nil, fmt.Errorf("refusing to start: %w", err)
	}
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
		operation.WithTracerProvider(tp))
	orderSvc := orders.NewService(pool, ops, now)
	a.orders = orderSvc
	for _, t := range demoTenants {
		if err := orderSvc.SeedCatalog(ctx, t.ID, orders.DemoCatalog()); err != nil {
			return nil, fmt.Errorf("seed the catalog of demo tenant %s: %w", t.Slug, err)
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
		return nil, fmt.Errorf("refusing to start: %w", err)
	}
	m.WatchOutbox(func(ctx context.Context) (int64, time.Duration, int64, error) { return outbox.Stats(ctx, pool) })
	if err := a.startEvents(ctx, cfg, logger, now, m, orderSvc, o, tp); err != nil {
		return nil, err
	}
	verifier, err := webhooks.NewVerifier(cfg.PSPWebhookSecrets, now)
	if err != nil {
		return nil, fmt.Errorf("webhook secrets: %w", err)
	}
	a.webhookWorker = webhooks.NewWorker(pool, a.payments, logger, now,
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
		return nil, err
	}
	a.handler = httpapi.New(pool, m.Handler(),
		webhooks.NewReceiver(pool, verifier, logger, now,
			webhooks.WithNotify(a.webhookWorker.Notify), webhooks.WithResultObserver(m.Webhook)),
		a.tenants,
		orders.NewHandler(orderSvc),
		payments.NewHandler(a.payments),
		outbox.NewHandler(pool),
		demo.NewHandler(pool, orderSvc, a.payments, logger, demoOpts...),
		logger,
		httpapi.WithOutboxAdmin(outbox.NewAdminHandler(a.outboxAdmin), cfg.AdminToken),
		httpapi.WithRequestObserver(m.HTTP))
	if traced {
		// The request's server span (and the trace context a client sent)
		// wraps the whole handler; httpapi names it after the route and
		// puts the tenant and the idempotency decision on it.
		a.handler = otelhttp.NewHandler(a.handler, "http request",
			otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(tracing.Propagator()),
			otelhttp.WithMeterProvider(metricnoop.NewMeterProvider())) // requests are counted by WithRequestObserver
	}
	return a, nil
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
	for _, s := range specs {
		k.Operations = append(k.Operations, string(s.Name))
	}
	for _, o := range idempotency.Outcomes() {
		k.Outcomes = append(k.Outcomes, string(o))
	}
	return k
}

// startEvents connects the broker (embedding one unless NATS_URL is set),
// declares the stream, and builds the outbox dispatcher and the fulfillment
// consumer (rule 6); Serve runs them.
func (a *App) startEvents(ctx context.Context, cfg Config, logger *slog.Logger, now func() time.Time, m *metrics.Metrics, orderSvc *orders.Service, o options, tp trace.TracerProvider) error {
	natsURL := cfg.NATSURL
	if natsURL == "" {
		var err error
		if a.nats, err = broker.StartEmbedded(cfg.NATSStoreDir, logger.With("component", "nats")); err != nil {
			return err
		}
		natsURL = a.nats.ClientURL()
	}
	nc, js, err := broker.Connect(natsURL, "oncepay-api", logger.With("component", "nats"))
	if err != nil {
		return err
	}
	a.nc = nc
	if err := broker.EnsureStreams(ctx, js, broker.StreamsConfig{DuplicateWindow: cfg.NATSDuplicateWindow, MaxAge: cfg.NATSStreamMaxAge}); err != nil {
		return err
	}
	if cfg.OutboxDispatcher {
		if a.dispatcher, err = outbox.NewDispatcher(a.pool, js, logger.With("component", "outbox"), now,
			outbox.WithPollInterval(cfg.OutboxPollInterval), outbox.WithMaxAttempts(cfg.OutboxMaxAttempts),
			outbox.WithPublishObserver(m.OutboxPublish), outbox.WithSignal(a.events), outbox.WithHooks(o.outboxHooks),
			outbox.WithTracerProvider(tp)); err != nil {
			return err
		}
	}
	if cfg.FulfillmentConsumer {
		a.fulfillment = fulfillment.New(a.pool, js, orderSvc, logger.With("component", "fulfillment"), now,
			fulfillment.WithCommitObserver(func(_ string, outcome fulfillment.Outcome) {
				result := consumedProcessed
				if outcome == fulfillment.Duplicate {
					result = consumedDuplicate
				}
				m.Consumed(fulfillment.Subscriber, result)
			}),
			fulfillment.WithHooks(o.fulfillmentHooks),
			fulfillment.WithTracerProvider(tp))
		if _, err := a.fulfillment.Declare(ctx); err != nil {
			return err
		}
	}
	a.outboxAdmin = outbox.NewAdmin(a.pool, js, logger.With("component", "outbox-admin"))
	return nil
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

// Handler returns the HTTP handler.
func (a *App) Handler() http.Handler { return a.handler }

// Pool returns the database pool.
func (a *App) Pool() *pgxpool.Pool { return a.pool }

// Close releases what New acquired. Call it after Serve returned.
func (a *App) Close() {
	if a.ln != nil {
		_ = a.ln.Close() // Serve's shutdown closed it already, or it never served
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
	a.pool.Close()
	shutdownTraces(a.traces)
}

// Serve runs the API and the background workers until ctx is cancelled,
// then shuts down in order: stop accepting and drain in-flight requests (at
// most ShutdownTimeout), then stop the workers. Work cut off by the shutdown
// is safe: it is either committed or resumed by a retry or by the recoverer
// of another process.
func (a *App) Serve(ctx context.Context) error {
	srv := a.httpServer(a.handler)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(a.ln) }()

	workers, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWorkers()
	var wg sync.WaitGroup
	run := func(name string, fn func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
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
	wg.Wait()
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
		// "OPTIONS *" reaches the handler (and its problem+json 404)
		// instead of net/http's own empty 200.
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     slog.NewLogLogger(a.logger.Handler(), slog.LevelWarn),
	}
}
