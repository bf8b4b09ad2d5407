package chaos

import (
	"time"

	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/payments"
)

// A History is everything Check looks at, recorded after the run settled:
// our database, the provider's ledger, the broker's stream and what every
// client saw. It is plain data (JSON-encodable), so a failed run can be saved
// and checked again, and Check's tests can record histories by hand.
type History struct {
	// Features says which optional parts of the service were running; the
	// invariants of an absent part are not checked.
	Features Features `json:"features"`
	DB       DBState  `json:"db"`
	Ledger   Ledger   `json:"ledger"`
	// Stream holds the message ids in the broker's event stream; nil when
	// no broker ran.
	Stream *StreamState `json:"stream,omitempty"`
	// Outcomes is what each intent's client got, one per intent.
	Outcomes []Outcome `json:"outcomes"`
	// DataRaces counts "WARNING: DATA RACE" reports in the logs of the
	// processes (only race-enabled builds report them).
	DataRaces int `json:"data_races"`
	// Outages are the times the run took the database away (killed or
	// stopped), with what the APIs answered meanwhile and how they came
	// back; empty when the run did not own its PostgreSQL.
	Outages []Outage `json:"outages,omitempty"`
	// LinkFaults are the times the run broke the network between the APIs
	// and a dependency (the network_* faults); empty without them.
	LinkFaults []LinkFault `json:"link_faults,omitempty"`
}

// LinkFault is one network fault: which, on the link to which dependency,
// from when to when it was healed.
type LinkFault struct {
	Kind  FaultKind `json:"kind"`
	Dep   string    `json:"dep"`
	Began time.Time `json:"began"`
	Ended time.Time `json:"ended"`
}

// Outage is one time the database was away: from the moment no server
// process was left (Began) to the moment it accepted connections again
// (Ended).
type Outage struct {
	Kind   FaultKind `json:"kind"`
	Began  time.Time `json:"began"`
	Ended  time.Time `json:"ended"`
	Probes []Probe   `json:"probes"`
	// Back is, per API, how it came back after Ended.
	Back []Reconnect `json:"back"`
}

// Probe is what one API answered, directly (not through the proxy), while
// the database was away.
type Probe struct {
	API int       `json:"api"`
	At  time.Time `json:"at"`
	// Alive: the process was running.
	Alive bool `json:"alive"`
	// Healthz and Readyz are the statuses of /healthz and /readyz (0: no
	// answer, Err says why).
	Healthz int    `json:"healthz"`
	Readyz  int    `json:"readyz"`
	Err     string `json:"err,omitempty"`
}

// Reconnect is how one API came back after the database did.
type Reconnect struct {
	API int `json:"api"`
	// Ready is how long after the database was back /readyz first answered
	// 200; negative: not within the bound the run waits (reconnectBound).
	Ready time.Duration `json:"ready"`
	// Listening is how long until the API's outbox dispatcher held a LISTEN
	// connection again; negative: not within the bound; zero without the
	// dispatcher.
	Listening time.Duration `json:"listening"`
}

// Features are the optional parts of the service a run exercised.
type Features struct {
	// Dispatcher: an outbox dispatcher publishes events to a broker, so every
	// committed event must end up published.
	Dispatcher bool `json:"dispatcher"`
	// Fulfillment: the fulfillment consumer takes stock for paid orders.
	Fulfillment bool `json:"fulfillment"`
}

// DBState is the part of our database the invariants read. Tenants are
// named by slug.
type DBState struct {
	Orders     []Order     `json:"orders"`
	OrderItems []OrderItem `json:"order_items"`
	Payments   []Payment   `json:"payments"`
	Refunds    []Refund    `json:"refunds"`
	// Records are the idempotency records of payments.create and
	// refunds.create that are still pending, and every record of the run's
	// own keys (to tell a definite outcome from an open one).
	Records []Record `json:"records"`
	Events  []Event  `json:"events"`
	// UnprocessedWebhooks counts provider webhook receipts not yet applied.
	UnprocessedWebhooks []string `json:"unprocessed_webhooks"`
	// StockBefore and StockAfter are the products' stock when the run began
	// and after it settled.
	StockBefore []Stock `json:"stock_before"`
	StockAfter  []Stock `json:"stock_after"`
	// Processed are the inbox rows (message id, subscriber).
	Processed     []Processed    `json:"processed"`
	Notifications []Notification `json:"notifications"`
}

// Order is a row of orders.
type Order struct {
	ID          string `json:"id"`
	Tenant      string `json:"tenant"`
	Key         string `json:"key"`
	Status      string `json:"status"`
	AmountTotal int64  `json:"amount_total"`
}

