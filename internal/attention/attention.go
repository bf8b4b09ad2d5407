// Package attention is the needs-attention queue: what no retry can settle
// and a person has to look at, stored, counted and visible to operators
// instead of retried, or logged, forever.
//
// An item names its reason (Reasons: a provider's record about other money
// than ours, or an attempt that still had no outcome after the recoverer's
// bound), what was found, and its subject: an attempt of an idempotent
// operation (tenant, operation, key), which package operation holds for an
// operator, or a provider webhook delivery, which package webhooks sets
// aside unapplied. Raise writes it in the caller's transaction, the one that
// holds the attempt or sets the delivery aside, so neither happens without
// its item. An operator resolves an item (Resolve): the attempt was released
// for another try, or the matter was settled outside the service, with a
// note that says what was done.
//
// It knows no feature: the subject and the resource it is about (a payment,
// a refund) are names the raiser gives. No other package touches the
// attention_items table: its queries are in internal/attention/internal/dbsqlc.
package attention

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncepay/oncepay/internal/attention/internal/dbsqlc"
)

// Reason says why an item needs a person.
type Reason string

// The reasons of an item.
const (
	// ReasonMismatch: an outside party's record disagrees with ours about
	// the money (the provider charged another amount or currency, charged
	// twice, refunded another charge, or moved money where we recorded a
	// failure). No retry can change what it says.
	ReasonMismatch Reason = "mismatch"
	// ReasonRecoveryExhausted: an attempt still had no outcome after the
	// recoverer's bound of recoveries (the provider kept failing).
	ReasonRecoveryExhausted Reason = "recovery_exhausted"
)

// Reasons lists every Reason: the vocabulary of the attention_items CHECK,
// the OpenAPI description and the metric's series.
func Reasons() []Reason { return []Reason{ReasonMismatch, ReasonRecoveryExhausted} }

// Resolution says how an operator resolved an item.
type Resolution string

// The resolutions of an item.
const (
	// ResolutionRetried: the held attempt was released for another try, with
	// its recoveries counted from zero.
	ResolutionRetried Resolution = "retried"
	// ResolutionClosed: settled outside the service (e.g. the odd charge
	// refunded at the provider by hand). A held attempt stays held.
	ResolutionClosed Resolution = "closed"
)

// Status is whether an item waits for an operator.
type Status string

// The statuses of an item.
const (
	StatusOpen     Status = "open"
	StatusResolved Status = "resolved"
)

// ErrNotFound is returned for an item that does not exist.
var ErrNotFound = errors.New("no such attention item")

// ErrResolved is returned by Resolve for an item that is resolved already.
var ErrResolved = errors.New("attention item is resolved already")

// Attempt names an attempt of an idempotent operation within the item's
// tenant: the idempotency record it holds.
type Attempt struct {
	Operation string
	Key       string
}

// Resource names what an item is about, such as a payment.
type Resource struct {
	Type string
	ID   uuid.UUID
}

// Resolved is an operator's resolution of an item.
type Resolved struct {
	At         time.Time
	Resolution Resolution
	Note       string
}

// Item is one thing a person has to look at.
type Item struct {
	ID     uuid.UUID
	Reason Reason
	// Detail is what was found, for the operator (it may name amounts and
	// the provider's ids; it is never shown to a client).
	Detail   string
	TenantID uuid.UUID
	// Attempt is the held attempt, when the item is about one; DeliveryID
	// the provider webhook delivery otherwise. Exactly one is set.
	Attempt    *Attempt
	DeliveryID string
	// Resource is the payment or refund the item is about, if known.
	Resource *Resource
	RaisedAt time.Time
	// Resolved is nil while the item is open.
	Resolved *Resolved
}

// Status returns whether the item is open or resolved.
func (it Item) Status() Status {
	if it.Resolved == nil {
		return StatusOpen
	}
	return StatusResolved
}

// DB runs queries: a pool, a connection or a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// maxDetail bounds an item's detail, in bytes.
const maxDetail = 2000

// Raise writes it, an open item, in tx: the transaction of the state change
// that needs a person. An attempt has at most one open item and a delivery
// one item: when there is one already, Raise returns it and raised is false.
// The item's ID is set here; RaisedAt must be set by the caller.
func Raise(ctx context.Context, tx pgx.Tx, it Item) (_ Item, raised bool, err error) {
	if (it.Attempt == nil) == (it.DeliveryID == "") {
		return Item{}, false, errors.New("attention: an item is about an attempt or a delivery, exactly one")
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Item{}, false, fmt.Errorf("attention item id: %w", err)
	}
	p := dbsqlc.AttentionInsertParams{
		ID:       id,
		Reason:   string(it.Reason),
		Detail:   truncate(it.Detail, maxDetail),
		TenantID: it.TenantID,
		RaisedAt: it.RaisedAt,
	}
	if it.Attempt != nil {
		p.Operation, p.IdempotencyKey = &it.Attempt.Operation, &it.Attempt.Key
	} else {
		p.DeliveryID = &it.DeliveryID
	}
	if it.Resource != nil {
		p.ResourceType, p.ResourceID = &it.Resource.Type, &it.Resource.ID
	}
	q := dbsqlc.New(tx)
	row, err := q.AttentionInsert(ctx, p)
	if err == nil {
		return itemFromRow(row), true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Item{}, false, fmt.Errorf("raise attention item: %w", err)
	}
	if it.Attempt != nil {
		row, err = q.AttentionGetOpenForAttempt(ctx, dbsqlc.AttentionGetOpenForAttemptParams{
			TenantID: it.TenantID, Operation: it.Attempt.Operation, IdempotencyKey: it.Attempt.Key,
		})
	} else {
		row, err = q.AttentionGetByDelivery(ctx, dbsqlc.AttentionGetByDeliveryParams{TenantID: it.TenantID, DeliveryID: it.DeliveryID})
	}
	if err != nil {
		return Item{}, false, fmt.Errorf("load the attention item raised before: %w", err)
	}
	return itemFromRow(row), false, nil
}

