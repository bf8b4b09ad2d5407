package app_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/fulfillment"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/testkit"
	"github.com/oncepay/oncepay/internal/tracing"
)

// traced is a test's service traced by the SDK into memory: every span is
// in spans as soon as it ended.
type traced struct {
	*testBundle
	spans *tracetest.InMemoryExporter
}

func setupTraced(t *testing.T, appOpts ...app.Option) traced {
	t.Helper()
	return setupTracedWith(t, appOpts)
}

// setupTracedWith is setupTraced with the configuration changed by opts.
func setupTracedWith(t *testing.T, appOpts []app.Option, opts ...func(*app.Config)) traced {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	// Registered before the service's own cleanup, so it runs after it: the
	// workers' last spans end before the provider shuts down.
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := traced{setupWith(t, append(appOpts, app.WithTracerProvider(tp)), opts...), exp}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("spans:\n%s", dump(exp.GetSpans()))
		}
	})
	return tr
}

// noWebhooks sends the provider's webhooks nowhere (a closed loopback
// port): only the request, the recoverer or a retry can finish a payment,
// never a webhook that overtakes them.
func (tr traced) noWebhooks(t *testing.T) {
	t.Helper()
	if err := tr.psp.SetWebhookURL("http://127.0.0.1:1/webhooks/psp"); err != nil {
		t.Fatal(err)
	}
}

// span waits for the one ended span that match accepts, and fails when
// there are more. what names it in the failure.
func (tr traced) span(t *testing.T, what string, match func(tracetest.SpanStub) bool) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	testkit.WaitFor(t, 10*time.Second, what, func() bool {
		found = tr.find(match)
		return len(found) > 0
	})
	if len(found) > 1 {
		t.Fatalf("%s: %d spans, want 1:\n%s", what, len(found), dump(found))
	}
	return found[0]
}

func (tr traced) find(match func(tracetest.SpanStub) bool) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range tr.spans.GetSpans() {
		if match(s) {
			out = append(out, s)
		}
	}
	return out
}

// request is the server span of the request with key and outcome (its
// idempotency decision).
func (tr traced) request(t *testing.T, name, key string, outcome idempotency.Outcome) tracetest.SpanStub {
	t.Helper()
	return tr.span(t, fmt.Sprintf("server span %s key %s %s", name, key, outcome), func(s tracetest.SpanStub) bool {
		return s.SpanKind == trace.SpanKindServer && s.Name == name &&
			attr(s, tracing.IdempotencyKey) == key && attr(s, tracing.Outcome) == string(outcome)
	})
}

// inTrace accepts the spans of kind in the trace of root.
func inTrace(root tracetest.SpanStub, kind trace.SpanKind, extra func(tracetest.SpanStub) bool) func(tracetest.SpanStub) bool {
	return func(s tracetest.SpanStub) bool {
		return s.SpanContext.TraceID() == root.SpanContext.TraceID() && s.SpanKind == kind && (extra == nil || extra(s))
	}
}

func attr(s tracetest.SpanStub, k attribute.Key) string {
	for _, kv := range s.Attributes {
		if kv.Key == k {
			return kv.Value.String()
		}
	}
	return ""
}

func dump(spans []tracetest.SpanStub) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s %s trace %s parent %s %v\n", s.SpanKind, s.Name, s.SpanContext.TraceID(), s.Parent.SpanID(), s.Attributes)
	}
	return b.String()
}

func wantChildOf(t *testing.T, child, parent tracetest.SpanStub) {
	t.Helper()
	if child.Parent.SpanID() != parent.SpanContext.SpanID() || child.SpanContext.TraceID() != parent.SpanContext.TraceID() {
		t.Fatalf("%q is not a child of %q: parent %s in trace %s, want %s in %s", child.Name, parent.Name,
			child.Parent.SpanID(), child.SpanContext.TraceID(), parent.SpanContext.SpanID(), parent.SpanContext.TraceID())
	}
}

func wantLinkTo(t *testing.T, s, original tracetest.SpanStub) {
	t.Helper()
	for _, l := range s.Links {
		if l.SpanContext.TraceID() == original.SpanContext.TraceID() && l.SpanContext.SpanID() == original.SpanContext.SpanID() {
			return
		}
	}
	t.Fatalf("%q (trace %s) has no link to %q (trace %s): links %v", s.Name, s.SpanContext.TraceID(), original.Name, original.SpanContext.TraceID(), s.Links)
}

