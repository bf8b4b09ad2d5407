package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/nats-io/nats.go"
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
