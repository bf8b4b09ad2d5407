package demo_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/demo"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/testdb"
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
	h := demo.NewHandler(pool, nil, nil, logger(), demo.WithDemoMode(true), demo.WithReplay(replay))
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