const (
	routeOrders   = "POST /v1/orders"
	routePayments = "POST /v1/orders/:id/payments"
)

// A create: one server span with the tenant, the operation, the key and
// "executed"; its queries as otelpgx's child spans; and the order.created
// event published in the same trace, by a producer span that is the
// request's child (the outbox row stored the request's context).
func TestTraceOfACreate(t *testing.T) {
	t.Parallel()
	tr := setupTraced(t)
	tr.order(t, "o-trace")
	req := tr.request(t, routeOrders, "o-trace", idempotency.OutcomeExecuted)
	for k, want := range map[attribute.Key]string{
		tracing.Tenant: "acme", tracing.Operation: string(orders.OpCreate), "http.route": "/v1/orders", "http.response.status_code": "201",
	} {
		if got := attr(req, k); got != want {
			t.Errorf("request span %s = %q, want %q", k, got, want)
		}
	}
	queries := tr.find(inTrace(req, trace.SpanKindClient, func(s tracetest.SpanStub) bool {
		return s.InstrumentationScope.Name == "github.com/exaring/otelpgx"
	}))
	if len(queries) == 0 {
		t.Fatalf("no otelpgx query span in the request's trace:\n%s", dump(tr.spans.GetSpans()))
	}
	pub := tr.span(t, "publish of order.created", inTrace(req, trace.SpanKindProducer, nil))
	wantChildOf(t, pub, req)
	if pub.Name != "publish "+broker.Subject("order.created") || attr(pub, tracing.EventType) != "order.created" || attr(pub, tracing.OutboxWait) == "" {
		t.Fatalf("publish span = %s", dump([]tracetest.SpanStub{pub}))
	}
}

