package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/tracing"
)

func TestStoredContextRoundTrips(t *testing.T) {
	t.Parallel()
	if got := tracing.Capture(context.Background()); got != nil {
		t.Fatalf("Capture without a span = %s, want nil (NULL)", got)
	}
	if _, ok := tracing.Link(nil); ok {
		t.Fatal("Link(nil) found a link")
	}
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	defer span.End()
	want := span.SpanContext()

	stored := tracing.Capture(ctx)
	var fields map[string]string
	if err := json.Unmarshal(stored, &fields); err != nil || fields["traceparent"] == "" {
		t.Fatalf("Capture = %s (%v), want a JSON object with traceparent", stored, err)
	}
	if got := trace.SpanContextFromContext(tracing.Restore(context.Background(), stored)); !got.Equal(want.WithRemote(true)) {
		t.Fatalf("Restore = %v, want %v", got, want)
	}
	if l, ok := tracing.Link(stored); !ok || l.SpanContext.SpanID() != want.SpanID() {
		t.Fatalf("Link = %v, %t", l, ok)
	}
	if got := tracing.Restore(ctx, []byte("not json")); !trace.SpanContextFromContext(got).Equal(want) {
		t.Fatal("an unreadable stored context changed ctx")
	}

	h := nats.Header{}
	tracing.InjectHeader(ctx, h)
	if h.Get("traceparent") == "" {
		t.Fatalf("headers = %v, want traceparent", h)
	}
	if got := trace.SpanContextFromContext(tracing.ExtractHeader(context.Background(), h)); got.TraceID() != want.TraceID() || got.SpanID() != want.SpanID() {
		t.Fatalf("ExtractHeader = %v, want %v", got, want)
	}
	empty := nats.Header{}
	tracing.InjectHeader(context.Background(), empty)
	if len(empty) != 0 {
		t.Fatalf("InjectHeader without a span wrote %v", empty)
	}
}

// A line logged inside a span carries its trace and span ids; one logged
// outside carries neither.
func TestLogHandlerAddsTheSpan(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logger := slog.New(tracing.LogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "test")
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	defer span.End()

	logger.InfoContext(ctx, "inside")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	if line["trace_id"] != span.SpanContext().TraceID().String() || line["span_id"] != span.SpanContext().SpanID().String() || line["component"] != "test" {
		t.Fatalf("line = %v", line)
	}
	buf.Reset()
	logger.Info("outside")
	if bytes.Contains(buf.Bytes(), []byte("trace_id")) {
		t.Fatalf("line outside a span = %s", buf.Bytes())
	}
}

// NewProvider exports with OTLP over HTTP to the endpoint it is given, and
// Shutdown sends what is still buffered.
func TestNewProviderExportsOTLP(t *testing.T) {
	t.Parallel()
	got := make(chan *http.Request, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got <- r
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	ctx := context.Background()
	tp, err := tracing.NewProvider(ctx, srv.URL+"/v1/traces")
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("test").Start(ctx, "request")
	span.End()
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	select {
	case r := <-got:
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Fatalf("export = %s %s %s", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		}
	default:
		t.Fatal("nothing was exported")
	}
}

// oversizedTraceState is the largest tracestate OpenTelemetry's parser
// takes: 32 members, each a 241-character key and a 256-character value,
// about 16 KB.
func oversizedTraceState() string {
	members := make([]string, tracing.MaxTraceStateMembers)
	for i := range members {
		members[i] = fmt.Sprintf("k%02d%s=%s", i, strings.Repeat("k", 238), strings.Repeat("v", 256))
	}
	return strings.Join(members, ",")
}

// A tracestate a client sends is bounded before the service stores it with
// a record: extracted, and captured from a span that continues it, it is
// at most MaxTraceStateBytes. One within the bound is kept as it is.
func TestTraceStateIsBoundedBeforeItIsStored(t *testing.T) {
	t.Parallel()
	const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	tp := sdktrace.NewTracerProvider()
	for _, tc := range []struct {
		name, tracestate, want string
	}{
		{"32 members of 16 KB: the first is all that fits", oversizedTraceState(), strings.Split(oversizedTraceState(), ",")[0]},
		{"within the bound", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"},
	} {
		h := http.Header{}
		h.Set("traceparent", traceparent)
		h.Set("tracestate", tc.tracestate)
		ctx := tracing.Propagator().Extract(context.Background(), propagation.HeaderCarrier(h))
		sc := trace.SpanContextFromContext(ctx)
		if !sc.IsValid() || sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
			t.Fatalf("%s: extracted %v", tc.name, sc)
		}
		if got := sc.TraceState().String(); got != tc.want {
			t.Errorf("%s: extracted tracestate %q (%d bytes), want %q", tc.name, got, len(got), tc.want)
		}
		ctx, span := tp.Tracer("test").Start(ctx, "request")
		var stored map[string]string
		if err := json.Unmarshal(tracing.Capture(ctx), &stored); err != nil {
			t.Fatal(err)
		}
		span.End()
		if got := stored["tracestate"]; got != tc.want {
			t.Errorf("%s: stored tracestate %q (%d bytes), want %q", tc.name, got, len(got), tc.want)
		}
	}
}

// A tracestate over 512 characters is cut as the W3C says: members longer
// than 128 characters go first, the last of them first, then members from
// the end, each only while it does not fit yet; what is left keeps its
// order.
func TestBoundTraceState(t *testing.T) {
	t.Parallel()
	long := func(k string) string { return k + "=" + strings.Repeat("x", 150) }
	short := func(k string) string { return k + "=" + strings.Repeat("y", 60) }
	for _, tc := range []struct {
		name string
		in   []string
		want []string
	}{
		{"within the bound", []string{short("a"), long("b"), short("c")}, []string{short("a"), long("b"), short("c")}},
		{"long ones go first, the last first", []string{long("a"), short("b"), long("c"), short("d"), long("e"), short("f")},
			[]string{long("a"), short("b"), long("c"), short("d"), short("f")}},
		{"then from the end", []string{short("a"), short("b"), short("c"), short("d"), short("e"), short("f"), short("g"), short("h"), short("i"), long("j")},
			[]string{short("a"), short("b"), short("c"), short("d"), short("e"), short("f"), short("g"), short("h")}},
	} {
		ts, err := trace.ParseTraceState(strings.Join(tc.in, ","))
		if err != nil {
			t.Fatal(err)
		}
		got := tracing.BoundTraceState(ts).String()
		if want := strings.Join(tc.want, ","); got != want {
			t.Errorf("%s: %q, want %q", tc.name, got, want)
		}
		if len(got) > tracing.MaxTraceStateBytes {
			t.Errorf("%s: %d bytes", tc.name, len(got))
		}
	}
}
