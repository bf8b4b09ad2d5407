package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/oncepay/oncepay/client"
	"github.com/oncepay/oncepay/proving/pspsim"
)

// The payment scenarios: a payment is an order's create followed by its
// pay, each under a fresh key, against the simulator with its latency set
// for the run (--psp-latency):
//
//	pay        POST /v1/orders, then POST /v1/orders/{id}/payments: one
//	           client's whole purchase
//	pay-only   POST /v1/orders/{id}/payments alone, on orders created
//	           before the measurement
const (
	scenarioPay     = "pay"
	scenarioPayOnly = "pay-only"
)

// payMethod is the simulator's card that always succeeds.
const payMethod = pspsim.PaymentMethodOK

// errPrepared ends a worker of a pay-only phase that found no prepared
// order left: the phase ends when its last worker does, and its figures
// are those of the payments it made (runPhase).
var errPrepared = errors.New("no prepared order left")

// pay pays order id under a fresh key and checks that it succeeded.
func (c *apiClient) pay(ctx context.Context, orderID string) error {
	p, meta, err := c.api.Pay(ctx, orderID, payMethod, client.WithIdempotencyKey(newKey()))
	if err != nil {
		return err
	}
	if meta.Replayed || p.Status != "succeeded" {
		return fmt.Errorf("payment %s: status %d, %s, Idempotent-Replayed=%t", p.ID, meta.Status, p.Status, meta.Replayed)
	}
	return nil
}

// payOp creates an order and pays it, each under a fresh key.
func (c *apiClient) payOp() op {
	return func(ctx context.Context) error {
		o, _, err := c.api.CreateOrder(ctx, order, client.WithIdempotencyKey(newKey()))
		if err != nil {
			return fmt.Errorf("create order: %w", err)
		}
		return c.pay(ctx, o.ID)
	}
}

// preparedOrders are orders created for a pay-only phase, each paid once.
type preparedOrders struct {
	mu  sync.Mutex
	ids []string
}

// take returns the next prepared order, or false when none is left.
func (p *preparedOrders) take() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ids) == 0 {
		return "", false
	}
	id := p.ids[len(p.ids)-1]
	p.ids = p.ids[:len(p.ids)-1]
	return id, true
}

// prepareOrders creates n orders from clients goroutines for a pay-only
// phase.
func (c *apiClient) prepareOrders(ctx context.Context, n, clients int) (*preparedOrders, error) {
	p := &preparedOrders{ids: make([]string, 0, n)}
	errc := make(chan error, clients)
	var wg sync.WaitGroup
	var left = n
	for range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				p.mu.Lock()
				if left == 0 {
					p.mu.Unlock()
					return
				}
				left--
				p.mu.Unlock()
				o, _, err := c.api.CreateOrder(ctx, order, client.WithIdempotencyKey(newKey()))
				if err != nil {
					errc <- fmt.Errorf("prepare an order to pay: %w", err)
					return
				}
				p.mu.Lock()
				p.ids = append(p.ids, o.ID)
				p.mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errc)
	if err := errors.Join(ctx.Err(), <-errc); err != nil {
		return nil, err
	}
	return p, nil
}

// payOnlyOp pays the prepared orders, one each.
func (c *apiClient) payOnlyOp(orders *preparedOrders) op {
	return func(ctx context.Context) error {
		id, ok := orders.take()
		if !ok {
			return errPrepared
		}
		return c.pay(ctx, id)
	}
}

// payOnlyOrders is how many orders a pay-only phase is given: enough for
// its warm-up and measured time at the rate rate (payments per second)
// measured before, with a margin, or first of all first.
func payOnlyOrders(l load, rate float64, first int) int {
	if l.requests > 0 {
		return l.requests + int(rate*l.warmup.Seconds()*1.5) + 16
	}
	if rate <= 0 {
		return first
	}
	return int(rate*(l.warmup+l.duration).Seconds()*1.5) + 16
}

// pspAdmin sets the simulator's latency through its admin API, with the
// simulator's own key (PSP_URL and PSP_API_KEY, which make bench exports).
type pspAdmin struct {
	url, key string
	hc       *http.Client
}

// faults reads the simulator's fault settings.
func (a *pspAdmin) faults(ctx context.Context) (pspsim.Faults, error) {
	var f pspsim.Faults
	b, err := a.do(ctx, http.MethodGet, nil)
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("simulator faults: %w", err)
	}
	return f, nil
}

// setFaults replaces the simulator's fault settings.
func (a *pspAdmin) setFaults(ctx context.Context, f pspsim.Faults) error {
	body, err := json.Marshal(f)
	if err != nil {
		return err
	}
	_, err = a.do(ctx, http.MethodPut, body)
	return err
}

// setLatency sets the delay of every charge and refund, leaving the other
// settings as they are.
func (a *pspAdmin) setLatency(ctx context.Context, d time.Duration) error {
	f, err := a.faults(ctx)
	if err != nil {
		return err
	}
	f.LatencyMS = int(d.Milliseconds())
	return a.setFaults(ctx, f)
}

func (a *pspAdmin) do(ctx context.Context, method string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(a.url, "/")+"/admin/faults", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("simulator %s /admin/faults: %w", method, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
		return nil, fmt.Errorf("simulator %s /admin/faults: status %d: %s", method, resp.StatusCode, bytes.TrimSpace(b))
	}
	return b, nil
}

// payName is the reported name of a payment scenario at a simulator
// latency.
func payName(sc string, latency time.Duration) string {
	return fmt.Sprintf("%s+%s", sc, latency)
}
