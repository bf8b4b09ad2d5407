package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/attention"
	"github.com/oncepay/oncepay/internal/broker"
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
		operation.WithRecoveryBound(cfg.Tuning.recoveryBound()),
		operation.WithTracerProvider(tp))
	// A rule across features goes here, in the wiring: a cancel asks the
	// payments feature whether the order is being paid, under the order's
	// lock, without orders importing payments.
	orderSvc := orders.NewService(pool, ops, now, orders.WithLivePayment(payments.HasLivePayment))
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
	if err := a.startEvents(ctx, cfg, logger, now, m, orderSvc, tp); err != nil {
		return err
	}
	a.webhookWorker = webhooks.NewWorker(pool, a.payments, logger, now, webhooks.WithRoundTimeout(cfg.WriteTimeout),
		webhooks.WithSignal(a.events), webhooks.WithApplyObserver(m.WebhookProcessed), webhooks.WithTracerProvider(tp))
	a.sweeper = newSweeper(pool, cfg, idem, logger, now,
		retention.WithReportObserver(func(r retention.Report) { m.Swept(r.Deleted, r.Stuck) }))
	admission := httpapi.NewAdmission(cfg.Tuning.MaxInFlight, cfg.Tuning.AdmissionWait,
		httpapi.WithWebhookLimit(cfg.Tuning.WebhookMaxInFlight), httpapi.WithTenantShare(cfg.Tuning.TenantShare),
		httpapi.WithBodyReadTimeout(cfg.Tuning.BodyReadTimeout), httpapi.WithShedObserver(m.Shed))
	m.WatchAdmission(admission.InFlight, map[string]int{
		httpapi.PoolAPI: admission.Limit(httpapi.PoolAPI), httpapi.PoolWebhooks: admission.Limit(httpapi.PoolWebhooks),
	})
	m.WatchConnections(a.conns.Open, a.conns.Limit(), a.conns.Reclaimed)
	httpOpts := []httpapi.Option{
		httpapi.WithOutboxAdmin(outbox.NewAdminHandler(a.outboxAdmin), cfg.AdminToken),
		httpapi.WithAttentionAdmin(attention.NewAdminHandler(NewAttentionAdmin(pool, idem, now, logger.With("component", "attention-admin"))), cfg.AdminToken),
		httpapi.WithRequestObserver(m.HTTP),
		httpapi.WithAdminAuthObserver(m.AdminAuthFailure),
		httpapi.WithClock(now),
		httpapi.WithAdmission(admission),
		httpapi.WithRequestTimeout(cfg.WriteTimeout),
	}
	// starter:remove begin (make starter cuts this block: docs/FORKING.md)
	httpOpts = append(httpOpts, a.demoHTTP(orderSvc)...) // the web UI and /demo (demo.go)
	// starter:remove end
	a.api = httpapi.New(pool, m.Handler(),
		webhooks.NewReceiver(pool, a.verifier, logger, now,
			webhooks.WithNotify(a.webhookWorker.Notify), webhooks.WithResultObserver(m.Webhook)),
		a.tenants,
		orders.NewHandler(orderSvc),
		payments.NewHandler(a.payments),
		outbox.NewHandler(pool),
		operation.NewKeyHandler(ops, specs),
		logger, httpOpts...)
	if traced {
		// The request's server span wraps the whole handler; httpapi names
		// it after the route and puts the tenant and the idempotency
		// decision on it. The starting answers before build are not traced.
		// A client's traceparent is anyone's: unless the tuning trusts it,
		// the request starts a trace of its own (sampled by our sampler,
		// whatever the client's flags) with a link to the client's.
		opts := []otelhttp.Option{
			otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(tracing.Propagator()),
			otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()), // requests are counted by WithRequestObserver
		}
		if !cfg.Tuning.TrustTraceparent {
			opts = append(opts, otelhttp.WithPublicEndpointFn(func(*http.Request) bool { return true }))
		}
		a.api = otelhttp.NewHandler(a.api, "http request", opts...)
	}
	return nil
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
		AdminAuthResults:  httpapi.AdminAuthResults(),
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

// startEvents declares the stream on the connected broker, and builds the
// outbox dispatcher and the fulfillment consumer, which make each event
// reach the consumers and take effect once; Serve runs them.
func (a *App) startEvents(ctx context.Context, cfg Config, logger *slog.Logger, now func() time.Time, m *metrics.Metrics, orderSvc *orders.Service, tp trace.TracerProvider) (err error) {
	js := a.js
	if err := a.waitFor(ctx, depBroker, func(ctx context.Context) error {
		return brokerTransient(broker.EnsureStreams(ctx, js, broker.StreamsConfig{DuplicateWindow: cfg.Tuning.NATSDuplicateWindow, MaxAge: streamMaxAge, Replicas: cfg.NATSStreamReplicas}))
	}); err != nil {
		return err
	}
	if cfg.OutboxDispatcher {
		if a.dispatcher, err = outbox.NewDispatcher(a.pool, js, logger.With("component", "outbox"), now,
			outbox.WithPollInterval(cfg.Tuning.OutboxPollInterval), outbox.WithAtomicBatches(cfg.Tuning.OutboxAtomicMin), outbox.WithLinger(cfg.Tuning.OutboxLinger),
			outbox.WithPublishTimeout(cfg.Tuning.OutboxPublishTimeout), outbox.WithLease(cfg.Tuning.OutboxLease), outbox.WithDatabaseTimeout(cfg.WriteTimeout),
			outbox.WithPublishObserver(m.OutboxPublish), outbox.WithSignal(a.events),
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
// lost until the startup timeout. Anything else (a stream configured with
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
