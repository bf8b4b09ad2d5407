// Package tracing holds what the service's OpenTelemetry traces share: the
// W3C trace context as it is stored with a record (an outbox row, an
// idempotency record) and as it travels in NATS message headers, the names
// of the service's own span attributes, the log handler that writes the
// trace and span ids on every line logged inside a span, and the SDK's
// tracer provider, which exports OTLP over HTTP when an endpoint is
// configured (internal/app decides; without one nothing is traced and
// nothing is paid for).
//
// The service's packages use the OpenTelemetry API only
// (go.opentelemetry.io/otel/trace), through a trace.TracerProvider each is
// given as an option, never a global: the default is the API's no-op
// provider. The request span and the database and provider-call spans come
// from the maintained instrumentation (otelhttp, otelpgx); the spans of the
// outbox, the consumer, the recoverer and the webhook worker, for which
// none exists, are the service's own.
//
// A request's trace starts at the service: a client's traceparent is
// linked, not continued, unless internal/app is told to trust it
// (Tuning.TrustTraceparent), and a tracestate is bounded before anything
// stores it (BoundTraceState).
//
// One trace follows an intent across its asynchronous steps: the claim
// stores the request's trace context on the idempotency record, the outbox
// row stores it next to the event, the dispatcher publishes under it and
// sends it on in the message headers, and the consumer continues it. Work
// that resumes an intent later (the recoverer, a client's retry after the
// lease ran out, a webhook that finishes a payment) starts a trace of its
// own with a link to the original request's.
package tracing

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Attributes of the service's spans, besides OpenTelemetry's semantic
// conventions (http.*, db.*, messaging.*).
const (
	// Tenant is the slug of the tenant the request authenticated as.
	Tenant = attribute.Key("oncepay.tenant")
	// Operation is the idempotent operation (orders.create,
	// payments.create, refunds.create).
	Operation = attribute.Key("oncepay.operation")
	// IdempotencyKey is the client's Idempotency-Key: the business intent.
	IdempotencyKey = attribute.Key("oncepay.idempotency.key")
	// Outcome is what the idempotency record decided for this request
	// (idempotency.Outcome: executed, replayed, mismatch, in_progress,
	// resumed, late_retry).
	Outcome = attribute.Key("oncepay.idempotency.outcome")
	// RecoveryPoint is where a resumed attempt started again.
	RecoveryPoint = attribute.Key("oncepay.recovery_point")
	// ProviderKey is the idempotency key sent to the payment provider
	// (payments.ProviderKey), on the provider call's client span.
	ProviderKey = attribute.Key("oncepay.provider.idempotency_key")
	// ProviderReference is the payment or refund id a lookup at the
	// provider asks about (a resumed attempt asks before it charges again).
	ProviderReference = attribute.Key("oncepay.provider.reference")
	// EventType is an outbox event's type (payment.succeeded, ...).
	EventType = attribute.Key("oncepay.event.type")
	// OutboxWait is how long an event waited in the outbox before this
	// publish, in seconds: from its commit to the dispatcher's claim.
	OutboxWait = attribute.Key("oncepay.outbox.wait_seconds")
	// Replay marks a publish an operator asked for (api outbox replay).
	Replay = attribute.Key("oncepay.outbox.replay")
	// Delivery is the broker's count of deliveries of a message, 1 the
	// first time.
	Delivery = attribute.Key("oncepay.delivery")
	// ConsumerOutcome is what a consumer did with a message
	// (fulfillment.Outcome: fulfilled, duplicate, ...).
	ConsumerOutcome = attribute.Key("oncepay.consumer.outcome")
	// WebhookID is a provider webhook's delivery id (webhook-id).
	WebhookID = attribute.Key("oncepay.webhook.id")
	// WebhookResult is what the webhook worker did with a receipt
	// (webhooks.ProcessResults: applied, unchanged, ...).
	WebhookResult = attribute.Key("oncepay.webhook.result")
)

// EventDuplicate is the span event of a consumer's inbox that found the
// message processed already: a redelivery, skipped by the consumer itself,
// whatever the broker deduplicated.
const EventDuplicate = "inbox duplicate, skipped"

// Disabled is the tracer provider of a service without tracing: every span
// it starts is a no-op that records nothing.
func Disabled() trace.TracerProvider { return noop.NewTracerProvider() }

// Propagator is the one propagator the service uses: the W3C trace context
// (traceparent, tracestate), with the tracestate bounded as the W3C allows
// (BoundTraceState) on its way in and out. Whoever sends a request chooses
// its tracestate, and the service stores the trace context with the
// idempotency record and the outbox event of that request (Capture): an
// unbounded one, 32 members of 512 bytes each, would be 16 KB more on every
// record, kept for days.
func Propagator() propagation.TextMapPropagator { return boundedTraceContext{} }

