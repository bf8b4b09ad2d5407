package operation_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/testkit"
)

// The test's own operations: a two-phase one with an outside call between
// its phases, and a local one. The driver knows no feature; these are all
// it needs.
const (
	opTransfer idempotency.Operation = "test.transfer"
	opLocal    idempotency.Operation = "test.local"

	pointReserved idempotency.RecoveryPoint = "reserved"
)

const lease = 30 * time.Second

// transfer is the state of one run of test.transfer.
type transfer struct {
	answer string // what the outside call said, for the step that records it
}

// bundle is a runner on a database of the test's own, with the test's
// operations, and what they did: which steps committed, how often the
// outside world was called.
type bundle struct {
	pool   *pgxpool.Pool
	clock  *testkit.Clock
	tenant uuid.UUID
	runner *operation.Runner
	phases *operation.Phases[transfer]

	calls atomic.Int32
	// callErr, when set, is what the next outside call returns (once).
	callErr atomic.Pointer[error]
	// txErr, when set, is what the next step recording a call's answer
	// returns (once), rolling its transaction back.
	txErr atomic.Pointer[error]
	// callPanics makes the next outside call panic (once).
	callPanics atomic.Bool
	// inCall, when set, is called inside the outside call.
	inCall atomic.Pointer[func()]
	// crashBefore and crashAfter make the next call "crash" the process
	// right before or after it (once).
	crashBefore, crashAfter atomic.Bool

	mu        sync.Mutex
	committed []idempotency.RecoveryPoint

	// logs has every line the runner logged, as JSON.
	logs *logBuffer
}

// logBuffer collects log lines; the runner logs from several goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// setup is setupAs with test.transfer's transactions statement by
// statement.
func setup(t *testing.T, opts ...operation.Option) *bundle {
	t.Helper()
	return setupAs(t, "tx", opts...)
}

// setupAs is a bundle whose test.transfer has its transactions in form.
func setupAs(t *testing.T, form string, opts ...operation.Option) *bundle {
	t.Helper()
	b := &bundle{pool: testkit.Pool(t), clock: testkit.NewClock(), logs: &logBuffer{}}
	b.tenant = testkit.NewTenant(t, b.pool).ID
	store := idempotency.NewStore(idempotency.Policy{opTransfer: time.Hour, opLocal: time.Hour}, b.clock.Now, idempotency.WithLease(lease))
	logger := slog.New(slog.NewMultiHandler(slog.NewJSONHandler(b.logs, nil), testkit.Logger(t).Handler()))
	b.runner = operation.NewRunner(b.pool, store, logger, append([]operation.Option{operation.WithHooks(operation.Hooks{
		BeforeCall: func(idempotency.Operation, idempotency.RecoveryPoint) error {
			if b.crashBefore.CompareAndSwap(true, false) {
				return errors.New("injected crash before the call")
			}
			return nil
		},
		AfterCall: func(idempotency.Operation, idempotency.RecoveryPoint) error {
			if b.crashAfter.CompareAndSwap(true, false) {
				return errors.New("injected crash after the call")
			}
			return nil
		},
		BeforeCommit: func(_ idempotency.Operation, point idempotency.RecoveryPoint) error {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.committed = append(b.committed, point)
			return nil
		},
	})}, opts...)...)
	b.phases = operation.NewPhases(b.runner, opTransfer, b.transferSteps(form))
	return b
}

// forms are the two forms of a step's transaction (operation.Step): the
// loop's tests run the test's operation written in each.
var forms = []string{"tx", "batch"}

