// Package inbox is the consumer half of the outbox: a consumer records the
// id of every message it processes in processed_messages, in the same
// transaction as the message's effect. The first delivery inserts the row
// and does the work; every later delivery of the same message (a
// redelivery after a lost ack, a publish after the broker's duplicate
// window, an operator's replay) conflicts on the primary key, and the
// consumer acks it without doing anything. This, not the broker's
// deduplication, is what makes duplicate deliveries harmless.
//
// Rows must be kept at least as long as a message may be delivered again.
// The broker's horizon is the event stream's max age (broker.DefaultMaxAge,
// 7 days): while a message is in the stream, a consumer reset or a new
// durable can be handed it again. JetStream's own redelivery of an
// unacknowledged message ends far sooner (fulfillment gives up after 10
// deliveries, within the hour). An operator's replay reaches further back;
// internal/retention holds the horizons and the retention the sweeper
// applies to processed_messages.
//
// No other package touches the processed_messages table: its queries are in
// internal/inbox/internal/dbsqlc.
package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/inbox/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/tracing"
)

// Claim records in tx that subscriber processed messageID, a message of
// tenant tenantID (the inbox is the tenant's, like every table it owns: the
// row lives with the tenant's other rows). first is true
// when this is the first time: the caller does its work in the same tx and
// commits both, then acks. first is false when the message was processed
// before: the caller does nothing and acks.
//
// Concurrent claims of one message (a redelivery while the first delivery
// is still being processed) are decided by the primary key: the second one
// waits for the first transaction and gets first=false if it committed, or
// first=true if it rolled back. processed_at is the database's clock, the
// same clock the sweeper will compare it with.
func Claim(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID, subscriber, messageID string) (first bool, err error) {
	if subscriber == "" || messageID == "" {
		return false, fmt.Errorf("inbox claim: subscriber %q and message id %q must not be empty", subscriber, messageID)
	}
	n, err := dbsqlc.New(tx).InboxClaim(ctx, dbsqlc.InboxClaimParams{TenantID: tenantID, Subscriber: subscriber, MessageID: messageID})
	if err != nil {
		return false, fmt.Errorf("inbox claim %s for %s: %w", messageID, subscriber, err)
	}
	if n != 1 {
		// On the consumer's span: this delivery was a duplicate, skipped.
		trace.SpanFromContext(ctx).AddEvent(tracing.EventDuplicate, trace.WithAttributes(
			semconv.MessagingConsumerGroupName(subscriber), semconv.MessagingMessageID(messageID)))
	}
	return n == 1, nil
}

// Processed is one subscriber's record of a message.
type Processed struct {
	Subscriber  string
	ProcessedAt time.Time
}

// ProcessedBy returns, for each of the tenant's messageIDs that was
// processed, who processed it and when, oldest first.
func ProcessedBy(ctx context.Context, pool *pgxpool.Pool, tenantID uuid.UUID, messageIDs []string) (map[string][]Processed, error) {
	out := make(map[string][]Processed)
	if len(messageIDs) == 0 {
		return out, nil
	}
	rows, err := dbsqlc.New(pool).InboxListForMessages(ctx, dbsqlc.InboxListForMessagesParams{TenantID: tenantID, MessageIds: messageIDs})
	if err != nil {
		return nil, fmt.Errorf("list processed messages: %w", err)
	}
	for _, r := range rows {
		out[r.MessageID] = append(out[r.MessageID], Processed{Subscriber: r.Subscriber, ProcessedAt: r.ProcessedAt})
	}
	return out, nil
}

// DeleteExpired deletes, in tx, up to limit of the tenant's records of messages processed at
// or before cutoff, oldest first, and reports how many it deleted: one batch
// of the retention sweeper, whose policy keeps them at least as long as the
// broker may redeliver and an operator may replay the message. A row
// another transaction holds is skipped for the next batch.
func DeleteExpired(ctx context.Context, tx pgx.Tx, tenant uuid.UUID, cutoff time.Time, limit int) (int64, error) {
	return dbsqlc.New(tx).InboxDeleteProcessed(ctx, dbsqlc.InboxDeleteProcessedParams{TenantID: tenant, Cutoff: cutoff, MaxRows: int32(limit)}) // #nosec G115 -- limit is the sweeper's batch size, at most 100,000 (app.Tuning)
}
