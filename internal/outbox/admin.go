package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncepay/oncepay/internal/outbox/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tracing"
	"github.com/oncepay/oncepay/internal/wire"
)

// Delivery states of a stored event, as GET /v1/events shows them.
const (
	// StatusPending: not published yet, no failed attempt.
	StatusPending = "pending"
	// StatusRetrying: not published yet, at least one failed attempt; the
	// dispatcher tries again at next_attempt_at.
	StatusRetrying = "retrying"
	// StatusStuck: the dispatcher's maximum of failed attempts
	// (WithMaxAttempts); waits for an operator.
	StatusStuck = "stuck"
	// StatusPublished: the broker acknowledged it.
	StatusPublished = "published"
)

// Stored is an outbox event with its delivery state.
type Stored struct {
	ID             uuid.UUID
	Seq            int64
	TenantID       uuid.UUID
	Type           string
	AggregateType  string
	AggregateID    uuid.UUID
	IdempotencyKey string
	OccurredAt     time.Time
	Payload        []byte
	PublishedAt    *time.Time
	Attempts       int
	LastError      *string
	NextAttemptAt  *time.Time
	StuckAt        *time.Time
}

// Status is the event's delivery state, one of the Status constants.
func (s Stored) Status() string {
	switch {
	case s.PublishedAt != nil:
		return StatusPublished
	case s.StuckAt != nil:
		return StatusStuck
	case s.Attempts > 0:
		return StatusRetrying
	}
	return StatusPending
}

