package outbox_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/testkit"
)

type listedEvent struct {
	ID            string     `json:"id"`
	Type          string     `json:"type"`
	AggregateID   string     `json:"aggregate_id"`
	OccurredAt    time.Time  `json:"occurred_at"`
	PublishedAt   *time.Time `json:"published_at"`
	Status        string     `json:"status"`
	Stuck         bool       `json:"stuck"`
	Attempts      int        `json:"attempts"`
	LastError     *string    `json:"last_error"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	ProcessedBy   []struct {
		Subscriber  string    `json:"subscriber"`
		ProcessedAt time.Time `json:"processed_at"`
	} `json:"processed_by"`
}

type listedPage struct {
	Data       []listedEvent `json:"data"`
	NextCursor *string       `json:"next_cursor"`
}

func TestEventsListShowsDeliveryState(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	svc := tenants.NewService(b.pool, b.clock.Now, tenants.WithCacheTTL(0))
	key, otherKey := b.tenant.APIKey, testkit.NewTenant(t, b.pool).APIKey
	processed := b.appendEvent(t, "payment.succeeded")
	stuck := b.appendEvent(t, "order.created")
	pending := b.appendEvent(t, "order.created")
	_, err := b.pool.Exec(ctx, `UPDATE outbox_events SET published_at = now(), attempts = 1 WHERE id = $1`, processed)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.pool.Exec(ctx, `UPDATE outbox_events SET stuck_at = now(), attempts = 10, last_error = 'no PubAck', next_attempt_at = now() WHERE id = $1`, stuck)
	if err != nil {
		t.Fatal(err)
	}
	err = postgres.InTx(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := inbox.Claim(ctx, tx, b.tenant.ID, "fulfillment", processed.String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	e := echo.New()
	e.GET("/v1/events", outbox.NewHandler(b.pool).List, tenants.Middleware(svc))
	get := func(apiKey, query string) listedPage {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, "/v1/events"+query, nil)
		req.Header.Set("Authorization", "Bearer "+apiKey)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("GET /v1/events%s = %d %s", query, rec.Code, rec.Body)
		}
		var p listedPage
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
			t.Fatalf("decode %s: %v", rec.Body, err)
		}
		return p
	}

	page := get(key, "?limit=2")
	if len(page.Data) != 2 || page.NextCursor == nil {
		t.Fatalf("first page = %+v, want 2 events and a cursor", page)
	}
	if got := page.Data[0]; got.ID != pending.String() || got.Status != "pending" || got.Stuck || got.PublishedAt != nil || len(got.ProcessedBy) != 0 {
		t.Fatalf("newest = %+v, want the pending event", got)
	}
	if got := page.Data[1]; got.ID != stuck.String() || got.Status != "stuck" || !got.Stuck || got.Attempts != 10 ||
		got.LastError == nil || *got.LastError != "no PubAck" || got.NextAttemptAt != nil {
		t.Fatalf("second = %+v, want the stuck event", got)
	}
	page = get(key, "?limit=2&cursor="+*page.NextCursor)
	if len(page.Data) != 1 || page.NextCursor != nil {
		t.Fatalf("second page = %+v, want the last event and no cursor", page)
	}
	got := page.Data[0]
	if got.ID != processed.String() || got.Status != "published" || got.PublishedAt == nil || got.NextAttemptAt != nil ||
		len(got.ProcessedBy) != 1 || got.ProcessedBy[0].Subscriber != "fulfillment" || got.ProcessedBy[0].ProcessedAt.IsZero() {
		t.Fatalf("oldest = %+v, want the published event processed by fulfillment", got)
	}
	if other := get(otherKey, ""); len(other.Data) != 0 {
		t.Fatalf("another tenant sees %d events, want 0", len(other.Data))
	}
}
