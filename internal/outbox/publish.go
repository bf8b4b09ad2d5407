package outbox

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/outbox/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/tracing"
)

// publish sends rows, claimed at claimedAt, and waits for their
// acknowledgement, at most the publish timeout (WithPublishTimeout). errs[i]
// is nil when rows[i] was acknowledged (stored, or recognised as a
// duplicate within the window).
//
// A batch of at least WithAtomicBatches' events goes first as one
// JetStream atomic batch (publishAtomic): stored all or nothing, and, on a
// server that syncs every write to disk before it acknowledges
// (sync_always: the embedded server's default, and what the documented
// deployments run), synced once for the whole batch instead of once per
// message. Measured here (docs/BENCHMARKS.md): an atomic batch costs the
// server about 8 ms whatever its size, sync or not, where sync_always costs
// about 0.5 ms per message published one by one: it pays from about 20
// events up (500 events: 22 ms instead of 253 ms), and not at all on a
// server that does not sync each write (500 events: 18 ms instead of 10).
// Smaller batches, the common case at a steady low rate, go message by
// message.
//
// When the server refuses the batch, it goes again message by message
// (publishEach), where each row succeeds or fails on its own: that is the
// path of a batch with an event the stream has already (an atomic batch
// may not hold a duplicate; the re-publish after a crash between publish
// and mark is one), of a server without atomic batches, and of
// any other refusal.
func (d *Dispatcher) publish(ctx context.Context, rows []dbsqlc.OutboxEvent, claimedAt time.Time) []error {
	errs := make([]error, len(rows))
	msgs := make([]*nats.Msg, len(rows))
	spans := make([]trace.Span, len(rows))
	defer func() {
		for i, span := range spans {
			if errs[i] != nil {
				span.SetStatus(codes.Error, errs[i].Error())
			}
			span.End()
		}
	}()
	for i, r := range rows {
		msgs[i] = message(r)
		spans[i] = d.traced(ctx, r, msgs[i], claimedAt)
	}
	// One publish timeout for the batch, the atomic attempt and the
	// message-by-message one together: the round's budget and the lease
	// (the lease longer than the publish timeout) count on it.
	wait, cancel := context.WithTimeout(ctx, d.cfg.publishTimeout)
	defer cancel()
	if d.cfg.atomicMin > 0 && len(msgs) >= max(d.cfg.atomicMin, 2) && len(msgs) <= MaxAtomicBatch {
		err := d.publishAtomic(wait, msgs)
		if err == nil {
			return errs
		}
		d.logger.DebugContext(ctx, "outbox batch refused as an atomic batch; publishing it message by message", "events", len(msgs), "error", err.Error())
	}
	d.publishEach(wait, msgs, errs)
	return errs
}

// MaxAtomicBatch is the largest batch the dispatcher publishes as one
// atomic batch: the server's default limit. A larger claim (WithBatchSize)
// goes message by message.
const MaxAtomicBatch = 1000

// publishAtomic publishes msgs as one atomic batch (jetstreamext.PublishMsgBatch)
// by wait's deadline, on copies: their batch headers stay off msgs.
func (d *Dispatcher) publishAtomic(wait context.Context, msgs []*nats.Msg) error {
	batch := make([]*nats.Msg, len(msgs))
	for i, m := range msgs {
		batch[i] = &nats.Msg{Subject: m.Subject, Data: m.Data, Header: nats.Header(http.Header(m.Header).Clone())}
	}
	// The first message's acknowledgement waits AckTimeout, whatever the
	// context says: what is left of the deadline.
	deadline, _ := wait.Deadline()
	left := time.Until(deadline)
	if left <= 0 {
		return wait.Err()
	}
	ack, err := jetstreamext.PublishMsgBatch(wait, d.js, batch,
		jetstreamext.BatchFlowControl{AckFirst: true, AckTimeout: left})
	if err != nil {
		return err
	}
	if ack.BatchSize != uint64(len(msgs)) {
		return fmt.Errorf("atomic batch of %d acknowledged as %d", len(msgs), ack.BatchSize)
	}
	return nil
}

// publishEach publishes msgs with asynchronous publishes and waits for
// every PubAck until wait is done; errs[i] is msgs[i]'s outcome.
func (d *Dispatcher) publishEach(wait context.Context, msgs []*nats.Msg, errs []error) {
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		f, err := d.js.PublishMsgAsync(m)
		if err != nil {
			errs[i] = fmt.Errorf("publish: %w", err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = fmt.Errorf("publish: %w", err)
		case <-wait.Done():
			errs[i] = fmt.Errorf("no PubAck within %v", d.cfg.publishTimeout)
		}
	}
}

// traced continues the trace r was appended in (its stored context) with
// the producer span of this publish, and writes the span's context into m's
// headers for the consumers. A row appended without tracing gets neither:
// its span is a no-op.
func (d *Dispatcher) traced(ctx context.Context, r dbsqlc.OutboxEvent, m *nats.Msg, claimedAt time.Time) trace.Span {
	if len(r.TraceContext) == 0 {
		return trace.SpanFromContext(context.Background())
	}
	ctx, span := d.tracer.Start(tracing.Restore(ctx, r.TraceContext), "publish "+m.Subject,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			semconv.MessagingSystemKey.String("nats"),
			semconv.MessagingOperationTypeSend,
			semconv.MessagingOperationName("publish"),
			semconv.MessagingDestinationName(m.Subject),
			semconv.MessagingMessageID(r.ID.String()),
			tracing.EventType.String(r.EventType),
			tracing.OutboxWait.Float64(max(0, claimedAt.Sub(r.OccurredAt).Seconds())),
		))
	tracing.InjectHeader(ctx, m.Header)
	return span
}

// message is the broker message of an outbox row: the payload as body, the
// event id as Nats-Msg-Id, the rest in headers.
func message(r dbsqlc.OutboxEvent) *nats.Msg {
	m := nats.NewMsg(broker.Subject(r.EventType))
	m.Data = r.Payload
	m.Header.Set(jetstream.MsgIDHeader, r.ID.String())
	m.Header.Set(broker.HeaderTenantID, r.TenantID.String())
	m.Header.Set(broker.HeaderEventType, r.EventType)
	m.Header.Set(broker.HeaderAggregateType, r.AggregateType)
	m.Header.Set(broker.HeaderAggregateID, r.AggregateID.String())
	m.Header.Set(broker.HeaderIdempotencyKey, r.IdempotencyKey)
	m.Header.Set(broker.HeaderOccurredAt, r.OccurredAt.UTC().Format(time.RFC3339Nano))
	return m
}
