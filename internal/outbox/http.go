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

	"github.com/oncepay/oncepay/internal/dbsqlc"
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
	Attempts       int32           `json:"attempts"`
	LastError      *string         `json:"last_error"`
	Payload        json.RawMessage `json:"payload"`
}

type listJSON struct {
	Data       []eventJSON `json:"data"`
	NextCursor *string     `json:"next_cursor"`
}

// Page sizes of the events list.
const (
	defaultLimit = 20
	maxLimit     = 100
)

// List handles GET /v1/events?limit=&cursor=.
func (h *Handler) List(c echo.Context) error {
	t := tenants.FromContext(c)
	limit := defaultLimit
	if raw := c.QueryParam("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > maxLimit {
			return problem.Validation(problem.FieldError{Field: "limit", Message: fmt.Sprintf("must be an integer between 1 and %d", maxLimit)})
		}
		limit = n
	}
	p := dbsqlc.OutboxListNewestParams{TenantID: t.ID, MaxRows: int32(limit + 1)}
	if raw := c.QueryParam("cursor"); raw != "" {
		seq, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || seq < 1 {
			return problem.Validation(problem.FieldError{Field: "cursor", Message: "is not a cursor this API returned"})
		}
		p.HasCursor, p.CursorSeq = true, seq
	}
	rows, err := dbsqlc.New(h.pool).OutboxListNewest(c.Request().Context(), p)
	if err != nil {
		return fmt.Errorf("list events: %w", err)
	}
	out := listJSON{Data: make([]eventJSON, 0, min(len(rows), limit))}
	for i, r := range rows {
		if i == limit {
			next := strconv.FormatInt(rows[i-1].Seq, 10)
			out.NextCursor = &next
			break
		}
		out.Data = append(out.Data, eventJSON{
			ID: r.ID, Type: r.EventType, AggregateType: r.AggregateType, AggregateID: r.AggregateID,
			IdempotencyKey: r.IdempotencyKey, OccurredAt: r.OccurredAt.UTC(), PublishedAt: r.PublishedAt,
			Attempts: r.Attempts, LastError: r.LastError, Payload: r.Payload,
		})
	}
	return wire.JSON(c, http.StatusOK, out)
}
