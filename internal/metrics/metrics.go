// Package metrics defines every Prometheus metric of the service in one
// place and serves them at /metrics. The mechanisms do not import it: each
// takes a small observer function, and internal/app connects them here. So a
// fork can swap the metrics backend by changing this package and the wiring.
// It reads no table either: the outbox's gauges come from a function the
// outbox owns (outbox.Stats), which internal/app hands to WatchOutbox.
package metrics

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics holds the service's collectors on their own registry.
type Metrics struct {
	reg *prometheus.Registry

	idempotency     *prometheus.CounterVec
	httpDuration    *prometheus.HistogramVec
	providerCalls   *prometheus.CounterVec
	webhooks        *prometheus.CounterVec
	webhookResults  *prometheus.CounterVec
	sweeperDeleted  *prometheus.CounterVec
	sweeperStuck    prometheus.Gauge
	publishAttempts *prometheus.CounterVec
	consumed        *prometheus.CounterVec
	shed            prometheus.Counter
	adminAuth       *prometheus.CounterVec

	// attentionReasons are the reasons of oncepay_attention_open_items
	// exported at zero (Declare).
	attentionReasons []string
}

// New creates the collectors and registers them, with the Go runtime and
// process collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		idempotency: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_idempotency_outcomes_total",
			Help: "Idempotent requests by operation and outcome: executed, replayed, mismatch, in_progress, resumed, late_retry.",
		}, []string{"operation", "outcome"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "oncepay_http_request_duration_seconds",
			Help:    "HTTP request latency by method, route template and status code.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"method", "route", "status"}),
		providerCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_provider_calls_total",
			Help: "Calls to the payment provider by call and result: succeeded, declined, unknown, rejected, found, not_found.",
		}, []string{"call", "result"}),
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_webhooks_received_total",
			Help: "Provider webhook deliveries by result: accepted, duplicate, rejected.",
		}, []string{"result"}),
		webhookResults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_webhooks_processed_total",
			Help: "Stored webhook receipts the worker processed, by result: applied, unchanged, not_ours, mismatch (about other money than ours: look at it), undecodable, failed (retried).",
		}, []string{"result"}),
		sweeperDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_sweeper_deleted_total",
			Help: "Expired records deleted by the retention sweeper, by table.",
		}, []string{"table"}),
		sweeperStuck: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "oncepay_sweeper_stuck_operations",
			Help: "Unsettled operations kept past their lease at the last sweep.",
		}),
		publishAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_outbox_publish_attempts_total",
			Help: "Outbox publish attempts by result: published (the broker acknowledged the event) or failed (no PubAck: broker down, no stream, timeout; the event backs off and is retried).",
		}, []string{"result"}),
		consumed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_consumer_messages_total",
			Help: "Messages handled by consumers and committed, by subscriber and result: processed (the effect was applied) or duplicate (the inbox already held the message id; acked, nothing applied).",
		}, []string{"subscriber", "result"}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "oncepay_http_shed_total",
			Help: "Requests answered 503 overloaded because their pool's slots were all taken and none freed within AdmissionWait, or because their tenant held its share (TenantShare) of them (oncepay_http_request_duration_seconds has them by route).",
		}),
		adminAuth: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_admin_auth_failures_total",
			Help: "Failed authentications at the operator's endpoints (/admin), by result: unauthorized (401: no token, or another one) or rate_limited (429: the client address used up its failed attempts).",
		}, []string{"result"}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.idempotency, m.httpDuration, m.providerCalls, m.webhooks, m.webhookResults,
		m.sweeperDeleted, m.sweeperStuck, m.publishAttempts, m.consumed, m.shed, m.adminAuth,
	)
	return m
}

// Known are the label values the service knows before its first request.
// Declare exports a series at zero for each, so that a fresh server's
// /metrics already shows every outcome, dashboards have a line to draw and
// an alert on a rate compares against 0 instead of finding nothing.
type Known struct {
	// Operations and Outcomes: oncepay_idempotency_outcomes_total, every
	// pair.
	Operations, Outcomes []string
	// ProviderCalls: oncepay_provider_calls_total, each call's results.
	ProviderCalls map[string][]string
	// WebhookDeliveries and WebhookProcessed: oncepay_webhooks_received_total
	// and oncepay_webhooks_processed_total.
	WebhookDeliveries, WebhookProcessed []string
	// SweptTables: oncepay_sweeper_deleted_total.
	SweptTables []string
	// PublishResults: oncepay_outbox_publish_attempts_total.
	PublishResults []string
	// Consumers: oncepay_consumer_messages_total, each subscriber's results.
	Consumers map[string][]string
	// AttentionReasons: oncepay_attention_open_items (WatchAttention), each
	// reason of the needs-attention queue.
	AttentionReasons []string
	// AdminAuthResults: oncepay_admin_auth_failures_total.
	AdminAuthResults []string
}

