// Package retention decides how long the service remembers what it has done,
// and forgets the rest in small batches.
//
// It implements rule 5: keys are kept for the full replay horizon of the
// business process, not the shortest queue window. The horizons over which
// the same intent may arrive again are declared (Horizons), every kind of
// dedup record has a retention (Policy), and Check refuses to start a service
// whose retention is shorter than a horizon it must cover. The Sweeper then
// deletes expired records without blocking live traffic, and never a record
// whose business operation is unsettled.
package retention

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/idempotency"
)

// Day is 24 hours, for readable horizons.
const Day = 24 * time.Hour

// Horizons are the longest times after which the same intent or message may
// be delivered again, by each source of duplicates.
type Horizons struct {
	// ClientRetry: a client (or a user with a saved tab) retrying a request.
	ClientRetry time.Duration
	// QueueRedelivery: the broker redelivering an unacknowledged message.
	QueueRedelivery time.Duration
	// WebhookRedelivery: the provider retrying a webhook delivery.
	WebhookRedelivery time.Duration
	// OperatorReplay: an operator republishing old events.
	OperatorReplay time.Duration
	// Settlement: the money horizon: settlement, disputes and compensations
	// that refer back to a payment.
	Settlement time.Duration
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
	// Idempotency is per operation (idempotency records).
	Idempotency idempotency.Policy
	// ProcessedMessages is the consumers' inbox.
	ProcessedMessages time.Duration
	// WebhookReceipts are processed webhook deliveries.
	WebhookReceipts time.Duration
	// PublishedEvents are outbox rows after publication.
	PublishedEvents time.Duration
}

// DefaultPolicy is the retention of docs/CONTRACT.md.
func DefaultPolicy() Policy {
	return Policy{
		Idempotency:       idempotency.DefaultPolicy(),
		ProcessedMessages: 35 * Day,
		WebhookReceipts:   7 * Day,
		PublishedEvents:   35 * Day,
	}
}

// horizon names one horizon for error messages.
type horizon struct {
	name string
	d    time.Duration
}

func (h Horizons) covers(kind string) []horizon {
	switch kind {
	case string(idempotency.OpOrdersCreate):
		return []horizon{{"client retry", h.ClientRetry}}
	case string(idempotency.OpPaymentsCreate), string(idempotency.OpRefundsCreate):
		return []horizon{{"client retry", h.ClientRetry}, {"settlement", h.Settlement}}
	case "processed_messages":
		// A consumer must recognise every message the broker or an operator
		// may deliver again.
		return []horizon{{"queue redelivery", h.QueueRedelivery}, {"operator replay", h.OperatorReplay}}
	case "webhook_receipts":
		return []horizon{{"webhook redelivery", h.WebhookRedelivery}}
	case "published_events":
		// Replaying an event needs the event.
		return []horizon{{"operator replay", h.OperatorReplay}}
	}
	return nil
}

// Check refuses a policy that forgets a record before a horizon it must
// cover has passed. The error names every violation with its numbers.
func Check(p Policy, h Horizons) error {
	var errs []error
	check := func(kind string, retention time.Duration) {
		for _, hz := range h.covers(kind) {
			if retention < hz.d {
				errs = append(errs, fmt.Errorf("retention of %s (%s) is shorter than the %s horizon (%s) it must cover",
					kind, days(retention), hz.name, days(hz.d)))
			}
		}
	}
	for _, op := range []idempotency.Operation{idempotency.OpOrdersCreate, idempotency.OpPaymentsCreate, idempotency.OpRefundsCreate} {
		check(string(op), p.Idempotency[op])
	}
	check("processed_messages", p.ProcessedMessages)
	check("webhook_receipts", p.WebhookReceipts)
	check("published_events", p.PublishedEvents)
	// An operator can replay any event the outbox still holds; its consumers
	// must still recognise it then, or the replay runs the effect again.
	if p.ProcessedMessages < p.PublishedEvents {
		errs = append(errs, fmt.Errorf("retention of processed_messages (%s) is shorter than that of published_events (%s): a replay of a kept event would run its effect again",
			days(p.ProcessedMessages), days(p.PublishedEvents)))
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