// transferSteps is test.transfer's step table, its transactions written
// in form: a first step that records the attempt, and an outside call with
// the step that records its answer.
func (b *bundle) transferSteps(form string) operation.Steps[transfer] {
	call := func(ctx context.Context, a *operation.Attempt[transfer]) error {
		n := b.calls.Add(1)
		if f := b.inCall.Swap(nil); f != nil {
			(*f)()
		}
		if b.callPanics.CompareAndSwap(true, false) {
			panic("injected panic in the call")
		}
		if err := b.callErr.Swap(nil); err != nil {
			return *err
		}
		a.Data.answer = fmt.Sprintf("call %d", n)
		return nil
	}
	record := func(ctx context.Context, tx idempotency.DB, a *operation.Attempt[transfer]) (operation.Outcome, error) {
		return a.Next(ctx, tx, pointReserved, &idempotency.Resource{Type: "transfer", ID: uuid.New()})
	}
	answer := func(ctx context.Context, tx idempotency.DB, a *operation.Attempt[transfer]) (operation.Outcome, error) {
		if err := b.txErr.Swap(nil); err != nil {
			return operation.Outcome{}, *err
		}
		return a.Finish(ctx, tx, idempotency.Response{Status: http.StatusCreated, ContentType: "text/plain", Body: []byte(a.Data.answer)}, a.Claim.Resource)
	}
	if form == "tx" {
		return operation.Steps[transfer]{
			idempotency.PointStarted: {Tx: func(ctx context.Context, tx pgx.Tx, a *operation.Attempt[transfer]) (operation.Outcome, error) {
				return record(ctx, tx, a)
			}},
			pointReserved: {Call: call, Tx: func(ctx context.Context, tx pgx.Tx, a *operation.Attempt[transfer]) (operation.Outcome, error) {
				return answer(ctx, tx, a)
			}},
		}
	}
	// In batches: each step sends its (empty) reads with the record's lock,
	// then queues its update, which the loop sends with COMMIT.
	return operation.Steps[transfer]{
		idempotency.PointStarted: {Batch: func(ctx context.Context, bt *operation.Batch, a *operation.Attempt[transfer]) (operation.Outcome, error) {
			if err := bt.Send(ctx); err != nil {
				return operation.Outcome{}, err
			}
			return record(ctx, bt, a)
		}},
		pointReserved: {Call: call, Batch: func(ctx context.Context, bt *operation.Batch, a *operation.Attempt[transfer]) (operation.Outcome, error) {
			if err := bt.Send(ctx); err != nil {
				return operation.Outcome{}, err
			}
			return answer(ctx, bt, a)
		}},
	}
}

func (b *bundle) request(t *testing.T, op idempotency.Operation, key string) idempotency.Request {
	t.Helper()
	fp, err := idempotency.NewFingerprint(op, nil, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	return idempotency.Request{TenantID: b.tenant, Operation: op, Key: idempotency.Key(key), Fingerprint: fp, RequestID: "req-" + key}
}

// steps returns the recovery points whose steps committed since the last
// call.
func (b *bundle) steps() []idempotency.RecoveryPoint {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.committed
	b.committed = nil
	return out
}

func (b *bundle) record(t *testing.T, key string) (state string, point string) {
	t.Helper()
	err := b.pool.QueryRow(context.Background(), `SELECT state, recovery_point FROM api_idempotency WHERE idempotency_key = $1`, key).Scan(&state, &point)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return state, point
}

func want(t *testing.T, what string, got, want []idempotency.RecoveryPoint) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: steps committed %v, want %v", what, got, want)
	}
}

// A new key runs every step once, in order; its retry replays the stored
// answer and runs none.
func TestPhasesRunEachStepOnceAndReplay(t *testing.T) {
	t.Parallel()
	for _, form := range forms {
		t.Run(form, func(t *testing.T) {
			t.Parallel()
			b := setupAs(t, form)
			ctx := context.Background()
			r := b.request(t, opTransfer, "k")
			resp, err := b.phases.Run(ctx, r, transfer{})
			if err != nil || resp.Status != http.StatusCreated || string(resp.Body) != "call 1" || resp.Replayed {
				t.Fatalf("Run = %+v, %v", resp, err)
			}
			want(t, "fresh key", b.steps(), []idempotency.RecoveryPoint{idempotency.PointStarted, pointReserved})
			again, err := b.phases.Run(ctx, r, transfer{})
			if err != nil || !again.Replayed || string(again.Body) != "call 1" {
				t.Fatalf("retry = %+v, %v; want the stored answer", again, err)
			}
			want(t, "replay", b.steps(), nil)
			if n := b.calls.Load(); n != 1 {
				t.Fatalf("outside calls = %d, want 1", n)
			}
		})
	}
}

