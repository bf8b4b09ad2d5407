// Package app wires the service together: it builds every part from the
// configuration with explicit constructors, runs the server and the
// background workers, and shuts them down in order. Nothing else in the
// service reads the environment.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/fulfillment"
	"github.com/oncepay/oncepay/internal/httpapi"
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
	cfg    Config
	logger *slog.Logger
	now    func() time.Time
	opts   options
	pool   *pgxpool.Pool
	ln     net.Listener
	// conns bounds the connections ln holds open (Tuning.MaxConnections).
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
	operationHooks operation.Hooks
	tracerProvider trace.TracerProvider
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

// New prepares the running service (api serve) without touching its
// dependencies: it checks what the configuration alone decides (Check: the
// rules between settings, the retention policy; the webhook secrets) and
// listens on cfg.HTTPAddr, so a
// bad setting or a taken port fails at once. Start serves HTTP, waits for the
// database and the broker and builds every part; Serve runs them. The
// operator commands do not use it; they build their one service
// (commands.go).
func New(cfg Config, logger *slog.Logger, now func() time.Time, opts ...Option) (*App, error) {
	a := &App{cfg: cfg, logger: logger, now: now}
	for _, opt := range opts {
		opt(&a.opts)
	}
	if err := cfg.Check(); err != nil {
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
	a.conns = httpapi.NewConnLimiter(cfg.Tuning.MaxConnections, cfg.Tuning.ReclaimAfter)
	a.ln = a.conns.Listener(ln)
	a.handler = newSwitchHandler(httpapi.Starting(a.waitingFor, logger))
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