func storedFromRow(r dbsqlc.OutboxEvent) Stored {
	return Stored{
		ID: r.ID, Seq: r.Seq, TenantID: r.TenantID, Type: r.EventType, AggregateType: r.AggregateType,
		AggregateID: r.AggregateID, IdempotencyKey: r.IdempotencyKey, OccurredAt: r.OccurredAt.UTC(),
		Payload: r.Payload, PublishedAt: utcPtr(r.PublishedAt), Attempts: int(r.Attempts), LastError: r.LastError,
		NextAttemptAt: utcPtr(r.NextAttemptAt), StuckAt: utcPtr(r.StuckAt),
	}
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// Admin holds the operator's actions on the outbox: list stuck events, retry
// one, replay one. They act on any tenant's events; expose them to operators
// only (the CLI, or an admin route behind its own credentials).
type Admin struct {
	pool   *pgxpool.Pool
	js     jetstream.JetStream
	logger *slog.Logger
}

// NewAdmin returns the operator's actions. js may be nil when only Stuck and
// Retry are needed (Replay then fails).
func NewAdmin(pool *pgxpool.Pool, js jetstream.JetStream, logger *slog.Logger) *Admin {
	return &Admin{pool: pool, js: js, logger: logger}
}

// Stuck lists up to limit stuck events of all tenants, oldest first.
func (a *Admin) Stuck(ctx context.Context, limit int) ([]Stored, error) {
	rows, err := dbsqlc.New(a.pool).OutboxListStuck(ctx, int32(max(1, min(limit, 1000))))
	if err != nil {
		return nil, fmt.Errorf("list stuck outbox events: %w", err)
	}
	out := make([]Stored, len(rows))
	for i, r := range rows {
		out[i] = storedFromRow(r)
	}
	return out, nil
}

// Retry makes an unpublished event (stuck, or waiting out a backoff) due at
// once with a fresh count of attempts, and wakes the dispatchers. retried is
// false when the event was already published: nothing to do (use Replay to
// send a published event again). An unknown id is ErrNotFound. Retrying
// twice is harmless.
func (a *Admin) Retry(ctx context.Context, id uuid.UUID) (ev Stored, retried bool, err error) {
	err = postgres.InTx(ctx, a.pool, func(tx pgx.Tx) error {
		q := dbsqlc.New(tx)
		// The operator names the event by its id alone: find its tenant
		// first, so that the write names it (on Citus, one shard).
		found, err := q.OutboxGet(ctx, id)
		if err != nil {
			return notFound(err, "load outbox event "+id.String())
		}
		ev = storedFromRow(found)
		row, err := q.OutboxRetry(ctx, dbsqlc.OutboxRetryParams{TenantID: found.TenantID, ID: id})
		if err = notFound(err, "retry outbox event "+id.String()); errors.Is(err, ErrNotFound) {
			return nil // published: nothing to retry
		}
		if err != nil {
			return err
		}
		ev, retried = storedFromRow(row), true
		if err := q.OutboxNotify(ctx); err != nil {
			return fmt.Errorf("notify dispatchers: %w", err)
		}
		return nil
	})
	if err != nil {
		return Stored{}, false, err
	}
	if retried {
		a.logger.InfoContext(ctx, "outbox event retried by operator", "event_id", id, "type", ev.Type, "tenant_id", ev.TenantID)
	}
	return ev, retried, nil
}

// ReplayResult is the broker's answer to a replay.
type ReplayResult struct {
	Event    Stored
	Stream   string
	Sequence uint64
	// Duplicate is true when JetStream recognised the message id within its
	// duplicate window and did not store the message again: consumers never
	// see it. Outside the window the message is stored and delivered again,
	// and the consumers' inboxes ignore it.
	Duplicate bool
}

// Replay publishes a stored event again, directly (whatever the
// dispatcher's bookkeeping says; published_at is left alone), with its
// original id as Nats-Msg-Id, and waits for the PubAck. It is the operator's
// tool when a consumer missed an event, and the demonstration that the
// broker's deduplication is not the guarantee: a replay is harmless because
// consumers deduplicate by message id themselves. An unknown id is ErrNotFound.
func (a *Admin) Replay(ctx context.Context, id uuid.UUID) (ReplayResult, error) {
	if a.js == nil {
		return ReplayResult{}, errors.New("replay: no broker connection")
	}
	row, err := dbsqlc.New(a.pool).OutboxGet(ctx, id)
	if err != nil {
		return ReplayResult{}, notFound(err, "load outbox event "+id.String())
	}
	// The replay continues the trace the event was appended in, so its
	// delivery (a duplicate for every consumer that has it) shows there.
	m := message(row)
	tracing.InjectHeader(tracing.Restore(ctx, row.TraceContext), m.Header)
	ack, err := a.js.PublishMsg(ctx, m)
	if err != nil {
		return ReplayResult{}, fmt.Errorf("replay outbox event %s: %w", id, err)
	}
	a.logger.InfoContext(ctx, "outbox event replayed by operator", "event_id", id, "type", row.EventType,
		"tenant_id", row.TenantID, "stream_seq", ack.Sequence, "duplicate", ack.Duplicate)
	return ReplayResult{Event: storedFromRow(row), Stream: ack.Stream, Sequence: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// AdminHandler serves the operator's outbox actions over HTTP. It does no
// authentication of its own: mount it behind the admin credentials.
type AdminHandler struct {
	admin *Admin
}

// NewAdminHandler returns the handler for admin.
func NewAdminHandler(admin *Admin) *AdminHandler { return &AdminHandler{admin: admin} }

type retryJSON struct {
	Event   eventJSON `json:"event"`
	Retried bool      `json:"retried"`
}

type replayJSON struct {
	Event     eventJSON `json:"event"`
	Stream    string    `json:"stream"`
	Sequence  uint64    `json:"stream_sequence"`
	Duplicate bool      `json:"duplicate"`
}

// Stuck handles GET /admin/outbox/stuck?limit=: stuck events of all tenants.
func (h *AdminHandler) Stuck(c echo.Context) error {
	limit, err := wire.ParseLimit(c.QueryParam("limit"))
	if err != nil {
		return err
	}
	list, err := h.admin.Stuck(c.Request().Context(), limit)
	if err != nil {
		return err
	}
	out := listJSON{Data: make([]eventJSON, len(list))}
	for i, ev := range list {
		out.Data[i] = eventJSONFrom(ev, nil)
	}
	return wire.JSON(c, http.StatusOK, out)
}

// Retry handles POST /admin/outbox/events/{id}/retry. It is idempotent by
// nature (it sets a state), so it needs no Idempotency-Key.
func (h *AdminHandler) Retry(c echo.Context) error {
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return problem.New(problem.NotFound, "No such event.")
	}
	ev, retried, err := h.admin.Retry(c.Request().Context(), id)
	if errors.Is(err, ErrNotFound) {
		return problem.New(problem.NotFound, "No such event.")
	}
	if err != nil {
		return err
	}
	return wire.JSON(c, http.StatusOK, retryJSON{Event: eventJSONFrom(ev, nil), Retried: retried})
}

// Replay handles POST /admin/outbox/events/{id}/replay. Repeating it is
// harmless by design (that is what it demonstrates), so it needs no
// Idempotency-Key.
func (h *AdminHandler) Replay(c echo.Context) error {
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return problem.New(problem.NotFound, "No such event.")
	}
	res, err := h.admin.Replay(c.Request().Context(), id)
	if errors.Is(err, ErrNotFound) {
		return problem.New(problem.NotFound, "No such event.")
	}
	if err != nil {
		return err
	}
	return wire.JSON(c, http.StatusOK, replayJSON{
		Event: eventJSONFrom(res.Event, nil), Stream: res.Stream, Sequence: res.Sequence, Duplicate: res.Duplicate,
	})
}