// A crash between two steps leaves the record at the last point that
// committed, leased; the client's retry waits out the lease, then resumes
// exactly there, and so does the Recoverer: neither runs a step before it.
func TestPhasesResumeFromTheStoredPoint(t *testing.T) {
	t.Parallel()
	for _, form := range forms {
		for _, tc := range []struct {
			name      string
			crash     func(b *bundle)
			callsTill int32 // outside calls once the attempt is finished
		}{
			{"crash before the call", func(b *bundle) { b.crashBefore.Store(true) }, 1},
			// The call ran and is run again: a real outside party answers the
			// repeat from its own idempotency key (payments' provider key).
			{"crash after the call", func(b *bundle) { b.crashAfter.Store(true) }, 2},
		} {
			for _, by := range []string{"retry", "recoverer"} {
				t.Run(form+": "+tc.name+", resumed by the "+by, func(t *testing.T) {
					t.Parallel()
					b := setupAs(t, form)
					ctx := context.Background()
					r := b.request(t, opTransfer, "k")
					tc.crash(b)
					if _, err := b.phases.Run(ctx, r, transfer{}); err == nil {
						t.Fatal("the crashed run answered")
					}
					want(t, "crashed run", b.steps(), []idempotency.RecoveryPoint{idempotency.PointStarted})
					if state, point := b.record(t, "k"); state != "pending" || point != string(pointReserved) {
						t.Fatalf("record = %s at %s, want pending at %s", state, point, pointReserved)
					}
					if _, err := b.phases.Run(ctx, r, transfer{}); problem.CodeOf(err) != problem.RequestInProgress {
						t.Fatalf("retry within the lease = %v, want request_in_progress (a crash keeps its lease)", err)
					}
					b.clock.Advance(lease + time.Second)

					var resp idempotency.Response
					switch by {
					case "retry":
						var err error
						if resp, err = b.phases.Run(ctx, r, transfer{}); err != nil {
							t.Fatalf("retry after the lease: %v", err)
						}
					case "recoverer":
						rc := operation.NewRecoverer(b.runner, b.phases)
						if n, err := rc.RecoverOnce(ctx, 10); err != nil || n != 1 {
							t.Fatalf("RecoverOnce = %d, %v; want 1", n, err)
						}
						stored, err := b.phases.Run(ctx, r, transfer{})
						if err != nil || !stored.Replayed {
							t.Fatalf("the client's retry after recovery = %+v, %v; want the stored answer", stored, err)
						}
						resp = stored
					}
					want(t, "resumed", b.steps(), []idempotency.RecoveryPoint{pointReserved})
					if resp.Status != http.StatusCreated || b.calls.Load() != tc.callsTill {
						t.Fatalf("answer %d %q after %d calls, want 201 after %d", resp.Status, resp.Body, b.calls.Load(), tc.callsTill)
					}
					if state, point := b.record(t, "k"); state != "completed" || point != string(idempotency.PointFinished) {
						t.Fatalf("record = %s at %s, want completed at finished", state, point)
					}
				})
			}
		}
	}
}

// An attempt that stops without an outcome while its process lives on (an
// error, a panic) gives its lease back before it answers: the immediate
// retry resumes it, it does not meet request_in_progress.
func TestPhasesReleaseTheLeaseWhenTheyStop(t *testing.T) {
	t.Parallel()
	for _, form := range forms {
		for _, tc := range []struct {
			name string
			fail func(b *bundle)
		}{
			{"unknown outcome", func(b *bundle) {
				err := error(&problem.Error{Code: problem.PaymentProviderUnavailable, Detail: "unknown"})
				b.callErr.Store(&err)
			}},
			{"panic", func(b *bundle) { b.callPanics.Store(true) }},
		} {
			t.Run(form+": "+tc.name, func(t *testing.T) {
				t.Parallel()
				b := setupAs(t, form)
				ctx := context.Background()
				r := b.request(t, opTransfer, "k")
				tc.fail(b)
				func() {
					defer func() { _ = recover() }() // the panic goes on to the caller, after the release
					if _, err := b.phases.Run(ctx, r, transfer{}); err == nil {
						t.Fatal("the failed run answered")
					}
				}()
				b.steps()
				resp, err := b.phases.Run(ctx, r, transfer{})
				if err != nil || resp.Status != http.StatusCreated {
					t.Fatalf("immediate retry = %+v, %v; want it resumed at once", resp, err)
				}
				want(t, "retry", b.steps(), []idempotency.RecoveryPoint{pointReserved})
			})
		}
	}
}

