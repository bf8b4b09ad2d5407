package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/testkit"
	"github.com/oncepay/oncepay/internal/tracing"
)

// The budget is cut from spans as the API exports them: its OTLP exporter
// to the bench's receiver, otelpgx's spans of a real pool inside a server
// span with the attributes the API sets, and a publish under the same
// trace after the request ended.
func TestTheBudgetCutsTheAPIsExportedSpans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, _ := benchDatabase(t)
	recv, err := startReceiver("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(recv.close)
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL("http://"+recv.addr+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	pool, err := postgres.Open(ctx, url, postgres.PoolConfig{MaxConns: 2, Tracer: otelpgx.NewTracer(otelpgx.WithTracerProvider(tp))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	tr := tp.Tracer("test")

	// request runs one traced request: a query, then a batch of three,
	// each on a connection of its own; pause is spent in the handler
	// between them.
	request := func(operation, outcome string, pause time.Duration, batch bool) {
		ctx, root := tr.Start(ctx, "POST /v1/orders", trace.WithAttributes(tracing.Operation.String(operation), tracing.Outcome.String(outcome)))
		if _, err := pool.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(pause) // the handler's own work between its round trips, as a known span of time
		if batch {
			b := &pgx.Batch{}
			b.Queue("BEGIN")
			b.Queue("SELECT 2")
			b.Queue("COMMIT")
			if err := pool.SendBatch(ctx, b).Close(); err != nil {
				t.Fatal(err)
			}
		}
		root.End()
		// The dispatcher's publish of the request's event, later, in its trace.
		_, pub := tr.Start(ctx, "publish oncepay.order.created")
		pub.End()
	}
	create, executed := string(orders.OpCreate), string(idempotency.OutcomeExecuted)
	for range 5 {
		request(create, executed, 3*time.Millisecond, true)
	}
	request(create, executed, 0, false)                           // another shape: left out
	request(create, string(idempotency.OutcomeReplayed), 0, true) // a replay: not a create
	request("payments.create", executed, 0, true)                 // not a create
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	var b budget
	testkit.WaitFor(t, 10*time.Second, "the exported spans", func() bool {
		b = breakdown(recv.sink.all(), isCreateRoot)
		return b.requests == 5
	})
	if want := "pool.acquire, round trip 1 (SELECT), pool.acquire, round trip 2 (batch of 3)"; b.shape != want {
		t.Fatalf("shape %q, want %q", b.shape, want)
	}
	if b.others != 1 {
		t.Errorf("%d creates of another shape, want 1", b.others)
	}
	var sum time.Duration
	var names []string
	for _, p := range b.parts {
		if len(p.d) != 5 {
			t.Fatalf("part %q has %d durations, want 5", p.name, len(p.d))
		}
		sum += mean(p.d)
		names = append(names, p.name)
	}
	// The parts tile the root span: their means add up to its (but for
	// the rounding of five means).
	if d := mean(b.total) - sum; d < 0 || d > 5 {
		t.Errorf("the parts' means add up to %v, the root span's is %v", sum, mean(b.total))
	}
	want := []string{"before pool.acquire", "pool.acquire", "before round trip 1 (SELECT)", "round trip 1 (SELECT)",
		"before pool.acquire", "pool.acquire", "before round trip 2 (batch of 3)", "round trip 2 (batch of 3)", "after the last part"}
	if !slices.Equal(names, want) {
		t.Fatalf("parts %q, want %q", names, want)
	}
	// The pause shows in the part it fell in: before the second acquire.
	if d := mean(b.parts[4].d); d < 3*time.Millisecond {
		t.Errorf("before the second acquire: %v, want the 3 ms pause", d)
	}
	m := overlapping(recv.sink.all(), b, isCreateRoot)
	if m.publishes != 5 {
		t.Errorf("%d publishes of the creates' events, want 5", m.publishes)
	}
	if m.overlapped != 0 {
		t.Errorf("%d creates overlapped by a publish, want none (each publish came after its create)", m.overlapped)
	}
	if !strings.HasPrefix(b.parts[len(b.parts)-1].name, "after") {
		t.Errorf("the last part is %q, want the time after the last round trip", b.parts[len(b.parts)-1].name)
	}
}

// --budget runs the floor, the bare exchange and the create at 1 client,
// and alone.
func TestTheBudgetRunsItsScenariosAtOneClient(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1:1/x"}
	for _, tc := range []struct {
		args    []string
		env     map[string]string
		wantErr string
	}{
		{[]string{"--budget", "127.0.0.1:0", "--scenarios", "create"}, nil, "DATABASE_URL"},
		{[]string{"--budget", "127.0.0.1:0", "--overload", "5"}, env, "does not combine"},
		{[]string{"--budget", "127.0.0.1:0", "--compare", "http://127.0.0.1:2"}, env, "does not combine"},
		{[]string{"--budget", "127.0.0.1:0", "--scenarios", "replay", "--clients", "1,16"}, env, ""},
	} {
		var out strings.Builder
		c, err := parseFlags(tc.args, func(k string) string { return tc.env[k] }, &out)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%v: error %v, want one about %s", tc.args, err, tc.wantErr)
		case tc.wantErr == "" && (!slices.Equal(c.scenarios, []string{scenarioSQL, scenarioHTTP, scenarioCreate}) || !slices.Equal(c.clients, []int{1})):
			t.Errorf("%v: scenarios %v at %v clients, want sql, http and create at 1", tc.args, c.scenarios, c.clients)
		}
	}
}

// A run judges the create's tail at 1 client against twice its median,
// and names the floor's own tail of the same run beside it.
func TestTheCreatesTailIsJudgedBesideTheFloors(t *testing.T) {
	t.Parallel()
	ms := func(ns ...int) []time.Duration {
		var out []time.Duration
		for _, n := range ns {
			out = append(out, time.Duration(n)*time.Millisecond)
		}
		return out
	}
	for _, tc := range []struct {
		create  []time.Duration
		verdict string
	}{
		{ms(1, 2, 2, 2, 3), "PASS"}, // p99 3 ms, p50 2 ms
		{ms(1, 2, 2, 2, 5), "MISS"}, // p99 5 ms: 2.5x
	} {
		results := []result{
			{scenario: scenarioSQL, clients: 1, requests: 5, elapsed: time.Second, latencies: ms(1, 1, 1, 1, 6)},
			{scenario: scenarioCreate, clients: 1, requests: 5, elapsed: time.Second, latencies: tc.create},
		}
		i := slices.IndexFunc(targets(results, []int{1}, rss{}), func(tg target) bool { return tg.name == "create p99 / create p50 @1" })
		if i < 0 {
			t.Fatal("no create p99 / create p50 target")
		}
		tg := targets(results, []int{1}, rss{})[i]
		if tg.verdict() != tc.verdict || !strings.Contains(tg.detail, "the sql floor's own: 6.00x") {
			t.Errorf("create %v: %s (%s), want %s and the floor's 6.00x", tc.create, tg.verdict(), tg.detail, tc.verdict)
		}
	}
}
