// Package retention decides how long the service remembers what it has done,
// and forgets the rest in small batches.
//
// Keys are kept for the full replay horizon of the business process, not
// the shortest queue window. The horizons over which
// the same intent may arrive again are declared (Horizons), every kind of
// dedup record has a retention (Policy), and Check refuses to start a service
// whose retention is shorter than a horizon it must cover. The Sweeper then
// deletes expired records without blocking live traffic, and never a record
// whose business operation is unsettled. It owns no table: it runs the
// deletes of the packages that own them (Tables).
package retention

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/idempotency"
)

// Day is 24 hours, for readable horizons.
const Day = 24 * time.Hour

// Horizon names one source of duplicates: who may send the same intent or
// message again, and so how long its dedup records must be kept.
type Horizon string

// The horizons.
const (
	// HorizonClientRetry: a client (or a user with a saved tab) retrying a
	// request.
	HorizonClientRetry Horizon = "client retry"
	// HorizonQueueRedelivery: the broker redelivering an unacknowledged
	// message.
	HorizonQueueRedelivery Horizon = "queue redelivery"
	// HorizonWebhookRedelivery: the provider retrying a webhook delivery.
	HorizonWebhookRedelivery Horizon = "webhook redelivery"
	// HorizonOperatorReplay: an operator republishing old events.
	HorizonOperatorReplay Horizon = "operator replay"
	// HorizonSettlement: the money horizon: settlement, disputes and
	// compensations that refer back to a payment.
	HorizonSettlement Horizon = "settlement"
)

// Horizons are the longest times after which the same intent or message may
// be delivered again, by each source of duplicates.
type Horizons struct {
	ClientRetry       time.Duration
	QueueRedelivery   time.Duration
	WebhookRedelivery time.Duration
	OperatorReplay    time.Duration
	Settlement        time.Duration
}

// Of returns the length of horizon name (0 for a name it does not know).
func (h Horizons) Of(name Horizon) time.Duration {
	switch name {
	case HorizonClientRetry:
		return h.ClientRetry
	case HorizonQueueRedelivery:
		return h.QueueRedelivery
	case HorizonWebhookRedelivery:
		return h.WebhookRedelivery
	case HorizonOperatorReplay:
		return h.OperatorReplay
	case HorizonSettlement:
		return h.Settlement
	}
	return 0
}

// DefaultHorizons are the horizons of docs/CONTRACT.md.
func DefaultHorizons() Horizons {
	return Horizons{
		ClientRetry:       Day,
		QueueRedelivery:   7 * Day,
		WebhookRedelivery: 3 * Day,
		OperatorReplay:    30 * Day,
		Settlement:        45 * Day,
	}
}

// Policy is how long each kind of record is kept after it is finished.
type Policy struct {
	// Idempotency is per operation (idempotency records); its defaults come
	// with each operation (operation.Spec).
	Idempotency idempotency.Policy
	// ProcessedMessages is the consumers' inbox.
	ProcessedMessages time.Duration
	// WebhookReceipts are processed webhook deliveries.
	WebhookReceipts time.Duration
	// PublishedEvents are outbox rows after publication.
	PublishedEvents time.Duration
}

// DefaultPolicy is the retention of docs/CONTRACT.md for the records of the
// mechanisms; the caller adds each operation's (Policy.Idempotency).
func DefaultPolicy() Policy {
	return Policy{
		Idempotency:       idempotency.Policy{},
		ProcessedMessages: 42 * Day,
		WebhookReceipts:   7 * Day,
		PublishedEvents:   35 * Day,
	}
}

// Covers says which horizons the records of each idempotent operation must
// cover (operation.Spec.Covers).
type Covers map[idempotency.Operation][]Horizon

// mechanismCovers are the horizons of the mechanisms' own records.
var mechanismCovers = map[string][]Horizon{
	// A consumer must recognise every message the broker or an operator may
	// deliver again.
	"processed_messages": {HorizonQueueRedelivery, HorizonOperatorReplay},
	"webhook_receipts":   {HorizonWebhookRedelivery},
	// Replaying an event needs the event.
	"published_events": {HorizonOperatorReplay},
}

// Check refuses a policy that forgets a record before a horizon it must
// cover has passed, and an operation without a retention. The error names
// every violation with its numbers.
func Check(p Policy, h Horizons, ops Covers) error {
	var errs []error
	check := func(kind string, retention time.Duration, covers []Horizon) {
		if retention <= 0 {
			errs = append(errs, fmt.Errorf("%s has no retention", kind))
			return
		}
		for _, hz := range covers {
			if d := h.Of(hz); retention < d {
				errs = append(errs, fmt.Errorf("retention of %s (%s) is shorter than the %s horizon (%s) it must cover",
					kind, days(retention), hz, days(d)))
			}
		}
	}
	for _, op := range slices.Sorted(maps.Keys(ops)) {
		check(string(op), p.Idempotency[op], ops[op])
	}
	check("processed_messages", p.ProcessedMessages, mechanismCovers["processed_messages"])
	check("webhook_receipts", p.WebhookReceipts, mechanismCovers["webhook_receipts"])
	check("published_events", p.PublishedEvents, mechanismCovers["published_events"])
	// An operator can replay any event the outbox still holds (and at least
	// within the replay horizon), and the replay is a new message in the
	// stream that may wait there, for a consumer that is down, as long as
	// the broker keeps messages (the stream's max age, at most the queue
	// redelivery horizon). The consumers must still recognise it when it
	// finally arrives, or the replay runs the effect again.
	if need := max(p.PublishedEvents, h.OperatorReplay) + h.QueueRedelivery; p.ProcessedMessages < need {
		errs = append(errs, fmt.Errorf("retention of processed_messages (%s) is shorter than the age of a replayable event (%s, the longer of published_events' retention and the operator replay horizon) plus the queue redelivery horizon it may then wait in the stream (%s): a replay of a kept event consumed late would run its effect again",
			days(p.ProcessedMessages), days(max(p.PublishedEvents, h.OperatorReplay)), days(h.QueueRedelivery)))
	}
	return errors.Join(errs...)
}

// days renders a duration in days when it is whole days.
func days(d time.Duration) string {
	if d > 0 && d%Day == 0 {
		return fmt.Sprintf("%dd", d/Day)
	}
	return strings.TrimSuffix(d.String(), "0s")
}