// OrderItem is a row of order_items.
type OrderItem struct {
	OrderID  string `json:"order_id"`
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

// Payment is a row of payments.
type Payment struct {
	ID             string `json:"id"`
	Tenant         string `json:"tenant"`
	OrderID        string `json:"order_id"`
	Key            string `json:"key"`
	ProviderKey    string `json:"provider_key"`
	Status         string `json:"status"`
	Amount         int64  `json:"amount"`
	ChargeID       string `json:"charge_id"`
	AmountRefunded int64  `json:"amount_refunded"`
	// CancelRequested: a cancel by key marked the payment while its outcome
	// was unknown (cancel_requested_at): a charge must be refunded in full,
	// and the order never paid.
	CancelRequested bool `json:"cancel_requested,omitempty"`
}

// Refund is a row of refunds.
type Refund struct {
	ID               string `json:"id"`
	Tenant           string `json:"tenant"`
	PaymentID        string `json:"payment_id"`
	Key              string `json:"key"`
	ProviderKey      string `json:"provider_key"`
	Status           string `json:"status"`
	Amount           int64  `json:"amount"`
	ProviderRefundID string `json:"provider_refund_id"`
}

// Record is a row of api_idempotency.
type Record struct {
	Tenant    string `json:"tenant"`
	Operation string `json:"operation"`
	Key       string `json:"key"`
	State     string `json:"state"`
	Status    int    `json:"status"`
	// Point is the recovery point; "cancelled" is a tombstone, written by
	// a cancel by key before any request under the key ran.
	Point string `json:"point,omitempty"`
}

// Event is a row of outbox_events.
type Event struct {
	ID          string `json:"id"`
	Type        string `json:"type"`
	AggregateID string `json:"aggregate_id"`
	Published   bool   `json:"published"`
}

// Stock is one product's stock.
type Stock struct {
	Tenant string `json:"tenant"`
	SKU    string `json:"sku"`
	Stock  int64  `json:"stock"`
}

// Processed is a row of processed_messages.
type Processed struct {
	MessageID  string `json:"message_id"`
	Subscriber string `json:"subscriber"`
}

// Notification is a row of notifications.
type Notification struct {
	OrderID string `json:"order_id"`
	Kind    string `json:"kind"`
	EventID string `json:"event_id"`
}

// Ledger is the provider simulator's ledger (GET /v1/ledger).
type Ledger struct {
	Charges []Charge       `json:"charges"`
	Refunds []LedgerRefund `json:"refunds"`
}

// Charge is one provider charge. Reference is metadata.reference: our
// payment id.
type Charge struct {
	ID             string `json:"id"`
	Amount         int64  `json:"amount"`
	Status         string `json:"status"`
	Reference      string `json:"reference"`
	IdempotencyKey string `json:"idempotency_key"`
	AmountRefunded int64  `json:"amount_refunded"`
}

// LedgerRefund is one provider refund. Reference is metadata.reference: our
// refund id.
type LedgerRefund struct {
	ID             string `json:"id"`
	Charge         string `json:"charge"`
	Amount         int64  `json:"amount"`
	Status         string `json:"status"`
	Reference      string `json:"reference"`
	IdempotencyKey string `json:"idempotency_key"`
}

// StreamState is what the broker's event stream holds.
type StreamState struct {
	// MessageIDs counts the stored messages per Nats-Msg-Id (the event id).
	MessageIDs map[string]int `json:"message_ids"`
	// Replicas is the stream's replica count (3 on a cluster run).
	Replicas int `json:"replicas,omitempty"`
}

// Outcome is what the client of one intent saw, call by call.
type Outcome struct {
	Intent int    `json:"intent"`
	Tenant string `json:"tenant"`
	Calls  []Call `json:"calls"`
}

// The operations of a Call, as the service's registry names them
// (internal/app.Operations). A test fails when the registry has an
// operation that the run neither drives nor lists in NotDriven.
const (
	OpOrder  = string(orders.OpCreate)
	OpPay    = string(payments.OpPay)
	OpRefund = string(payments.OpRefund)
	OpCancel = "orders.cancel"
	OpGiveUp = string(payments.OpCancel)
)

// Operations lists the operations the chaos run drives.
func Operations() []string { return []string{OpOrder, OpPay, OpRefund, OpCancel, OpGiveUp} }

// NotDriven names the registered operations the chaos run leaves out, each
// with the reason: a run that reports zero violations says so only about
// the operations it drives. An operation with an outside call belongs in
// the run, never here.
func NotDriven() map[string]string { return map[string]string{} }

// Call is one idempotent POST of an intent: its key, the client's last
// answer after its retries, and, when that was no definite answer, what the
// same call with the same key answered after the system settled (a real
// client resuming its intent).
type Call struct {
	Op  string `json:"op"`
	Key string `json:"key"`
	// Status is the HTTP status of the last answer (0: no answer at all).
	Status int `json:"status"`
	// Code is the problem code of a non-2xx answer.
	Code string `json:"code,omitempty"`
	// ResourceID is the order, payment or refund the answer named.
	ResourceID string `json:"resource_id,omitempty"`
	// ResourceStatus is the payment's or refund's status in a 2xx answer.
	ResourceStatus string `json:"resource_status,omitempty"`
	// Amount is the amount a 2xx answer named: the order's total, the
	// payment's or the refund's amount.
	Amount int64 `json:"amount,omitempty"`
	// Parent is what a 2xx answer said the resource belongs to: a
	// payment's order, a refund's payment; for a cancel and a give-up,
	// whatever their answer, the order they named.
	Parent string `json:"parent,omitempty"`
	// Target is, for a give-up (a cancel by key), the key of the payment it
	// gave up; its ResourceStatus is the cancel's outcome and ResourceID
	// the payment it found, if any.
	Target string `json:"target,omitempty"`
	// Attempts counts the client's HTTP attempts.
	Attempts int `json:"attempts"`
	// Err is the client's error when the call ended without a definite
	// answer.
	Err string `json:"err,omitempty"`
	// Ended is when the client's last attempt ended.
	Ended time.Time `json:"ended,omitzero"`
	// Resumed is the answer to the same call after settling, when Status
	// was not definite.
	Resumed *Call `json:"resumed,omitempty"`
}

// Definite reports whether the answer settles the call: a 2xx or a stored
// business failure. 5xx, 409 request_in_progress and no answer leave it
// open.
func (c Call) Definite() bool {
	switch {
	case c.Status >= 200 && c.Status < 300:
		return true
	case c.Status >= 500, c.Status == 0:
		return false
	case c.Status == 409 && c.Code == "request_in_progress":
		return false
	}
	return c.Status >= 400
}
