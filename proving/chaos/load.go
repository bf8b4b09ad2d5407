package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncepay/oncepay/client"
)

// loadStats counts the client side of a run.
type loadStats struct {
	calls, attempts, retries, replayed atomic.Int64
}

// driver runs intents with the project's Go client, one client per tenant,
// every call with its own key, retried by the client within a bounded
// number of attempts and the intent's time budget.
type driver struct {
	plan    *Plan
	clients map[string]*client.Client
	catalog []string // SKUs, sorted
	budget  time.Duration
	stats   *loadStats
}

// newDriver returns a driver whose clients make at most attempts HTTP
// attempts per call. Ten, with the client's backoff (and Retry-After of at
// most 2s), span about 20 seconds: more than an API restart or an expired
// lease of 6 seconds needs.
func newDriver(plan *Plan, baseURL string, catalog []string, budget time.Duration, attempts, conns int, stats *loadStats) (*driver, error) {
	hc := &http.Client{
		Timeout: 15 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns:        conns * 2,
			MaxIdleConnsPerHost: conns * 2,
			IdleConnTimeout:     30 * time.Second,
		},
	}
	d := &driver{plan: plan, clients: map[string]*client.Client{}, catalog: catalog, budget: budget, stats: stats}
	for tenant, key := range Tenants {
		c, err := client.New(baseURL, key,
			client.WithHTTPClient(hc),
			client.WithMaxAttempts(attempts),
			client.WithBackoff(100*time.Millisecond, 2*time.Second),
			client.WithOnRetry(func(int, time.Duration, error) { stats.retries.Add(1) }))
		if err != nil {
			return nil, err
		}
		d.clients[tenant] = c
	}
	return d, nil
}

// told is what a 2xx answer said about its resource: what the checker
// holds the database to afterwards.
type told struct {
	id, status, parent string
	amount             int64
}

func orderTold(o *client.Order) (t told) {
	if o != nil {
		t = told{id: o.ID, amount: o.AmountTotal}
	}
	return t
}

func cancelTold(o *client.Order) (t told) {
	if o != nil {
		t = told{id: o.ID, status: o.Status, amount: o.AmountTotal}
	}
	return t
}

func paymentTold(p *client.Payment) (t told) {
	if p != nil {
		t = told{id: p.ID, status: p.Status, parent: p.OrderID, amount: p.Amount}
	}
	return t
}

func refundTold(r *client.Refund) (t told) {
	if r != nil {
		t = told{id: r.ID, status: r.Status, parent: r.PaymentID, amount: r.Amount}
	}
	return t
}

// record turns a client call's result into a Call.
func (d *driver) record(op, key string, meta client.Meta, err error, t told) Call {
	d.stats.calls.Add(1)
	d.stats.attempts.Add(int64(meta.Attempts))
	if meta.Replayed {
		d.stats.replayed.Add(1)
	}
	c := Call{Op: op, Key: key, Status: meta.Status, Attempts: meta.Attempts, Ended: time.Now().UTC()}
	var apiErr *client.Error
	switch {
	case err == nil:
		c.ResourceID, c.ResourceStatus, c.Parent, c.Amount = t.id, t.status, t.parent, t.amount
	case errors.As(err, &apiErr):
		c.Status, c.Code = apiErr.Status, apiErr.Code
		if !c.Definite() {
			c.Err = err.Error()
		}
	default:
		c.Status, c.Err = 0, err.Error()
	}
	return c
}

// run executes one intent and returns what its client saw.
func (d *driver) run(ctx context.Context, in Intent) (out Outcome) {
	ctx, cancel := context.WithTimeout(ctx, d.budget)
	defer cancel()
	cl := d.clients[in.Tenant]
	out = Outcome{Intent: in.Index, Tenant: in.Tenant}
	// Concurrent calls finish in any order; the history lists them by key.
	defer func() {
		sort.SliceStable(out.Calls, func(i, j int) bool { return out.Calls[i].Key < out.Calls[j].Key })
	}()
	var mu sync.Mutex
	add := func(c Call) {
		mu.Lock()
		out.Calls = append(out.Calls, c)
		mu.Unlock()
	}

	req := client.CreateOrderRequest{Currency: "EUR"}
	for _, l := range in.Lines {
		req.Items = append(req.Items, client.LineItem{SKU: d.catalog[l[0]%len(d.catalog)], Quantity: l[1]})
	}
	key := d.plan.Key(in, "order")
	order, meta, err := cl.CreateOrder(ctx, req, client.WithIdempotencyKey(key))
	var orderID string
	var total int64
	if order != nil {
		orderID, total = order.ID, order.AmountTotal
	}
	add(d.record(OpOrder, key, meta, err, orderTold(order)))
	if order == nil {
		return out
	}
	if in.GiveUp != GiveUpNone {
		d.payAndGiveUp(ctx, in, orderID, add)
		return out
	}

	// A racing cancel runs beside the payment; the intent ends when both
	// have (this wait runs before the sort above).
	var racing sync.WaitGroup
	defer racing.Wait()
	switch in.Cancel {
	case CancelFirst:
		add(d.cancel(ctx, in, orderID, d.plan.Key(in, "cancel")))
	case CancelRacing:
		racing.Go(func() { add(d.cancel(ctx, in, orderID, d.plan.Key(in, "cancel"))) })
	}

	pay := func(call, method string) (*client.Payment, Call) {
		key := d.plan.Key(in, call)
		p, meta, err := cl.Pay(ctx, orderID, method, client.WithIdempotencyKey(key))
		c := d.record(OpPay, key, meta, err, paymentTold(p))
		add(c)
		return p, c
	}
	var paid *client.Payment
	var last Call
	if in.DoublePay {
		var wg sync.WaitGroup
		var a, b *client.Payment
		wg.Go(func() { a, last = pay("pay", in.Method) })
		wg.Go(func() { b, _ = pay("pay-dup", in.Method) })
		wg.Wait()
		paid = a
		if paid == nil {
			paid = b
		}
	} else {
		paid, last = pay("pay", in.Method)
	}
	if paid == nil && in.SecondCard && last.Code == client.CodeCardDeclined {
		paid, _ = pay("pay-2", client.PaymentMethodOK)
	}
	if paid == nil || paid.Status != client.StatusSucceeded {
		return out
	}

	refund := func(i, permille int) {
		key := d.plan.Key(in, fmt.Sprintf("refund-%d", i+1))
		amount := max(1, total*int64(permille)/1000)
		r, meta, err := cl.Refund(ctx, paid.ID, amount, client.WithIdempotencyKey(key))
		add(d.record(OpRefund, key, meta, err, refundTold(r)))
	}
	var wg sync.WaitGroup
	for i, pm := range in.Refunds {
		if in.ConcurrentRefunds {
			wg.Go(func() { refund(i, pm) })
		} else {
			refund(i, pm)
		}
	}
	wg.Wait()
	return out
}

