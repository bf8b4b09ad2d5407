package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// duplicates is how many identical requests the concurrency case sends at
// once.
const duplicates = 8

// concurrentDuplicates: identical requests sent at once, an order's and
// then a payment's, execute once: one answer executed, the others wait and
// replay it or are told to come back, and the effect exists once.
func concurrentDuplicates(ctx context.Context, k *kit) error {
	a := k.keys[0]
	marker, _, err := k.createOrder(ctx, a)
	if err != nil {
		return err
	}
	order, err := k.burst(ctx, request{method: http.MethodPost, path: "/v1/orders", apiKey: a, keys: []string{k.key("burst")}, body: k.orderBody(1)})
	if err != nil {
		return fmt.Errorf("orders.create: %w", err)
	}
	// The tenant's orders newest first: the burst made one order after
	// the marker.
	list, err := k.get(ctx, a, "/v1/orders?limit=50")
	if err != nil {
		return err
	}
	if err := want(list, http.StatusOK); err != nil {
		return err
	}
	var orders struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(list.body, &orders); err != nil {
		return fmt.Errorf("%v: %v", list, err)
	}
	var newer []string
	found := false
	for _, o := range orders.Data {
		if o.ID == marker {
			found = true
			break
		}
		newer = append(newer, o.ID)
	}
	if !found {
		return fmt.Errorf("the tenant's newest 50 orders do not reach the order made before the burst: more than one order was made, or another client creates orders for the tenant")
	}
	if len(newer) != 1 || newer[0] != order {
		return fmt.Errorf("%d identical requests made the orders %v, want only %s", duplicates, newer, order)
	}
	if _, err := k.burst(ctx, request{method: http.MethodPost, path: "/v1/orders/" + order + "/payments", apiKey: a, keys: []string{k.key("burst-pay")}, body: payOK}); err != nil {
		return fmt.Errorf("payments.create: %w", err)
	}
	// One live payment per order: a new intent finds it paid.
	x, err := k.post(ctx, a, "/v1/orders/"+order+"/payments", k.key("burst-after"), payOK)
	if err != nil {
		return err
	}
	return wantProblem(x, http.StatusConflict, "order_already_paid")
}

// burst sends r duplicates times at once, settles every 409
// request_in_progress by retrying it after its Retry-After, and checks that
// exactly one answer executed and the others replayed it byte for byte. It
// returns the id in the answer.
func (k *kit) burst(ctx context.Context, r request) (string, error) {
	answers := make([]exchange, duplicates)
	errs := make([]error, duplicates)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range duplicates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i], errs[i] = k.settle(ctx, r)
		}()
	}
	close(start)
	wg.Wait()
	executed := -1
	for i, x := range answers {
		if errs[i] != nil {
			return "", errs[i]
		}
		if err := want(x, http.StatusCreated); err != nil {
			return "", err
		}
		if !x.replayed() {
			if executed >= 0 {
				return "", fmt.Errorf("two of %d identical requests executed: %s and %s", duplicates, answers[executed].body, x.body)
			}
			executed = i
		}
	}
	if executed < 0 {
		return "", fmt.Errorf("all %d identical requests say they are replays: none executed", duplicates)
	}
	for i, x := range answers {
		if i == executed {
			continue
		}
		if err := sameAnswer(answers[executed], x); err != nil {
			return "", err
		}
	}
	return jsonID(answers[executed])
}

// held sends a payment of a fresh order under a fresh key after arming the
// target's hold, in the background; the answer arrives on the channel.
func (k *kit) held(ctx context.Context) (request, <-chan exchangeOrError, error) {
	if k.hold == nil {
		return request{}, nil, notApplicable{k.noHold}
	}
	a := k.keys[0]
	id, _, err := k.createOrder(ctx, a)
	if err != nil {
		return request{}, nil, err
	}
	if err := k.hold(ctx, a); err != nil {
		return request{}, nil, fmt.Errorf("the Hold hook: %w", err)
	}
	r := request{method: http.MethodPost, path: "/v1/orders/" + id + "/payments", apiKey: a, keys: []string{k.key("held")}, body: payOK}
	done := make(chan exchangeOrError, 1)
	go func() {
		x, err := k.do(ctx, r)
		done <- exchangeOrError{x, err}
	}()
	return r, done, nil
}

type exchangeOrError struct {
	x   exchange
	err error
}

// inFlightAnswers409: while a payment is held at the provider, the same
// request under its key is told to come back later.
func inFlightAnswers409(ctx context.Context, k *kit) error {
	r, done, err := k.held(ctx)
	if err != nil {
		return err
	}
	// Duplicates until one meets the held request in flight. One that
	// arrives before the first claimed the key is the held one itself,
	// and then the first is the duplicate: both answers count.
	var answers []exchange
	var first *exchangeOrError
	deadline := time.Now().Add(30 * time.Second)
	for first == nil && time.Now().Before(deadline) {
		dup, err := k.do(ctx, r)
		if err != nil {
			return err
		}
		answers = append(answers, dup)
		if dup.status == http.StatusConflict {
			break
		}
		select {
		case f := <-done:
			first = &f
		default:
		}
	}
	if first == nil {
		f := <-done
		first = &f
	}
	if first.err != nil {
		return first.err
	}
	answers = append(answers, first.x)
	for _, x := range answers {
		if x.status != http.StatusConflict {
			continue
		}
		if err := isProblem(x, "request_in_progress"); err != nil {
			return err
		}
		if _, err := retryAfter(x); err != nil {
			return err
		}
		// The held attempt ended without an outcome: its retry finishes
		// it, so that the run leaves nothing pending.
		end, err := k.settle(ctx, r)
		if err != nil {
			return err
		}
		if err := want(end, http.StatusCreated); err != nil {
			return fmt.Errorf("the retry after the held request ended: %w", err)
		}
		return nil
	}
	return fmt.Errorf("no request met the held one in flight: %d duplicates answered %v, the held one %v (did the Hold hold?)", len(answers)-1, statuses(answers[:len(answers)-1]), first.x)
}

func statuses(xs []exchange) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = x.status
	}
	return out
}

// unknownOutcomeNotStored: a payment whose provider call ended without an
// outcome is 503 with Retry-After, and its retry under the same key
// finishes it instead of replaying the 503.
func unknownOutcomeNotStored(ctx context.Context, k *kit) error {
	r, done, err := k.held(ctx)
	if err != nil {
		return err
	}
	f := <-done
	if f.err != nil {
		return f.err
	}
	if err := wantProblem(f.x, http.StatusServiceUnavailable, "payment_provider_unavailable"); err != nil {
		return fmt.Errorf("the held payment: %w (did the Hold hold?)", err)
	}
	if _, err := retryAfter(f.x); err != nil {
		return err
	}
	retry, err := k.settle(ctx, r)
	if err != nil {
		return err
	}
	if err := want(retry, http.StatusCreated); err != nil {
		return fmt.Errorf("the retry after the 503: %w", err)
	}
	var p struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(retry.body, &p); err != nil || p.Status != "succeeded" {
		return fmt.Errorf("the retry after the 503: %v, want a succeeded payment", retry)
	}
	again, err := k.do(ctx, r)
	if err != nil {
		return err
	}
	return sameAnswer(retry, again)
}
