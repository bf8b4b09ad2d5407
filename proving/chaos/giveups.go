// The payments clients gave up by their keys (POST
// /v1/payments/cancel-by-key): what a give-up's answer must match, and
// what must hold of the payment afterwards.

package chaos

import (
	"fmt"

	"github.com/oncepay/oncepay/client"
)

// givenUp checks the payments clients gave up by their keys: none ends
// charged and not refunded in full, and none marked while its outcome was
// unknown is fulfilled.
func (c *checker) givenUp() {
	undo := map[string]bool{} // payment ids
	for _, p := range c.h.DB.Payments {
		if p.CancelRequested {
			undo[p.ID] = true
		}
	}
	for _, o := range c.h.Outcomes {
		for _, call := range o.Calls {
			final := call
			if !final.Definite() && call.Resumed != nil {
				final = *call.Resumed
			}
			if final.Op != OpGiveUp || final.Status >= 300 || final.ResourceStatus == client.CancelNothingToCancel {
				continue
			}
			if p, ok := c.paymentByKey[tk(o.Tenant, final.Target)]; ok {
				undo[p.ID] = true
			}
		}
	}
	shipped := map[string]bool{}
	for _, n := range c.h.DB.Notifications {
		if n.Kind == kindReceipt {
			shipped[n.OrderID] = true
		}
	}
	for _, p := range c.h.DB.Payments {
		if !undo[p.ID] {
			continue
		}
		if p.Status == statusSucceeded && p.AmountRefunded < p.Amount {
			c.add(GivenUpCharged, "payment "+p.ID, "given up by its key %s, yet charged %d and refunded %d", p.Key, p.Amount, p.AmountRefunded)
			c.skipStatus[p.OrderID] = true
		}
		if p.CancelRequested && shipped[p.OrderID] {
			c.add(GivenUpFulfilled, "payment "+p.ID, "marked cancelled while its outcome was unknown, yet order %s shipped", p.OrderID)
			c.skipShipped[p.OrderID] = true
		}
	}
}

// tombstoned reports whether a cancel by key stopped tenant's payment key
// before any request under it ran.
func (c *checker) tombstoned(tenant, key string) bool {
	r, ok := c.records[tenant+"/"+OpPay+"/"+key]
	return ok && r.Point == pointCancelled
}

// giveUpContradiction says how the database contradicts a give-up's
// answer: what the cancel said it did must be what the payment's key shows.
func (c *checker) giveUpContradiction(tenant string, call Call) string {
	p, found := c.paymentByKey[tk(tenant, call.Target)]
	if found && call.ResourceID != "" && call.ResourceID != p.ID {
		return fmt.Sprintf("answered payment %s, the key's payment is %s", call.ResourceID, p.ID)
	}
	switch call.ResourceStatus {
	case client.CancelPrevented:
		if !c.tombstoned(tenant, call.Target) || found {
			return fmt.Sprintf("answered prevented, yet the key %s has no tombstone or made payment %q", call.Target, p.ID)
		}
	case client.CancelRequested:
		if !found || !p.CancelRequested {
			return fmt.Sprintf("answered cancel_requested, yet the key's payment %q is not marked to be cancelled", p.ID)
		}
	case client.CancelRefundStarted:
		if _, ok := c.refundByKey[tk(tenant, compensationPrefix+p.ID)]; !found || !ok {
			return fmt.Sprintf("answered refund_started, yet the key's payment %q has no compensating refund", p.ID)
		}
	case client.CancelNothingToCancel:
		if found && p.Status == statusSucceeded && p.AmountRefunded < p.Amount {
			return fmt.Sprintf("answered nothing_to_cancel, yet the key's payment %s is charged and refunded %d of %d", p.ID, p.AmountRefunded, p.Amount)
		}
	default:
		return fmt.Sprintf("answered outcome %q", call.ResourceStatus)
	}
	return ""
}
