package fulfillment_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/fulfillment"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/testkit"
	"github.com/oncepay/oncepay/internal/tracing"
)

// A redelivered event (drill 4: the consumer committed and died before the
// ack) shows in the trace of the request that committed it: the publish is
// the request's child, and each delivery is a consumer span, child of the
// publish, the second one delivery 2 with the inbox's "duplicate, skipped"
// event and the outcome duplicate.
func TestTraceOfARedeliveredEvent(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b := setup(t, broker.StreamsConfig{})
	b.rec.dropAcks = 1
	b.runConsumer(t, fulfillment.WithAckWait(time.Second), fulfillment.WithTracerProvider(tp))
	runUntilCleanup(t, b.dispatcher(t, outbox.WithTracerProvider(tp)).Run)

	ctx, req := tp.Tracer("test").Start(context.Background(), "request", trace.WithSpanKind(trace.SpanKindServer))
	_, event := b.paidOrderIn(ctx, t, line{skuMug, 1})
	req.End()
	testkit.WaitFor(t, 20*time.Second, "the redelivery after the lost ack", func() bool { return len(b.rec.get(event)) >= 2 })
	b.settled(t)

	var root, publish tracetest.SpanStub
	var deliveries []tracetest.SpanStub
	testkit.WaitFor(t, 5*time.Second, "both consumer spans to end", func() bool {
		deliveries = deliveries[:0]
		for _, s := range exp.GetSpans() {
			switch s.SpanKind {
			case trace.SpanKindServer:
				root = s
			case trace.SpanKindProducer:
				publish = s
			case trace.SpanKindConsumer:
				deliveries = append(deliveries, s)
			}
		}
		return len(deliveries) == 2
	})
	traceID := root.SpanContext.TraceID()
	if publish.SpanContext.TraceID() != traceID || publish.Parent.SpanID() != root.SpanContext.SpanID() {
		t.Fatalf("publish span %q is not the request's child", publish.Name)
	}
	for i, d := range deliveries {
		if d.SpanContext.TraceID() != traceID || d.Parent.SpanID() != publish.SpanContext.SpanID() {
			t.Fatalf("delivery %d is not the publish's child: parent %s in trace %s", i+1, d.Parent.SpanID(), d.SpanContext.TraceID())
		}
		want := map[string]string{string(tracing.Delivery): "1", string(tracing.ConsumerOutcome): string(fulfillment.Fulfilled)}
		if i == 1 {
			want = map[string]string{string(tracing.Delivery): "2", string(tracing.ConsumerOutcome): string(fulfillment.Duplicate)}
		}
		for _, kv := range d.Attributes {
			if w, ok := want[string(kv.Key)]; ok {
				if kv.Value.String() != w {
					t.Errorf("delivery %d: %s = %s, want %s", i+1, kv.Key, kv.Value.String(), w)
				}
				delete(want, string(kv.Key))
			}
		}
		if len(want) > 0 {
			t.Errorf("delivery %d lacks %v", i+1, want)
		}
		dup := false
		for _, e := range d.Events {
			dup = dup || e.Name == tracing.EventDuplicate
		}
		if dup != (i == 1) {
			t.Errorf("delivery %d: duplicate event %t, want %t", i+1, dup, i == 1)
		}
	}
}