// Get returns the item id (ErrNotFound for none).
func Get(ctx context.Context, db DB, id uuid.UUID) (Item, error) {
	row, err := dbsqlc.New(db).AttentionGet(ctx, id)
	if err != nil {
		return Item{}, notFound(err, "load attention item "+id.String())
	}
	return itemFromRow(row), nil
}

// List returns up to limit items of a status: open ones oldest first (the
// queue in the order it was raised), resolved ones the most recently
// resolved first.
func List(ctx context.Context, db DB, status Status, limit int) ([]Item, error) {
	q := dbsqlc.New(db)
	n := int32(max(1, min(limit, math.MaxInt32))) // #nosec G115 -- bounded to 1..MaxInt32 right here
	var (
		rows []dbsqlc.AttentionItem
		err  error
	)
	switch status {
	case StatusOpen:
		rows, err = q.AttentionListOpen(ctx, n)
	case StatusResolved:
		rows, err = q.AttentionListResolved(ctx, n)
	default:
		return nil, fmt.Errorf("attention: no status %q", status)
	}
	if err != nil {
		return nil, fmt.Errorf("list %s attention items: %w", status, err)
	}
	return itemsFromRows(rows), nil
}

// ForAttempt returns the items of one attempt, newest first: its open item,
// if any, and those resolved before.
func ForAttempt(ctx context.Context, db DB, tenantID uuid.UUID, a Attempt) ([]Item, error) {
	rows, err := dbsqlc.New(db).AttentionListForAttempt(ctx, dbsqlc.AttentionListForAttemptParams{
		TenantID: tenantID, Operation: a.Operation, IdempotencyKey: a.Key,
	})
	if err != nil {
		return nil, fmt.Errorf("list the attention items of %s %q: %w", a.Operation, a.Key, err)
	}
	return itemsFromRows(rows), nil
}

// Resolve resolves the open item id in tx, with the operator's note. An
// unknown item is ErrNotFound, a resolved one ErrResolved (it keeps its
// first resolution). Releasing a held attempt is the caller's, in the same
// transaction.
func Resolve(ctx context.Context, tx pgx.Tx, id uuid.UUID, r Resolved) (Item, error) {
	if r.Resolution != ResolutionRetried && r.Resolution != ResolutionClosed {
		return Item{}, fmt.Errorf("attention: no resolution %q", r.Resolution)
	}
	// The operator names the item by its id alone: find its tenant first,
	// so that the write names it (on Citus, one shard).
	it, err := Get(ctx, tx, id)
	if err != nil {
		return Item{}, err
	}
	row, err := dbsqlc.New(tx).AttentionResolve(ctx, dbsqlc.AttentionResolveParams{
		ResolvedAt: r.At, Resolution: string(r.Resolution), Note: truncate(r.Note, maxDetail), TenantID: it.TenantID, ID: id,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Item{}, fmt.Errorf("resolve attention item %s: %w", id, ErrResolved)
	}
	if err != nil {
		return Item{}, fmt.Errorf("resolve attention item %s: %w", id, err)
	}
	return itemFromRow(row), nil
}

// OpenCounts counts the open items by reason, in one statement (for the
// metrics). A reason without open items is absent.
func OpenCounts(ctx context.Context, db DB) (map[Reason]int64, error) {
	rows, err := dbsqlc.New(db).AttentionCountOpen(ctx)
	if err != nil {
		return nil, fmt.Errorf("count open attention items: %w", err)
	}
	out := make(map[Reason]int64, len(rows))
	for _, r := range rows {
		out[Reason(r.Reason)] = r.Open
	}
	return out, nil
}

func itemFromRow(r dbsqlc.AttentionItem) Item {
	it := Item{ID: r.ID, Reason: Reason(r.Reason), Detail: r.Detail, TenantID: r.TenantID, RaisedAt: r.RaisedAt.UTC()}
	if r.Operation != nil && r.IdempotencyKey != nil {
		it.Attempt = &Attempt{Operation: *r.Operation, Key: *r.IdempotencyKey}
	}
	if r.DeliveryID != nil {
		it.DeliveryID = *r.DeliveryID
	}
	if r.ResourceType != nil && r.ResourceID != nil {
		it.Resource = &Resource{Type: *r.ResourceType, ID: *r.ResourceID}
	}
	if r.ResolvedAt != nil {
		it.Resolved = &Resolved{At: r.ResolvedAt.UTC()}
		if r.Resolution != nil {
			it.Resolved.Resolution = Resolution(*r.Resolution)
		}
		if r.Note != nil {
			it.Resolved.Note = *r.Note
		}
	}
	return it
}

func itemsFromRows(rows []dbsqlc.AttentionItem) []Item {
	out := make([]Item, len(rows))
	for i, r := range rows {
		out[i] = itemFromRow(r)
	}
	return out
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

// truncate cuts s to at most n bytes without splitting a character.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
