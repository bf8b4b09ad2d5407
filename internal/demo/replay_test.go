package demo_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/demo"
	"github.com/oncepay/oncepay/internal/httpapi"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/testdb"
	"github.com/oncepay/oncepay/internal/testkit"
)

// The replay endpoint hands the event to the injected function only for the
// tenant's own events, and turns its failure into an error, not a 202.
func TestReplayEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.Pool(t)
	svc := tenants.NewService(pool, time.Now, tenants.WithCacheTTL(0))
	owner, ownerKey, err := svc.Create(ctx, "owner", "Owner")
	if err != nil {
		t.Fatal(err)
	}
	_, otherKey, err := svc.Create(ctx, "other", "Other")
	if err != nil {
		t.Fatal(err)
	}
	var eventID uuid.UUID
	err = postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
		eventID, err = outbox.Append(ctx, tx, outbox.Event{
			TenantID: owner.ID, Type: "order.created", AggregateType: "order", AggregateID: uuid.New(),
			IdempotencyKey: "k", OccurredAt: time.Now().UTC(), Payload: map[string]string{},
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu       sync.Mutex
		replayed []uuid.UUID
		fail     error
	)
	replay := func(_ context.Context, id uuid.UUID) error {
		mu.Lock()
		defer mu.Unlock()
		replayed = append(replayed, id)
		return fail
	}
	h := demo.NewHandler(pool, nil, nil, logger(), time.Now, demo.WithDemoMode(true), demo.WithReplay(replay))
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		var pe *problem.Error
		if !errors.As(err, &pe) {
			pe = &problem.Error{Code: problem.Internal}
		}
		_ = c.Blob(problem.Status(pe.Code), problem.ContentType, pe.JSON())
	}
	e.POST("/demo/events/:id/replay", h.ReplayEvent, tenants.Middleware(svc))
	post := func(id, key string) (int, string) {
		req := httptest.NewRequest("POST", "/demo/events/"+id+"/replay", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}

	if code, body := post(eventID.String(), ownerKey); code != http.StatusAccepted ||
		body != `{"event_id":"`+eventID.String()+`","status":"replay_requested"}` {
		t.Fatalf("replay = %d %s", code, body)
	}
	if code, _ := post(eventID.String(), otherKey); code != http.StatusNotFound {
		t.Fatalf("another tenant's replay = %d, want 404", code)
	}
	if code, _ := post(uuid.NewString(), ownerKey); code != http.StatusNotFound {
		t.Fatalf("unknown event = %d, want 404", code)
	}
	mu.Lock()
	fail = errors.New("broker down")
	mu.Unlock()
	if code, _ := post(eventID.String(), ownerKey); code != http.StatusInternalServerError {
		t.Fatalf("failed replay = %d, want 500", code)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(replayed) != 2 || replayed[0] != eventID || replayed[1] != eventID {
		t.Fatalf("replay func got %v, want the owner's event twice", replayed)
	}
}

// Replays are rate-limited per tenant: past its burst a tenant gets 429
// rate_limited with Retry-After, nothing is replayed, and another tenant is
// not affected; once the bucket refills on the handler's clock, the tenant
// replays again.
func TestReplayIsRateLimitedPerTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.Pool(t)
	svc := tenants.NewService(pool, time.Now, tenants.WithCacheTTL(0))
	owner, ownerKey, err := svc.Create(ctx, "owner", "Owner")
	if err != nil {
		t.Fatal(err)
	}
	other, otherKey, err := svc.Create(ctx, "other", "Other")
	if err != nil {
		t.Fatal(err)
	}
	events := map[uuid.UUID]uuid.UUID{}
	for _, tn := range []tenants.Tenant{owner, other} {
		err = postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
			events[tn.ID], err = outbox.Append(ctx, tx, outbox.Event{
				TenantID: tn.ID, Type: "order.created", AggregateType: "order", AggregateID: uuid.New(),
				IdempotencyKey: "k", OccurredAt: time.Now().UTC(), Payload: map[string]string{},
			})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var replays sync.Map // tenant's event id -> count
	replay := func(_ context.Context, id uuid.UUID) error {
		n, _ := replays.LoadOrStore(id, new(int))
		*n.(*int)++
		return nil
	}
	clock := testkit.StoppedClock(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	const every, burst = 10 * time.Second, 2
	h := demo.NewHandler(pool, nil, nil, logger(), clock.Now, demo.WithDemoMode(true), demo.WithReplay(replay), demo.WithReplayLimit(every, burst))
	e := echo.New()
	e.HTTPErrorHandler = httpapi.ErrorHandler(logger())
	e.POST("/demo/events/:id/replay", h.ReplayEvent, tenants.Middleware(svc))
	post := func(id uuid.UUID, key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/demo/events/"+id.String()+"/replay", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		return rec
	}

	for range burst {
		if rec := post(events[owner.ID], ownerKey); rec.Code != http.StatusAccepted {
			t.Fatalf("replay within the burst = %d %s", rec.Code, rec.Body)
		}
	}
	rec := post(events[owner.ID], ownerKey)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "10" ||
		rec.Header().Get("Content-Type") != problem.ContentType || !strings.Contains(rec.Body.String(), `"code":"rate_limited"`) {
		t.Fatalf("replay past the burst = %d %v %s; want 429 rate_limited, Retry-After 10", rec.Code, rec.Header(), rec.Body)
	}
	if rec := post(events[other.ID], otherKey); rec.Code != http.StatusAccepted {
		t.Fatalf("another tenant's replay = %d %s: one tenant's limit met another", rec.Code, rec.Body)
	}
	clock.Advance(every - time.Second)
	if rec := post(events[owner.ID], ownerKey); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("replay a second early = %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
	clock.Advance(time.Second)
	if rec := post(events[owner.ID], ownerKey); rec.Code != http.StatusAccepted {
		t.Fatalf("replay after the refill = %d %s", rec.Code, rec.Body)
	}
	if n, _ := replays.Load(events[owner.ID]); *n.(*int) != burst+1 {
		t.Fatalf("the owner's event was replayed %d times, want %d: a refused replay ran", *n.(*int), burst+1)
	}
}
