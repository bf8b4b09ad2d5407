package fulfillment

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/tracing"
)

// Run declares the consumer and processes messages with as many workers as
// WithWorkers says until ctx is cancelled, then returns nil once every worker has
// finished the message it was handling. A broker that goes away is waited
// for: the client reconnects and the workers pull again.
func (c *Consumer) Run(ctx context.Context) error {
	wait := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := c.consume(ctx)
		if ctx.Err() != nil {
			return nil
		}
		c.logger.WarnContext(ctx, "fulfillment subscription ended; starting a new one", "error", err.Error(), "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
	return nil
}

// consume runs the workers on one pull subscription until it ends. The
// workers share the subscription's small buffer, so a message waits for
// whichever worker is free, never behind one slow transaction.
func (c *Consumer) consume(ctx context.Context) error {
	cons, err := c.Declare(ctx)
	if err != nil {
		return err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(2 * c.cfg.workers))
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	defer it.Stop()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		ended error
	)
	for range c.cfg.workers {
		wg.Go(func() {
			for {
				msg, err := it.Next(jetstream.NextContext(ctx))
				if err != nil {
					once.Do(func() {
						ended = err
						it.Stop() // the other workers' Next returns too
					})
					return
				}
				c.handle(ctx, msg)
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("next message: %w", ended)
}

// handle processes one delivery and acks it after the commit. A failure is
// negatively acknowledged with a delay (JetStream delivers it again, up to
// WithMaxDeliver times); a message no retry can help is terminated. Once begun,
// the transaction and the ack run to their end even when ctx is cancelled.
func (c *Consumer) handle(ctx context.Context, msg jetstream.Msg) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.processTimeout)
	defer cancel()
	ctx, span := c.traced(ctx, msg)
	defer span.End()
	m, err := parse(msg)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		c.logger.ErrorContext(ctx, "fulfillment cannot read message; terminated", "subject", msg.Subject(), "error", err.Error())
		_ = msg.TermWithReason(err.Error())
		return
	}
	outcome, err := c.Process(ctx, m)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		c.fail(ctx, msg, m, err)
		return
	}
	span.SetAttributes(tracing.ConsumerOutcome.String(string(outcome)))
	c.logger.DebugContext(ctx, "fulfillment processed message", "event_id", m.ID, "type", m.Type, "outcome", outcome)
	c.observe(m.ID, outcome)
	if h := c.hooks.AfterCommit; h != nil {
		if err := h(m.ID, outcome); err != nil {
			return // no ack: as if the process died here
		}
	}
	if err := msg.Ack(); err != nil {
		// The effect is committed; the redelivery will meet the inbox.
		c.logger.WarnContext(ctx, "fulfillment ack not sent; the redelivery will be a duplicate", "event_id", m.ID, "error", err.Error())
	}
}

// traced continues the trace msg carries in its headers (the dispatcher's
// publish span, which continues the request's) with the consumer span of
// this delivery. The inbox puts a duplicate on it as an event
// (tracing.EventDuplicate). Without tracing the span is a no-op.
func (c *Consumer) traced(ctx context.Context, msg jetstream.Msg) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemKey.String("nats"),
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingDestinationName(msg.Subject()),
		semconv.MessagingConsumerGroupName(Subscriber),
		semconv.MessagingMessageID(msg.Headers().Get(jetstream.MsgIDHeader)),
	}
	if md, err := msg.Metadata(); err == nil {
		attrs = append(attrs, tracing.Delivery.Int64(int64(min(md.NumDelivered, math.MaxInt64)))) // #nosec G115 -- min bounds it
	}
	return c.tracer.Start(tracing.ExtractHeader(ctx, msg.Headers()), "process "+msg.Subject(),
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
}

func (c *Consumer) fail(ctx context.Context, msg jetstream.Msg, m Message, err error) {
	var perm *permanentError
	if errors.As(err, &perm) {
		c.logger.ErrorContext(ctx, "fulfillment cannot process event; terminated (replay it once fixed)", "event_id", m.ID, "type", m.Type, "error", err.Error())
		_ = msg.TermWithReason(truncate(err.Error(), 200))
		return
	}
	delivered := uint64(1)
	if md, mdErr := msg.Metadata(); mdErr == nil {
		delivered = md.NumDelivered
	}
	if c.cfg.maxDeliver > 0 && delivered >= uint64(c.cfg.maxDeliver) {
		c.logger.ErrorContext(ctx, "fulfillment gave up on event after its last delivery; replay it once the cause is fixed",
			"event_id", m.ID, "type", m.Type, "deliveries", delivered, "error", err.Error())
	} else {
		c.logger.WarnContext(ctx, "fulfillment failed; redelivery scheduled", "event_id", m.ID, "type", m.Type, "deliveries", delivered, "error", err.Error())
	}
	_ = msg.NakWithDelay(nakDelay(delivered))
}

// nakDelay is the wait before a failed message's next delivery: 1s after the
// first failure, doubling, at most one minute.
func nakDelay(delivered uint64) time.Duration {
	d := time.Second
	for i := uint64(1); i < delivered && d < time.Minute; i++ {
		d *= 2
	}
	return min(d, time.Minute)
}

// parse reads a delivery: the event id from Nats-Msg-Id (the inbox key), the
// type and tenant from the headers the outbox sets.
func parse(msg jetstream.Msg) (Message, error) {
	h := msg.Headers()
	id := h.Get(jetstream.MsgIDHeader)
	if id == "" {
		return Message{}, errors.New("message has no Nats-Msg-Id: it cannot be deduplicated")
	}
	typ := h.Get(broker.HeaderEventType)
	if typ == "" {
		typ = strings.TrimPrefix(msg.Subject(), broker.SubjectPrefix+".")
	}
	tenant, err := uuid.Parse(h.Get(broker.HeaderTenantID))
	if err != nil {
		return Message{}, fmt.Errorf("message %s: bad %s header: %w", id, broker.HeaderTenantID, err)
	}
	return Message{ID: id, Type: typ, TenantID: tenant, Payload: msg.Data()}, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ToValidUTF8(s, "")
}
