package operation_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/oncepay/oncepay/internal/attention"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tracing"
)

// held reads what the record and the queue say about key: whether the
// record is held (pending, held_at set, no lease) and its attention items.
func (b *bundle) held(t *testing.T, key string) (bool, []attention.Item) {
	t.Helper()
	var held bool
	if err := b.pool.QueryRow(context.Background(), `
		SELECT state = 'pending' AND held_at IS NOT NULL AND locked_until IS NULL
		FROM api_idempotency WHERE idempotency_key = $1`, key).Scan(&held); err != nil {
		t.Fatalf("record of %s: %v", key, err)
	}
	items, err := attention.ForAttempt(context.Background(), b.pool, b.tenant, attention.Attempt{Operation: string(opTransfer), Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return held, items
}

// A step that finds what no retry can change (a NeedsOperatorError, in the
// outside call or in the transaction that records its answer) holds its
// attempt for an operator and raises its attention item: the answer is
// awaiting_operator, and neither the client's retry nor the Recoverer runs
// anything of it again, however often they come.
func TestStepThatNeedsAnOperatorHoldsTheAttempt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ form, in string }{{"tx", "call"}, {"tx", "tx"}, {"batch", "call"}, {"batch", "tx"}} {
		in := c.in
		t.Run(c.form+": in the "+in, func(t *testing.T) {
			t.Parallel()
			b := setupAs(t, c.form)
			ctx := context.Background()
			r := b.request(t, opTransfer, "k")
			cause := fmt.Errorf("the other side moved 2 where we asked for 1: %w",
				operation.NeedsOperator(attention.ReasonMismatch, errors.New("records disagree")))
			if in == "call" {
				b.callErr.Store(&cause)
			} else {
				b.txErr.Store(&cause)
			}
			_, err := b.phases.Run(ctx, r, transfer{})
			if problem.CodeOf(err) != problem.AwaitingOperator || problem.Status(problem.CodeOf(err)) != 409 {
				t.Fatalf("Run = %v, want 409 awaiting_operator", err)
			}
			held, items := b.held(t, "k")
			if !held || len(items) != 1 {
				t.Fatalf("held = %v, items = %+v; want the record held with one item", held, items)
			}
			it := items[0]
			if it.Reason != attention.ReasonMismatch || it.Status() != attention.StatusOpen || it.Detail != cause.Error() ||
				it.TenantID != b.tenant || it.Resource == nil || it.Resource.Type != "transfer" || it.RaisedAt.IsZero() {
				t.Fatalf("item = %+v, want an open mismatch about the transfer, with the cause as its detail", it)
			}
			calls := b.calls.Load()
			b.steps()

			for range 3 {
				if _, err := b.phases.Run(ctx, r, transfer{}); problem.CodeOf(err) != problem.AwaitingOperator {
					t.Fatalf("retry = %v, want awaiting_operator", err)
				}
			}
			b.clock.Advance(lease + time.Second)
			rc := operation.NewRecoverer(b.runner, b.phases)
			if n, err := rc.RecoverOnce(ctx, 10); err != nil || n != 0 {
				t.Fatalf("RecoverOnce = %d, %v; want nothing to recover", n, err)
			}
			if _, err := b.phases.Run(ctx, r, transfer{}); problem.CodeOf(err) != problem.AwaitingOperator {
				t.Fatalf("retry after the lease = %v, want awaiting_operator", err)
			}
			want(t, "retries and the recoverer", b.steps(), nil)
			if n := b.calls.Load(); n != calls {
				t.Fatalf("outside calls = %d after the hold, want %d: a held attempt runs nothing", n, calls)
			}
			if _, items := b.held(t, "k"); len(items) != 1 {
				t.Fatalf("items = %d, want still 1", len(items))
			}
		})
	}
}

// Any other error of a step is no reason to hold: the attempt stays
// pending, unheld, for its retry.
func TestOtherStepErrorsHoldNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := b.request(t, opTransfer, "k")
	cause := errors.New("a lost connection")
	b.txErr.Store(&cause)
	if _, err := b.phases.Run(ctx, r, transfer{}); !errors.Is(err, cause) {
		t.Fatalf("Run = %v, want the step's error", err)
	}
	if held, items := b.held(t, "k"); held || len(items) != 0 {
		t.Fatalf("held = %v, items = %d; want neither", held, len(items))
	}
	if resp, err := b.phases.Run(ctx, r, transfer{}); err != nil || resp.Status != 201 {
		t.Fatalf("retry = %+v, %v; want it finished", resp, err)
	}
}

// A recovery that holds its attempt for an operator is reported once, by
// the hold (its attention item and log line), not again as an attempt the
// recoverer could not finish: its span says awaiting_operator, with an
// error status.
func TestRecoveryThatHoldsIsNoFailedRecovery(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b := setup(t, operation.WithTracerProvider(tp))
	ctx := context.Background()
	r := b.request(t, opTransfer, "k")
	lost := errors.New("a lost answer")
	b.callErr.Store(&lost)
	if _, err := b.phases.Run(ctx, r, transfer{}); !errors.Is(err, lost) {
		t.Fatalf("Run = %v, want the call's error", err)
	}
	b.clock.Advance(lease + time.Second)
	needs := fmt.Errorf("the provider charged another amount: %w", operation.NeedsOperator(attention.ReasonMismatch, errors.New("records disagree")))
	b.callErr.Store(&needs)
	rc := operation.NewRecoverer(b.runner, b.phases)
	if n, err := rc.RecoverOnce(ctx, 10); err != nil || n != 0 {
		t.Fatalf("RecoverOnce = %d, %v; want the attempt held, none finished", n, err)
	}
	if held, items := b.held(t, "k"); !held || len(items) != 1 {
		t.Fatalf("held = %v, items = %d; want the record held with one item", held, len(items))
	}
	if logs := b.logs.String(); strings.Contains(logs, "recoverer could not finish an attempt") {
		t.Fatalf("the held attempt was logged as a failed recovery:\n%s", logs)
	}
	var recover []sdktrace.ReadOnlySpan
	for _, s := range exp.GetSpans().Snapshots() {
		if s.Name() == "recover "+string(opTransfer) {
			recover = append(recover, s)
		}
	}
	if len(recover) != 1 {
		t.Fatalf("recover spans = %d, want 1", len(recover))
	}
	s := recover[0]
	var outcome string
	for _, kv := range s.Attributes() {
		if kv.Key == tracing.Outcome {
			outcome = kv.Value.AsString()
		}
	}
	if outcome != string(idempotency.OutcomeAwaitingOperator) || s.Status().Code != codes.Error {
		t.Fatalf("recover span: outcome %q, status %v; want awaiting_operator, error", outcome, s.Status())
	}
}