// The bounds of a tracestate (W3C Trace Context, "tracestate Limits"): at
// most 32 list members, and a vendor may cut it to 512 characters,
// removing the members longer than 128 characters first, then members from
// the end.
const (
	MaxTraceStateMembers = 32
	MaxTraceStateBytes   = 512
	longTraceStateMember = 128
)

// BoundTraceState returns ts cut to MaxTraceStateBytes as the W3C
// specifies: while it is too long, its members longer than 128 characters
// go first, last first, then members from the end. (OpenTelemetry's parser
// already refuses more than MaxTraceStateMembers members.)
func BoundTraceState(ts trace.TraceState) trace.TraceState {
	if len(ts.String()) <= MaxTraceStateBytes {
		return ts
	}
	var members []string
	size := -1 // the commas between members
	ts.Walk(func(k, v string) bool {
		members = append(members, k+"="+v)
		size += len(k) + 1 + len(v) + 1
		return true
	})
	for i := len(members) - 1; i >= 0 && size > MaxTraceStateBytes; i-- {
		if len(members[i]) > longTraceStateMember {
			size -= len(members[i]) + 1
			members = slices.Delete(members, i, i+1)
		}
	}
	for len(members) > 0 && size > MaxTraceStateBytes {
		size -= len(members[len(members)-1]) + 1
		members = members[:len(members)-1]
	}
	bounded, err := trace.ParseTraceState(strings.Join(members, ","))
	if err != nil { // members of a parsed tracestate parse again
		return trace.TraceState{}
	}
	return bounded
}

// boundedTraceContext is the W3C propagator with the tracestate bounded
// (BoundTraceState) in what it extracts and in what it injects.
type boundedTraceContext struct{ w3c propagation.TraceContext }

func (p boundedTraceContext) Inject(ctx context.Context, carrier propagation.TextMapCarrier) {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, sc.WithTraceState(BoundTraceState(sc.TraceState())))
	}
	p.w3c.Inject(ctx, carrier)
}

func (p boundedTraceContext) Extract(ctx context.Context, carrier propagation.TextMapCarrier) context.Context {
	sc := trace.SpanContextFromContext(p.w3c.Extract(context.Background(), carrier))
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc.WithTraceState(BoundTraceState(sc.TraceState())))
}

func (p boundedTraceContext) Fields() []string { return p.w3c.Fields() }

// Capture returns the trace context of ctx's span as the service stores it
// with a record: the propagator's fields as a JSON object. It is nil when
// ctx carries no valid span context (tracing is off), so a record written
// without tracing stores NULL.
func Capture(ctx context.Context) []byte {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	c := propagation.MapCarrier{}
	Propagator().Inject(ctx, c)
	b, err := json.Marshal(c)
	if err != nil { // a map of strings always encodes
		return nil
	}
	return b
}

// Restore returns ctx with the span context stored by Capture as its
// remote parent, so that a span started from it continues that trace. A
// missing or unreadable context leaves ctx as it is.
func Restore(ctx context.Context, stored []byte) context.Context {
	if len(stored) == 0 {
		return ctx
	}
	var c propagation.MapCarrier
	if err := json.Unmarshal(stored, &c); err != nil {
		return ctx
	}
	return Propagator().Extract(ctx, c)
}

// Link returns a link to the span stored by Capture, and false when there is
// none (the record was written without tracing).
func Link(stored []byte) (trace.Link, bool) {
	sc := trace.SpanContextFromContext(Restore(context.Background(), stored))
	if !sc.IsValid() {
		return trace.Link{}, false
	}
	return trace.Link{SpanContext: sc}, true
}

// Links returns the links to the stored contexts that have one.
func Links(stored ...[]byte) []trace.Link {
	var out []trace.Link
	for _, s := range stored {
		if l, ok := Link(s); ok {
			out = append(out, l)
		}
	}
	return out
}

// natsHeader carries the trace context in NATS message headers. NATS header
// names are case-sensitive; the W3C names are lower case on the wire, as in
// HTTP/2.
type natsHeader nats.Header

func (h natsHeader) Get(key string) string { return nats.Header(h).Get(key) }
func (h natsHeader) Set(key, value string) { nats.Header(h).Set(key, value) }
func (h natsHeader) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// InjectHeader writes the trace context of ctx's span into h (nothing when
// ctx carries none).
func InjectHeader(ctx context.Context, h nats.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		Propagator().Inject(ctx, natsHeader(h))
	}
}

// ExtractHeader returns ctx with the trace context h carries as its remote
// parent (ctx unchanged when h carries none).
func ExtractHeader(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return Propagator().Extract(ctx, natsHeader(h))
}

// LogHandler wraps h so that every record logged with a context that
// carries a valid span gets its trace_id and span_id: a log line found
// in the logs leads to its trace, and a trace to its log lines.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

func (h logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{h.Handler.WithAttrs(attrs)}
}

func (h logHandler) WithGroup(name string) slog.Handler {
	return logHandler{h.Handler.WithGroup(name)}
}