// Declare exports every series of k at zero (a series already counted is
// left as it is).
func (m *Metrics) Declare(k Known) {
	for _, op := range k.Operations {
		for _, o := range k.Outcomes {
			m.idempotency.WithLabelValues(op, o)
		}
	}
	for call, results := range k.ProviderCalls {
		for _, r := range results {
			m.providerCalls.WithLabelValues(call, r)
		}
	}
	for _, r := range k.WebhookDeliveries {
		m.webhooks.WithLabelValues(r)
	}
	for _, r := range k.WebhookProcessed {
		m.webhookResults.WithLabelValues(r)
	}
	for _, table := range k.SweptTables {
		m.sweeperDeleted.WithLabelValues(table)
	}
	for _, r := range k.PublishResults {
		m.publishAttempts.WithLabelValues(r)
	}
	for sub, results := range k.Consumers {
		for _, r := range results {
			m.consumed.WithLabelValues(sub, r)
		}
	}
	for _, r := range k.AdminAuthResults {
		m.adminAuth.WithLabelValues(r)
	}
	m.attentionReasons = append(m.attentionReasons, k.AttentionReasons...)
}

// Shed counts a request answered 503 overloaded; route is its template,
// kept out of the labels (the request histogram has it).
func (m *Metrics) Shed(string) { m.shed.Inc() }

// AdminAuthFailure counts one failed authentication at the operator's
// endpoints by its result (httpapi.AdminAuthResults).
func (m *Metrics) AdminAuthFailure(result string) { m.adminAuth.WithLabelValues(result).Inc() }

// WatchAdmission exports, per pool of admission slots (the keys of
// limits, the pool label), the requests in flight (inFlight, read at each
// scrape) and the limit they are held to.
func (m *Metrics) WatchAdmission(inFlight func(pool string) int64, limits map[string]int) {
	for pool, limit := range limits {
		labels := prometheus.Labels{"pool": pool}
		limitGauge := prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "oncepay_http_requests_in_flight_limit",
			Help:        "The requests of a pool admitted at once (tuning: MaxInFlight for the api pool, WebhookMaxInFlight for webhooks); more wait up to AdmissionWait, then get 503 overloaded.",
			ConstLabels: labels,
		})
		limitGauge.Set(float64(limit))
		m.reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name:        "oncepay_http_requests_in_flight",
				Help:        "Requests being worked on now, by pool: api (/v1, /demo) and webhooks (/webhooks); at most oncepay_http_requests_in_flight_limit.",
				ConstLabels: labels,
			}, func() float64 { return float64(inFlight(pool)) }),
			limitGauge,
		)
	}
}

// WatchConnections exports the connections the server holds open (open,
// read at each scrape), MaxConnections, and the connections closed while
// they waited for their client, to make room for new ones (reclaimed).
func (m *Metrics) WatchConnections(open func() int64, limit int, reclaimed func() int64) {
	limitGauge := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "oncepay_http_connections_limit",
		Help: "MaxConnections (tuning): the connections held open at once; past it new ones wait in the kernel's accept queue, and the one that has waited longest for its client, at least ReclaimAfter, is closed to make room.",
	})
	limitGauge.Set(float64(limit))
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "oncepay_http_connections_open",
			Help: "HTTP connections open now, idle keep-alive ones included (at most oncepay_http_connections_limit).",
		}, func() float64 { return float64(open()) }),
		limitGauge,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "oncepay_http_connections_reclaimed_total",
			Help: "Connections closed while they waited for their client (idle, without complete headers, or without a request's whole body) because every connection slot was taken when a new client connected.",
		}, func() float64 { return float64(reclaimed()) }),
	)
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Idempotency counts one idempotent request's outcome.
func (m *Metrics) Idempotency(operation, outcome string) {
	m.idempotency.WithLabelValues(operation, outcome).Inc()
}

// HTTP observes one request. Each distinct label set is a series kept for
// the life of the process, so method and route must come from bounded sets,
// never raw from the request: internal/httpapi passes a standard method or
// OTHER, and a route template.
func (m *Metrics) HTTP(method, route string, status int, d time.Duration) {
	m.httpDuration.WithLabelValues(method, route, strconv.Itoa(status)).Observe(d.Seconds())
}