// A pay: request -> provider call (a client span with the provider key) ->
// commit -> publish -> consume, one trace; a replay of it is a server span
// of its own, "replayed", that calls nobody.
func TestTraceOfAPayAndItsReplay(t *testing.T) {
	t.Parallel()
	tr := setupTraced(t)
	tr.noWebhooks(t)
	orderID, _ := tr.order(t, "o1")
	r := tr.pay(t, orderID, "pay-trace", "pm_card_ok")
	if r.status != http.StatusCreated {
		t.Fatalf("pay: %d %s", r.status, r.body)
	}
	paymentID := r.json(t)["id"].(string)
	req := tr.request(t, routePayments, "pay-trace", idempotency.OutcomeExecuted)
	if attr(req, tracing.Operation) != string(payments.OpPay) || attr(req, tracing.Tenant) != "acme" {
		t.Fatalf("request span = %s", dump([]tracetest.SpanStub{req}))
	}
	providerKey := tr.psp.Ledger(paymentID).Charges[0].IdempotencyKey
	call := tr.span(t, "the provider call", inTrace(req, trace.SpanKindClient, func(s tracetest.SpanStub) bool {
		return s.InstrumentationScope.Name == "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	}))
	wantChildOf(t, call, req)
	if got := attr(call, tracing.ProviderKey); got != providerKey {
		t.Fatalf("provider call's key = %q, want %q (the simulator's ledger)", got, providerKey)
	}
	pub := tr.span(t, "publish of payment.succeeded", inTrace(req, trace.SpanKindProducer, func(s tracetest.SpanStub) bool {
		return attr(s, tracing.EventType) == fulfillment.EventPaymentSucceeded
	}))
	wantChildOf(t, pub, req)
	consume := tr.span(t, "the consumer's span", inTrace(req, trace.SpanKindConsumer, nil))
	wantChildOf(t, consume, pub)
	if attr(consume, tracing.ConsumerOutcome) != string(fulfillment.Fulfilled) || attr(consume, tracing.Delivery) != "1" {
		t.Fatalf("consumer span = %s", dump([]tracetest.SpanStub{consume}))
	}

	if again := tr.pay(t, orderID, "pay-trace", "pm_card_ok"); again.status != http.StatusCreated {
		t.Fatalf("replay: %d %s", again.status, again.body)
	}
	replay := tr.request(t, routePayments, "pay-trace", idempotency.OutcomeReplayed)
	if replay.SpanContext.TraceID() == req.SpanContext.TraceID() {
		t.Fatal("the replay shares the original's trace")
	}
	if calls := tr.find(inTrace(replay, trace.SpanKindClient, func(s tracetest.SpanStub) bool {
		return attr(s, tracing.ProviderKey) != ""
	})); len(calls) != 0 {
		t.Fatalf("the replay called the provider:\n%s", dump(calls))
	}
}

// A payment whose process died after the provider answered: whoever
// finishes it does so in a trace of its own, linked to the original
// request's: the recoverer and a client's retry after the lease ("resumed",
// calling the provider again with the same key) and the provider's webhook
// (which applies the charge it reports). The finisher's trace has the
// payment.succeeded publish.
func TestTraceOfAResumedPayment(t *testing.T) {
	t.Parallel()
	for _, by := range []string{"recoverer", "retry", "webhook"} {
		t.Run(by, func(t *testing.T) {
			t.Parallel()
			tr := setupTraced(t, crashOnce(payments.OpPay)...)
			if by != "webhook" {
				tr.noWebhooks(t)
			}
			orderID, _ := tr.order(t, "o1")
			r := tr.pay(t, orderID, "pay-resume", "pm_card_ok")
			if r.status < 500 {
				t.Fatalf("crashed request answered %d", r.status)
			}
			first := tr.request(t, routePayments, "pay-resume", idempotency.OutcomeExecuted)
			firstCall := tr.span(t, "the first provider call", inTrace(first, trace.SpanKindClient, func(s tracetest.SpanStub) bool {
				return attr(s, tracing.ProviderKey) != ""
			}))

			var resumed tracetest.SpanStub
			switch by {
			case "recoverer":
				tr.clock.Advance(31 * time.Second) // past the lease
				if n, err := tr.app.Recoverer().RecoverOnce(context.Background(), 10); err != nil || n != 1 {
					t.Fatalf("RecoverOnce = %d, %v; want 1", n, err)
				}
				resumed = tr.span(t, "the recoverer's span", func(s tracetest.SpanStub) bool {
					return s.Name == "recover "+string(payments.OpPay)
				})
				if attr(resumed, tracing.RecoveryPoint) == "" || attr(resumed, tracing.IdempotencyKey) != "pay-resume" {
					t.Fatalf("recoverer span = %s", dump([]tracetest.SpanStub{resumed}))
				}
			case "retry":
				tr.clock.Advance(31 * time.Second)
				if r := tr.pay(t, orderID, "pay-resume", "pm_card_ok"); r.status != http.StatusCreated {
					t.Fatalf("retry after the lease = %d %s", r.status, r.body)
				}
				resumed = tr.request(t, routePayments, "pay-resume", idempotency.OutcomeResumed)
			case "webhook":
				resumed = tr.span(t, "the webhook worker's span that applied the charge", func(s tracetest.SpanStub) bool {
					return strings.HasPrefix(s.Name, "webhook ") && attr(s, tracing.WebhookResult) == "applied"
				})
			}
			if resumed.SpanContext.TraceID() == first.SpanContext.TraceID() {
				t.Fatal("the finisher continues the dead request's trace instead of linking to it")
			}
			wantLinkTo(t, resumed, first)
			if by != "webhook" {
				if attr(resumed, tracing.Outcome) != string(idempotency.OutcomeResumed) {
					t.Fatalf("resumed span's outcome = %q", attr(resumed, tracing.Outcome))
				}
				// It asks the provider about the charge the dead request
				// made (and would charge with the same key if there were
				// none).
				charge := tr.psp.Ledger("").Charges[0]
				call := tr.span(t, "the resumed provider lookup", inTrace(resumed, trace.SpanKindClient, func(s tracetest.SpanStub) bool {
					return attr(s, tracing.ProviderReference) != ""
				}))
				if attr(firstCall, tracing.ProviderKey) != charge.IdempotencyKey || attr(call, tracing.ProviderReference) != charge.Metadata["reference"] {
					t.Fatalf("first call's key %q, resumed lookup's reference %q; the charge's %q, %q",
						attr(firstCall, tracing.ProviderKey), attr(call, tracing.ProviderReference), charge.IdempotencyKey, charge.Metadata["reference"])
				}
			}
			tr.span(t, "the finisher's publish", inTrace(resumed, trace.SpanKindProducer, func(s tracetest.SpanStub) bool {
				return attr(s, tracing.EventType) == fulfillment.EventPaymentSucceeded
			}))
		})
	}
}

// A client's traceparent is anyone's. By default a request does not
// continue it: it starts a trace of its own, sampled by the service's
// sampler whatever the client's flags say (00, "not sampled", no longer
// drops the request's spans), with a link to the client's span, and
// nothing of the client's tracestate is stored with the idempotency record
// or the outbox event. With TrustTraceparent the request continues the
// client's trace, and what is stored of its tracestate is bounded: a
// 32-member tracestate of 16 KB is cut to at most 512 bytes.
func TestIncomingTraceContext(t *testing.T) {
	t.Parallel()
	const clientTrace, clientSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	members := make([]string, tracing.MaxTraceStateMembers)
	for i := range members {
		members[i] = fmt.Sprintf("k%02d%s=%s", i, strings.Repeat("k", 238), strings.Repeat("v", 256))
	}
	for _, tc := range []struct {
		name  string
		trust bool
		flags string
	}{
		{"not trusted, flags 00", false, "00"},
		{"trusted, flags 01", true, "01"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := setupTracedWith(t, nil, func(c *app.Config) { c.Tuning.TrustTraceparent = tc.trust })
			req, err := http.NewRequest(http.MethodPost, tr.baseURL+"/v1/orders", strings.NewReader(orderBody))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+acme)
			req.Header.Set("Idempotency-Key", "o-traceparent")
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("traceparent", "00-"+clientTrace+"-"+clientSpan+"-"+tc.flags)
			req.Header.Set("tracestate", strings.Join(members, ","))
			res, err := tr.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = res.Body.Close()
			if res.StatusCode != http.StatusCreated {
				t.Fatalf("create: %d", res.StatusCode)
			}

			span := tr.request(t, routeOrders, "o-traceparent", idempotency.OutcomeExecuted)
			continued := span.SpanContext.TraceID().String() == clientTrace && span.Parent.SpanID().String() == clientSpan
			linked := len(span.Links) == 1 && span.Links[0].SpanContext.TraceID().String() == clientTrace &&
				span.Links[0].SpanContext.SpanID().String() == clientSpan
			if tc.trust && (!continued || linked) {
				t.Fatalf("trusted: the request's span is in trace %s under %s with links %v, want the client's trace, under its span",
					span.SpanContext.TraceID(), span.Parent.SpanID(), span.Links)
			}
			if !tc.trust && (continued || span.SpanContext.TraceID().String() == clientTrace || !linked) {
				t.Fatalf("not trusted: the request's span is in trace %s with links %v, want a trace of its own linked to the client's",
					span.SpanContext.TraceID(), span.Links)
			}
			tr.span(t, "publish of order.created", inTrace(span, trace.SpanKindProducer, nil))

			var stored []map[string]string
			rows, err := tr.pool.Query(context.Background(), `
				SELECT trace_context FROM api_idempotency WHERE idempotency_key = 'o-traceparent'
				UNION ALL SELECT trace_context FROM outbox_events WHERE idempotency_key = 'o-traceparent'`)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var c map[string]string
				if err := rows.Scan(&c); err != nil {
					t.Fatal(err)
				}
				stored = append(stored, c)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if len(stored) != 2 {
				t.Fatalf("%d stored trace contexts, want the record's and the event's", len(stored))
			}
			for _, c := range stored {
				state := c["tracestate"]
				if !strings.Contains(c["traceparent"], span.SpanContext.TraceID().String()) {
					t.Errorf("stored %v, not the request's trace %s", c, span.SpanContext.TraceID())
				}
				if tc.trust && (state == "" || len(state) > tracing.MaxTraceStateBytes || !strings.HasPrefix(members[0], state)) {
					t.Errorf("trusted: stored tracestate of %d bytes, want the client's first member, at most %d", len(state), tracing.MaxTraceStateBytes)
				}
				if !tc.trust && state != "" {
					t.Errorf("not trusted: stored tracestate of %d bytes, want none", len(state))
				}
			}
		})
	}
}
