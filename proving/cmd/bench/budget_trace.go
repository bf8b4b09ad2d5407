// The spans the latency budget is made of (budget.go): the API's, from
// an OTLP/HTTP receiver, and the bench's own floor's.

package main

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/oncepay/oncepay/internal/tracing"
)

// tspan is one ended span, from the API (over OTLP) or from the bench.
type tspan struct {
	trace        [16]byte
	id, parent   [8]byte
	name         string
	start, end   time.Time
	operation    string // oncepay.operation, on a server span
	outcome      string // oncepay.idempotency.outcome, on a server span
	batchSize    int    // db.operation.batch.size, on a batch span
	hasParent    bool
	fromReceiver bool
}

func (s tspan) dur() time.Duration { return s.end.Sub(s.start) }

// spanSink keeps every span it is given.
type spanSink struct {
	mu    sync.Mutex
	spans []tspan
}

func (k *spanSink) add(s ...tspan) {
	k.mu.Lock()
	k.spans = append(k.spans, s...)
	k.mu.Unlock()
}

func (k *spanSink) all() []tspan {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.spans)
}

// receiver is an OTLP/HTTP trace receiver (protobuf, as the API's
// exporter sends) that keeps the spans in a sink.
type receiver struct {
	sink spanSink
	srv  *http.Server
	addr string
}

func startReceiver(addr string) (*receiver, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--budget: the trace receiver: %w", err)
	}
	r := &receiver{addr: ln.Addr().String()}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *receiver) close() { _ = r.srv.Close() }

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.NotFound(w, req)
		return
	}
	var body io.Reader = http.MaxBytesReader(w, req.Body, 64<<20)
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer gz.Close()
		body = gz
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.sink.add(fromOTLP(&msg)...)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// fromOTLP converts the spans of an export request.
func fromOTLP(msg *coltracepb.ExportTraceServiceRequest) []tspan {
	var out []tspan
	for _, rs := range msg.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				t := tspan{
					name:         s.GetName(),
					start:        time.Unix(0, int64(s.GetStartTimeUnixNano())), // #nosec G115 -- a time in this century
					end:          time.Unix(0, int64(s.GetEndTimeUnixNano())),   // #nosec G115 -- a time in this century
					hasParent:    len(s.GetParentSpanId()) == 8,
					fromReceiver: true,
				}
				copy(t.trace[:], s.GetTraceId())
				copy(t.id[:], s.GetSpanId())
				copy(t.parent[:], s.GetParentSpanId())
				for _, a := range s.GetAttributes() {
					setAttr(&t, a.GetKey(), a.GetValue().GetStringValue(), a.GetValue().GetIntValue())
				}
				out = append(out, t)
			}
		}
	}
	return out
}

func setAttr(t *tspan, key, s string, n int64) {
	switch attribute.Key(key) {
	case tracing.Operation:
		t.operation = s
	case tracing.Outcome:
		t.outcome = s
	case semconv.DBOperationBatchSizeKey:
		t.batchSize = int(n)
	}
}

// floorTracer traces the bench's own floor: a span per create (wrap) and
// otelpgx's spans inside it, kept in sink.
type floorTracer struct {
	sink   spanSink
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	pgx    pgx.QueryTracer
}

func newFloorTracer() *floorTracer {
	f := &floorTracer{}
	f.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f))
	f.tracer = f.tp.Tracer("oncepay/bench")
	f.pgx = otelpgx.NewTracer(otelpgx.WithTracerProvider(f.tp))
	return f
}

// wrap runs do under a span of its own: the root of one floor create.
func (f *floorTracer) wrap(do op) op {
	return func(ctx context.Context) error {
		ctx, s := f.tracer.Start(ctx, "floor create")
		defer s.End()
		return do(ctx)
	}
}

// The sdktrace.SpanProcessor that keeps the ended spans.
func (f *floorTracer) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (f *floorTracer) Shutdown(context.Context) error                  { return nil }
func (f *floorTracer) ForceFlush(context.Context) error                { return nil }
func (f *floorTracer) OnEnd(s sdktrace.ReadOnlySpan) {
	t := tspan{
		name: s.Name(), start: s.StartTime(), end: s.EndTime(),
		trace: s.SpanContext().TraceID(), id: s.SpanContext().SpanID(),
		parent: s.Parent().SpanID(), hasParent: s.Parent().IsValid(),
	}
	for _, a := range s.Attributes() {
		setAttr(&t, string(a.Key), a.Value.AsString(), a.Value.AsInt64())
	}
	f.sink.add(t)
}