// When somebody else finished the attempt while this run was at the outside
// world (its lease ran out and a retry took it over), this run answers what
// was stored and records nothing.
func TestPhasesAnswerWhatAnotherOwnerStored(t *testing.T) {
	t.Parallel()
	for _, form := range forms {
		t.Run(form, func(t *testing.T) {
			t.Parallel()
			b := setupAs(t, form)
			ctx := context.Background()
			r := b.request(t, opTransfer, "k")
			var other idempotency.Response
			takeOver := func() {
				b.clock.Advance(lease + time.Second)
				var err error
				if other, err = b.phases.Run(ctx, r, transfer{}); err != nil {
					t.Errorf("the other owner: %v", err)
				}
			}
			b.inCall.Store(&takeOver)
			resp, err := b.phases.Run(ctx, r, transfer{})
			if err != nil || !resp.Replayed || string(resp.Body) != string(other.Body) || string(other.Body) != "call 2" {
				t.Fatalf("slow owner = %+v, %v; other owner = %q; want the other owner's stored answer", resp, err, other.Body)
			}
			want(t, "both", b.steps(), []idempotency.RecoveryPoint{idempotency.PointStarted, pointReserved})
		})
	}
}

// A step table the loop cannot run is refused when the operation is built.
func TestNewPhasesRefusesBadTables(t *testing.T) {
	t.Parallel()
	tx := func(context.Context, pgx.Tx, *operation.Attempt[transfer]) (operation.Outcome, error) {
		return operation.Outcome{}, nil
	}
	call := func(context.Context, *operation.Attempt[transfer]) error { return nil }
	for name, steps := range map[string]operation.Steps[transfer]{
		"no first step":          {pointReserved: {Tx: tx}},
		"a call in the first":    {idempotency.PointStarted: {Call: call, Tx: tx}},
		"a step without its Tx":  {idempotency.PointStarted: {Tx: tx}, pointReserved: {Call: call}},
		"a first step without a": {idempotency.PointStarted: {}},
		"a step with two bodies": {idempotency.PointStarted: {Tx: tx, Batch: func(context.Context, *operation.Batch, *operation.Attempt[transfer]) (operation.Outcome, error) {
			return operation.Outcome{}, nil
		}}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: NewPhases accepted the table", name)
				}
			}()
			operation.NewPhases(nil, opTransfer, steps)
		}()
	}
}

// oneStep is a one-step operation, whose transaction is body: the shape
// of a local mutation (orders.create).
func (b *bundle) oneStep(body func(ctx context.Context, tx pgx.Tx, a *operation.Attempt[string]) (operation.Outcome, error)) *operation.Phases[string] {
	return operation.NewPhases(b.runner, opLocal, operation.Steps[string]{idempotency.PointStarted: {Tx: body}})
}

// A one-step operation commits in one transaction: its claim and its
// change together, or neither. A step that fails leaves the key free, and
// one that moves to a point the operation has no step for is a programming
// error that stores nothing.
func TestOneStepCommitsOnceOrNotAtAll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var runs atomic.Int32
	fail := errors.New("invalid input")
	local := b.oneStep(func(ctx context.Context, tx pgx.Tx, a *operation.Attempt[string]) (operation.Outcome, error) {
		runs.Add(1)
		switch a.Data {
		case "fail":
			return operation.Outcome{}, fail
		case "next":
			return a.Next(ctx, tx, pointReserved, nil)
		case "refuse":
			return a.Refuse(ctx, tx, problem.New(problem.OrderAlreadyPaid, "no"), nil)
		}
		return a.Finish(ctx, tx, idempotency.Response{Status: http.StatusCreated, ContentType: "text/plain", Body: []byte(a.Data)}, nil)
	})
	if _, err := local.Run(ctx, b.request(t, opLocal, "failed"), "fail"); !errors.Is(err, fail) {
		t.Fatalf("failing step = %v", err)
	}
	if state, _ := b.record(t, "failed"); state != "" {
		t.Fatalf("a failed step left a %s record; the key must stay free", state)
	}
	if _, err := local.Run(ctx, b.request(t, opLocal, "next"), "next"); err == nil || !strings.Contains(err.Error(), "no step") {
		t.Fatalf("a step that moved where there is no step = %v, want it refused", err)
	}
	if state, _ := b.record(t, "next"); state != "" {
		t.Fatalf("a step that moved where there is no step left a %s record", state)
	}
	r := b.request(t, opLocal, "ok")
	first, err := local.Run(ctx, r, "ok")
	if err != nil || first.Status != http.StatusCreated || first.Replayed {
		t.Fatalf("Run = %+v, %v", first, err)
	}
	again, err := local.Run(ctx, r, "ok")
	if err != nil || !again.Replayed || string(again.Body) != "ok" {
		t.Fatalf("retry = %+v, %v; want the stored answer", again, err)
	}
	refused, err := local.Run(ctx, b.request(t, opLocal, "refused"), "refuse")
	if err != nil || refused.Status != http.StatusConflict || refused.ContentType != problem.ContentType {
		t.Fatalf("refusal = %+v, %v; want a stored 409 problem", refused, err)
	}
	if state, _ := b.record(t, "refused"); state != "failed" {
		t.Fatalf("a refusal is stored as %q, want failed", state)
	}
	if n := runs.Load(); n != 4 {
		t.Fatalf("the step ran %d times, want 4 (never for a replay)", n)
	}
}

