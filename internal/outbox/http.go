package outbox

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/outbox/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/wire"
)

// Handler serves GET /v1/events: the tenant's outbox, newest first.
type Handler struct {
	pool *pgxpool.Pool
}

// NewHandler returns the events handler.
func NewHandler(pool *pgxpool.Pool) *Handler { return &Handler{pool: pool} }

type eventJSON struct {
	ID             uuid.UUID       `json:"id"`
	Type           string          `json:"type"`
	AggregateType  string          `json:"aggregate_type"`
	AggregateID    uuid.UUID       `json:"aggregate_id"`
	IdempotencyKey string          `json:"idempotency_key"`
	OccurredAt     time.Time       `json:"occurred_at"`
	PublishedAt    *time.Time      `json:"published_at"`
	Status         string          `json:"status"`
	Stuck          bool            `json:"stuck"`
	Attempts       int             `json:"attempts"`
	LastError      *string         `json:"last_error"`
	NextAttemptAt  *time.Time      `json:"next_attempt_at"`
	ProcessedBy    []processedJSON `json:"processed_by"`
	Payload        json.RawMessage `json:"payload"`
}

// processedJSON is one consumer's inbox record of the event.
type processedJSON struct {
	Subscriber  string    `json:"subscriber"`
	ProcessedAt time.Time `json:"processed_at"`
}

func eventJSONFrom(s Stored, processed []inbox.Processed) eventJSON {
	out := eventJSON{
		ID: s.ID, Type: s.Type, AggregateType: s.AggregateType, AggregateID: s.AggregateID,
		IdempotencyKey: s.IdempotencyKey, OccurredAt: s.OccurredAt, PublishedAt: s.PublishedAt,
		Status: s.Status(), Stuck: s.Status() == StatusStuck, Attempts: s.Attempts, LastError: s.LastError,
		NextAttemptAt: s.NextAttemptAt, ProcessedBy: make([]processedJSON, len(processed)), Payload: s.Payload,
	}
	if s.PublishedAt != nil || s.StuckAt != nil { // no attempt is scheduled
		out.NextAttemptAt = nil
	}
	for i, p := range processed {
		out.ProcessedBy[i] = processedJSON{Subscriber: p.Subscriber, ProcessedAt: p.ProcessedAt.UTC()}
	}
	return out
}

type listJSON struct {
	Data       []eventJSON `json:"data"`
	NextCursor *string     `json:"next_cursor"`
}

// List handles GET /v1/events?limit=&cursor=. Each event shows its delivery
// state (published_at, status, stuck, attempts, last_error, next_attempt_at)
// and which subscribers processed it (their inbox rows for the event id).
func (h *Handler) List(c echo.Context) error {
	t := tenants.FromContext(c)
	ctx := c.Request().Context()
	limit, err := wire.ParseLimit(c.QueryParam("limit"))
	if err != nil {
		return err
	}
	p := dbsqlc.OutboxListNewestParams{TenantID: t.ID, MaxRows: int32(limit + 1)} // #nosec G115 -- limit is at most wire.MaxPageSize
	if raw := c.QueryParam("cursor"); raw != "" {
		seq, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || seq < 1 {
			return problem.Validation(problem.FieldError{Field: "cursor", Message: "is not a cursor this API returned"})
		}
		p.HasCursor, p.CursorSeq = true, seq
	}
	rows, err := dbsqlc.New(h.pool).OutboxListNewest(ctx, p)
	if err != nil {
		return fmt.Errorf("list events: %w", err)
	}
	out := listJSON{Data: make([]eventJSON, 0, min(len(rows), limit))}
	if len(rows) > limit {
		next := strconv.FormatInt(rows[limit-1].Seq, 10)
		out.NextCursor = &next
		rows = rows[:limit]
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID.String()
	}
	processed, err := inbox.ProcessedBy(ctx, h.pool, p.TenantID, ids)
	if err != nil {
		return err
	}
	for _, r := range rows {
		out.Data = append(out.Data, eventJSONFrom(storedFromRow(r), processed[r.ID.String()]))
	}
	return wire.JSON(c, http.StatusOK, out)
}