// payAndGiveUp sends the intent's payment and gives it up by its key
// before, beside or after it (Intent.GiveUp).
func (d *driver) payAndGiveUp(ctx context.Context, in Intent, orderID string, add func(Call)) {
	pay := func() {
		key := d.plan.Key(in, "pay")
		p, meta, err := d.clients[in.Tenant].Pay(ctx, orderID, in.Method, client.WithIdempotencyKey(key))
		add(d.record(OpPay, key, meta, err, paymentTold(p)))
	}
	giveUp := func() { add(d.giveUp(ctx, in, orderID, d.plan.Key(in, "give-up"))) }
	switch in.GiveUp {
	case GiveUpFirst:
		giveUp()
		pay()
	case GiveUpAfter:
		pay()
		giveUp()
	default:
		var wg sync.WaitGroup
		wg.Go(pay)
		wg.Go(giveUp)
		wg.Wait()
	}
}

// giveUp cancels the intent's payment by its key (the "pay" call's), under
// key: the answer says what the cancel did.
func (d *driver) giveUp(ctx context.Context, in Intent, orderID, key string) Call {
	payKey := d.plan.Key(in, "pay")
	cn, meta, err := d.clients[in.Tenant].CancelPaymentByKey(ctx, orderID, payKey, client.WithIdempotencyKey(key))
	var t told
	if cn != nil {
		t = told{id: cn.PaymentID, status: cn.Outcome}
	}
	c := d.record(OpGiveUp, key, meta, err, t)
	c.Parent, c.Target = orderID, payKey
	return c
}

// cancel asks to cancel the intent's order under key: the answer is the
// cancelled order, or a refusal because the order is paid or being paid.
func (d *driver) cancel(ctx context.Context, in Intent, orderID, key string) Call {
	o, meta, err := d.clients[in.Tenant].CancelOrder(ctx, orderID, client.CancelOrderRequest{Reason: "the customer gave up"}, client.WithIdempotencyKey(key))
	c := d.record(OpCancel, key, meta, err, cancelTold(o))
	c.Parent = orderID
	return c
}

// resume sends a call without a definite answer again, with its key, after
// the system settled: what a real client does with the key Meta gave it.
// It needs the resource ids the intent's other calls got.
func (d *driver) resume(ctx context.Context, in Intent, out Outcome, c Call) Call {
	ctx, cancel := context.WithTimeout(ctx, d.budget)
	defer cancel()
	cl := d.clients[in.Tenant]
	var orderID, paymentID string
	var total int64
	for _, o := range out.Calls {
		final := o
		if !final.Definite() && o.Resumed != nil {
			final = *o.Resumed
		}
		switch {
		case o.Op == OpOrder:
			orderID = final.ResourceID
		case o.Op == OpPay && final.ResourceStatus == client.StatusSucceeded:
			paymentID = final.ResourceID
		}
	}
	switch c.Op {
	case OpOrder:
		req := client.CreateOrderRequest{Currency: "EUR"}
		for _, l := range in.Lines {
			req.Items = append(req.Items, client.LineItem{SKU: d.catalog[l[0]%len(d.catalog)], Quantity: l[1]})
		}
		o, meta, err := cl.CreateOrder(ctx, req, client.WithIdempotencyKey(c.Key))
		return d.record(OpOrder, c.Key, meta, err, orderTold(o))
	case OpPay:
		method := in.Method
		if c.Key == d.plan.Key(in, "pay-2") {
			method = client.PaymentMethodOK
		}
		p, meta, err := cl.Pay(ctx, orderID, method, client.WithIdempotencyKey(c.Key))
		return d.record(OpPay, c.Key, meta, err, paymentTold(p))
	case OpCancel:
		return d.cancel(ctx, in, orderID, c.Key)
	case OpGiveUp:
		return d.giveUp(ctx, in, orderID, c.Key)
	case OpRefund:
		if paymentID == "" {
			return c
		}
		o, err := cl.GetOrder(ctx, orderID)
		if err == nil {
			total = o.AmountTotal
		}
		for i, pm := range in.Refunds {
			if c.Key == d.plan.Key(in, fmt.Sprintf("refund-%d", i+1)) {
				r, meta, err := cl.Refund(ctx, paymentID, max(1, total*int64(pm)/1000), client.WithIdempotencyKey(c.Key))
				return d.record(OpRefund, c.Key, meta, err, refundTold(r))
			}
		}
	}
	return c
}
