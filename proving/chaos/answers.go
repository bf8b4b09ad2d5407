// The answers a call may get: what each call is allowed to answer, and
// when two answers of one key contradict each other.

package chaos

import (
	"fmt"
	"slices"
)

// allowed are the definite answers each operation may legitimately give an
// intent of the run: status, and the problem code of a 4xx.
var allowed = map[string][]string{
	OpOrder:  {"200", "201"},
	OpPay:    {"201", "200", "402 card_declined", "409 order_already_paid", "409 order_not_payable", "409 payment_cancelled"},
	OpRefund: {"201", "200", "422 refund_exceeds_payment"},
	OpCancel: {"200", "409 order_not_cancellable"},
	OpGiveUp: {"200", "202"},
}

func answerName(call Call) string {
	if call.Status >= 300 {
		return fmt.Sprintf("%d %s", call.Status, call.Code)
	}
	return fmt.Sprint(call.Status)
}

// outcomes checks what every client saw against the database.
func (c *checker) outcomes() {
	for _, o := range c.h.Outcomes {
		for _, call := range o.Calls {
			subject := fmt.Sprintf("intent %d %s %s", o.Intent, call.Op, call.Key)
			final := call
			if !final.Definite() && call.Resumed != nil {
				final = *call.Resumed
			}
			rec, hasRec := c.records[o.Tenant+"/"+call.Op+"/"+call.Key]
			if !final.Definite() && (!hasRec || rec.State == statusPending) {
				c.add(IntentNotDefinite, subject, "no definite answer (%s), not after settling either, and no final record", lastAnswer(call))
				continue
			}
			if !call.Definite() && !c.gaveUpDuringOutage(call) {
				c.add(ClientUnresolved, subject, "no definite answer after %d attempts: %s", call.Attempts, lastAnswer(call))
			}
			if !final.Definite() {
				continue // definite by its record alone
			}
			if !slices.Contains(allowed[call.Op], answerName(final)) {
				c.add(UnexpectedAnswer, subject, "answer %s", answerName(final))
				continue
			}
			if msg := c.contradiction(o.Tenant, final); msg != "" {
				c.add(AnswerMismatch, subject, "%s", msg)
			}
		}
	}
}

// lastAnswer describes a call's last answer for a report.
func lastAnswer(call Call) string {
	if call.Status == 0 {
		return "no answer: " + call.Err
	}
	return fmt.Sprintf("%d %s", call.Status, call.Code)
}

// contradiction says how the database contradicts a definite answer, or
// "": the resource the answer named exists, under the key, with what the
// answer said about it (its id, status, amount, and what it belongs to),
// and a refusal left nothing behind under its key.
func (c *checker) contradiction(tenant string, call Call) string {
	ok := call.Status < 300
	switch call.Op {
	case OpOrder:
		o, found := c.orderByKey[tk(tenant, call.Key)]
		switch {
		case !found || o.ID != call.ResourceID:
			return fmt.Sprintf("answered order %s, the key's order is %q", call.ResourceID, o.ID)
		case o.AmountTotal != call.Amount:
			return fmt.Sprintf("answered order %s of %d, the order is of %d", o.ID, call.Amount, o.AmountTotal)
		}
	case OpPay:
		p, found := c.paymentByKey[tk(tenant, call.Key)]
		switch {
		case ok && (!found || p.ID != call.ResourceID):
			return fmt.Sprintf("answered payment %s, the key's payment is %q", call.ResourceID, p.ID)
		case ok && (p.Status != statusSucceeded || call.ResourceStatus != statusSucceeded):
			return fmt.Sprintf("answered %d with a %s payment, the payment is %s", call.Status, call.ResourceStatus, p.Status)
		case ok && (p.Amount != call.Amount || p.OrderID != call.Parent):
			return fmt.Sprintf("answered payment %s of %d for order %s, the payment is of %d for order %s", p.ID, call.Amount, call.Parent, p.Amount, p.OrderID)
		case call.Code == "card_declined" && (!found || p.Status != statusFailed):
			return fmt.Sprintf("answered card_declined, the key's payment %q is %q", p.ID, p.Status)
		case (call.Code == "order_already_paid" || call.Code == "order_not_payable") && found:
			return fmt.Sprintf("answered %s, yet the key made payment %s", call.Code, p.ID)
		case call.Code == "payment_cancelled" && !c.tombstoned(tenant, call.Key) && !(found && p.CancelRequested):
			return fmt.Sprintf("answered payment_cancelled, yet no cancel stopped the key (payment %q)", p.ID)
		}
	case OpGiveUp:
		return c.giveUpContradiction(tenant, call)
	case OpCancel:
		o, found := c.orderByID[call.Parent]
		switch {
		case !found:
			return fmt.Sprintf("a cancel of order %q, which does not exist", call.Parent)
		case ok && (call.ResourceID != o.ID || call.ResourceStatus != orderCancelled || o.Status != orderCancelled):
			return fmt.Sprintf("answered order %s %s, the order is %s %s", call.ResourceID, call.ResourceStatus, o.ID, o.Status)
		case call.Code == "order_not_cancellable" && o.Status == orderCancelled:
			return fmt.Sprintf("answered order_not_cancellable, yet order %s is cancelled", o.ID)
		}
	case OpRefund:
		r, found := c.refundByKey[tk(tenant, call.Key)]
		switch {
		case ok && (!found || r.ID != call.ResourceID):
			return fmt.Sprintf("answered refund %s, the key's refund is %q", call.ResourceID, r.ID)
		case ok && r.Status != statusSucceeded:
			return fmt.Sprintf("answered %d, refund %s is %s", call.Status, r.ID, r.Status)
		case ok && (r.Amount != call.Amount || r.PaymentID != call.Parent):
			return fmt.Sprintf("answered refund %s of %d of payment %s, the refund is of %d of payment %s", r.ID, call.Amount, call.Parent, r.Amount, r.PaymentID)
		case call.Code == "refund_exceeds_payment" && found && r.Status == statusSucceeded:
			return fmt.Sprintf("answered refund_exceeds_payment, yet the key's refund %s succeeded", r.ID)
		}
	}
	return ""
}