// ProviderCall counts one call to the payment provider.
func (m *Metrics) ProviderCall(call, result string) {
	m.providerCalls.WithLabelValues(call, result).Inc()
}

// Webhook counts one webhook delivery.
func (m *Metrics) Webhook(result string) { m.webhooks.WithLabelValues(result).Inc() }

// WebhookProcessed counts one receipt the webhook worker processed.
func (m *Metrics) WebhookProcessed(result string) { m.webhookResults.WithLabelValues(result).Inc() }

// Swept records one sweep.
func (m *Metrics) Swept(deleted map[string]int64, stuck int64) {
	for table, n := range deleted {
		m.sweeperDeleted.WithLabelValues(table).Add(float64(n))
	}
	m.sweeperStuck.Set(float64(stuck))
}

// OutboxPublish counts n outbox publish attempts with one result:
// "published" (acknowledged by the broker) or "failed" (the dispatcher's
// outbox.AttemptPublished and outbox.AttemptFailed).
func (m *Metrics) OutboxPublish(result string, n int) {
	m.publishAttempts.WithLabelValues(result).Add(float64(n))
}

// Consumed counts one message a consumer handled.
func (m *Metrics) Consumed(subscriber, result string) {
	m.consumed.WithLabelValues(subscriber, result).Inc()
}

// WatchOutbox adds the outbox's gauges, which stats feeds at scrape time
// (outbox.Stats): unpublished events, the age of the oldest one (publication
// lag), and the events the dispatcher gave up on. stats runs once per scrape,
// so the three agree with each other; when it fails, every gauge reads -1.
func (m *Metrics) WatchOutbox(stats func(ctx context.Context) (pending int64, lag time.Duration, stuck int64, err error)) {
	m.reg.MustRegister(&outboxCollector{
		stats: stats,
		pending: prometheus.NewDesc("oncepay_outbox_pending_events",
			"Outbox events not yet published (-1: could not be read).", nil, nil),
		lag: prometheus.NewDesc("oncepay_outbox_lag_seconds",
			"Age of the oldest unpublished outbox event (0 when none; -1: could not be read).", nil, nil),
		stuck: prometheus.NewDesc("oncepay_outbox_stuck_events",
			"Outbox events the dispatcher gave up on until an operator retries them (-1: could not be read).", nil, nil),
	})
}

// outboxCollector reads the outbox's gauges at scrape time.
type outboxCollector struct {
	stats               func(ctx context.Context) (pending int64, lag time.Duration, stuck int64, err error)
	pending, lag, stuck *prometheus.Desc
}

func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.lag
	ch <- c.stuck
}

func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	pending, lag, stuck, err := c.stats(ctx)
	p, l, s := float64(pending), lag.Seconds(), float64(stuck)
	if err != nil {
		p, l, s = -1, -1, -1 // visible as impossible, rather than a plausible 0
	}
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, p)
	ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, l)
	ch <- prometheus.MustNewConstMetric(c.stuck, prometheus.GaugeValue, s)
}

// WatchAttention adds oncepay_attention_open_items, the open items of the
// needs-attention queue by reason, which counts feeds at scrape time
// (attention.OpenCounts: one statement per scrape, over every process's
// items). Every reason Declare knows is exported, at zero when it has no
// open item; when counts fails, each of them reads -1. Call it after
// Declare.
func (m *Metrics) WatchAttention(counts func(ctx context.Context) (map[string]int64, error)) {
	m.reg.MustRegister(&attentionCollector{
		counts:  counts,
		reasons: m.attentionReasons,
		open: prometheus.NewDesc("oncepay_attention_open_items",
			"Open items of the needs-attention queue by reason: attempts held for an operator and webhooks set aside (GET /admin/attention, api attention list; -1: could not be read). Alert on anything above 0.",
			[]string{"reason"}, nil),
	})
}

// attentionCollector reads the open attention items at scrape time.
type attentionCollector struct {
	counts  func(ctx context.Context) (map[string]int64, error)
	reasons []string
	open    *prometheus.Desc
}

func (c *attentionCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.open }

func (c *attentionCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := c.counts(ctx)
	for _, r := range c.reasons {
		v := float64(counts[r])
		if err != nil {
			v = -1 // visible as impossible, rather than a plausible 0
		}
		ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, v, r)
	}
	for r, n := range counts { // a reason this binary does not know (a newer process raised it)
		if !slices.Contains(c.reasons, r) {
			ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(n), r)
		}
	}
}
