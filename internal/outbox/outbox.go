// Package outbox is the producer half of the transactional outbox: a
// feature appends its event (Append) in the same transaction as its state
// change, so the event exists if and only if the change committed.
//
// The Dispatcher publishes the table to NATS JetStream, at least once, with
// the event id as the broker's message id; several dispatchers may run at
// once. Publishing at least once means duplicates: JetStream drops those it
// sees within its duplicate window, and consumers' inboxes make every other
// one harmless (broker deduplication never replaces idempotent side
// effects). Admin holds the operator's actions (retry a stuck event, replay
// a published one); Handler serves GET /v1/events.
//
// No other package touches the outbox_events table: its queries are in
// internal/outbox/internal/dbsqlc.
package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/outbox/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/tracing"
)

// ErrNotFound is returned for an event that does not exist.
var ErrNotFound = errors.New("no such event")

// Event is one fact to publish.
type Event struct {
	// ID is the event's identity and the broker's message id, so every
	// redelivery of the event is recognisably the same message.
	ID            uuid.UUID
	TenantID      uuid.UUID
	Type          string
	AggregateType string
	AggregateID   uuid.UUID
	// IdempotencyKey is the key of the request that caused the event: the
	// operation identity travels downstream with the event.
	IdempotencyKey string
	OccurredAt     time.Time
	// Payload is encoded as JSON; a json.RawMessage is taken as encoded
	// already (the caller's response body, say, encoded once for both).
	Payload any
}

// Append writes e in the caller's transaction, at once. A zero ID gets a
// fresh time-ordered UUID.
func Append(ctx context.Context, tx pgx.Tx, e Event) (uuid.UUID, error) {
	id, q, err := Queue(ctx, tx, e)
	if err != nil {
		return uuid.Nil, err
	}
	return id, q.Err()
}

// DB is where Queue queues an event's insert: a transaction, or a
// pipelined step's batch (operation.Batch), whose transaction it joins.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// QueuedAppend is an Append queued into a batch (Queue).
type QueuedAppend struct {
	event   string
	results *dbsqlc.OutboxInsertBatchResults
}

// Queue queues Append's insert into db and returns the event's id.
// QueuedAppend.Err reads the insert's outcome once it was sent; in a batch
// a failed insert also fails the statements after it, COMMIT included, so
// reading it is optional there.
func Queue(ctx context.Context, db DB, e Event) (uuid.UUID, *QueuedAppend, error) {
	params, err := e.params(ctx)
	if err != nil {
		return uuid.Nil, nil, err
	}
	results := dbsqlc.New(db).OutboxInsert(ctx, []dbsqlc.OutboxInsertParams{params})
	return params.ID, &QueuedAppend{event: e.Type, results: results}, nil
}

// Err reads the queued insert's outcome.
func (q *QueuedAppend) Err() error {
	var err error
	q.results.Exec(func(_ int, e error) { err = e })
	if err != nil {
		return fmt.Errorf("append %s event: %w", q.event, err)
	}
	return nil
}

// params are the parameters of e's insert. A payload that is encoded JSON
// already (json.RawMessage) is stored as it is.
func (e Event) params(ctx context.Context) (dbsqlc.OutboxInsertParams, error) {
	if e.ID == uuid.Nil {
		var err error
		if e.ID, err = uuid.NewV7(); err != nil {
			return dbsqlc.OutboxInsertParams{}, fmt.Errorf("event id: %w", err)
		}
	}
	payload, ok := e.Payload.(json.RawMessage)
	if !ok {
		var err error
		if payload, err = json.Marshal(e.Payload); err != nil {
			return dbsqlc.OutboxInsertParams{}, fmt.Errorf("encode %s payload: %w", e.Type, err)
		}
	}
	return dbsqlc.OutboxInsertParams{
		ID:             e.ID,
		TenantID:       e.TenantID,
		EventType:      e.Type,
		AggregateType:  e.AggregateType,
		AggregateID:    e.AggregateID,
		IdempotencyKey: e.IdempotencyKey,
		Payload:        payload,
		OccurredAt:     e.OccurredAt,
		// The request's trace goes with the event: the dispatcher publishes
		// under it (nil without tracing).
		TraceContext: tracing.Capture(ctx),
	}, nil
}

// notFound is the one place where this package's queries' pgx.ErrNoRows
// becomes ErrNotFound; other errors are wrapped with what, and nil stays nil.
func notFound(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// DeleteExpired deletes, in tx, up to limit of the tenant's events published at or before
// cutoff, oldest publication first, and reports how many it deleted: one
// batch of the retention sweeper. An unpublished event is never deleted,
// and a row another transaction holds is skipped for the next batch.
func DeleteExpired(ctx context.Context, tx pgx.Tx, tenant uuid.UUID, cutoff time.Time, limit int) (int64, error) {
	return dbsqlc.New(tx).OutboxDeletePublished(ctx, dbsqlc.OutboxDeletePublishedParams{TenantID: tenant, Cutoff: cutoff, MaxRows: int32(limit)}) // #nosec G115 -- limit is the sweeper's batch size, at most 100,000 (app.Tuning)
}

// HasEvent reports whether the tenant has event id; another tenant's event
// is one it does not have.
func HasEvent(ctx context.Context, pool *pgxpool.Pool, tenantID, id uuid.UUID) (bool, error) {
	ok, err := dbsqlc.New(pool).OutboxExists(ctx, dbsqlc.OutboxExistsParams{TenantID: tenantID, ID: id})
	if err != nil {
		return false, fmt.Errorf("look up outbox event %s: %w", id, err)
	}
	return ok, nil
}

// Stats describes the outbox at one moment, read in one statement, for the
// metrics: pending counts the events not yet published, lag is the age of
// the oldest of them by the database's clock (0 when none: how far
// publication is behind), and stuck counts those of them the dispatcher gave
// up on until an operator retries them.
func Stats(ctx context.Context, pool *pgxpool.Pool) (pending int64, lag time.Duration, stuck int64, err error) {
	row, err := dbsqlc.New(pool).OutboxStats(ctx)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("read outbox stats: %w", err)
	}
	return row.Pending, time.Duration(row.LagSeconds * float64(time.Second)), row.Stuck, nil
}