// RunWith asks for a request's input (its body, decoded and validated) only
// when the request is not a replay: a replay is answered from its record
// without it. A request that is not a replay gets its input's error as the
// answer, before its key is claimed, and before idempotency_key_reused for
// a key another request used (as when bodies were decoded first).
func TestInputIsDecodedOnlyWhenTheRequestIsNoReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	local := b.oneStep(func(ctx context.Context, tx pgx.Tx, a *operation.Attempt[string]) (operation.Outcome, error) {
		return a.Finish(ctx, tx, idempotency.Response{Status: http.StatusCreated, ContentType: "text/plain", Body: []byte(a.Data)}, nil)
	})
	var decoded atomic.Int32
	input := func(in string, err error) operation.Input[string] {
		return func() (string, error) { decoded.Add(1); return in, err }
	}
	invalid := problem.New(problem.ValidationFailed, "invalid")
	r := b.request(t, opLocal, "local-invalid")
	if _, err := local.RunWith(ctx, r, input("", invalid)); !errors.Is(err, invalid) {
		t.Fatalf("local: invalid input = %v, want its error", err)
	}
	if state, _ := b.record(t, "local-invalid"); state != "" {
		t.Fatalf("local: an invalid input left a %s record; the key must stay free", state)
	}
	r = b.request(t, opLocal, "local-ok")
	if resp, err := local.RunWith(ctx, r, input("ok", nil)); err != nil || resp.Status != http.StatusCreated {
		t.Fatalf("local: RunWith = %+v, %v", resp, err)
	}
	decoded.Store(0)
	again, err := local.RunWith(ctx, r, input("", errors.New("a replay decoded its body")))
	if err != nil || !again.Replayed || string(again.Body) != "ok" || decoded.Load() != 0 {
		t.Fatalf("local: replay = %+v, %v, input asked %d times; want the stored answer without it", again, err, decoded.Load())
	}
	// The same key with another body: an invalid body is refused as
	// invalid, a valid one as the key's reuse.
	other := r
	other.Fingerprint[0] ^= 0xff
	if _, err := local.RunWith(ctx, other, input("", invalid)); !errors.Is(err, invalid) {
		t.Fatalf("local: a reused key with an invalid body = %v, want the body's error first", err)
	}
	if _, err := local.RunWith(ctx, other, input("other", nil)); problem.CodeOf(err) != problem.IdempotencyKeyReused {
		t.Fatalf("local: a reused key with a valid body = %v, want idempotency_key_reused", err)
	}
	tr := b.request(t, opTransfer, "transfer-ok")
	if _, err := b.phases.RunWith(ctx, tr, operation.Given(transfer{})); err != nil {
		t.Fatal(err)
	}
	decoded.Store(0)
	replayed, err := b.phases.RunWith(ctx, tr, func() (transfer, error) { decoded.Add(1); return transfer{}, errors.New("a replay decoded its body") })
	if err != nil || !replayed.Replayed || decoded.Load() != 0 {
		t.Fatalf("phases replay = %+v, %v, input asked %d times; want the stored answer without it", replayed, err, decoded.Load())
	}
	if _, err := b.phases.RunWith(ctx, b.request(t, opTransfer, "transfer-invalid"), func() (transfer, error) { return transfer{}, invalid }); !errors.Is(err, invalid) {
		t.Fatalf("phases: invalid input = %v, want its error", err)
	}
	if state, _ := b.record(t, "transfer-invalid"); state != "" {
		t.Fatalf("phases: an invalid input left a %s record", state)
	}
}
