package pspsim

import (
	"bytes"
	"container/heap"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// maxReceiverBody bounds how much of a webhook receiver's answer is read
// before the connection is reused.
const maxReceiverBody = 64 << 10

// DeliveryStats is a snapshot of webhook delivery progress. It exists so
// tests can wait for deliveries to finish by polling instead of sleeping.
type DeliveryStats struct {
	// Events is the number of events created since start.
	Events int `json:"events"`
	// Pending counts deliveries (duplicates included) not yet acknowledged
	// with a 2xx nor abandoned; zero means the merchant has heard everything
	// it ever will.
	Pending int `json:"pending"`
	// Attempts counts HTTP delivery attempts, retries included.
	Attempts int `json:"attempts"`
	// Succeeded counts deliveries acknowledged with a 2xx.
	Succeeded int `json:"succeeded"`
	// Abandoned counts deliveries given up after WebhookMaxAttempts.
	Abandoned int `json:"abandoned"`
}

// webhookState is the delivery queue, guarded by Server.mu.
type webhookState struct {
	// incoming holds events not yet released to the queue; the reorder
	// fault reverses each released batch.
	incoming []*outEvent
	// queue holds deliveries ordered by due time, then sequence.
	queue   deliveryHeap
	seq     uint64
	running bool
	stats   DeliveryStats
}

// outEvent is one event as it will be sent: its body is fixed at creation so
// retries and duplicates are byte-identical.
type outEvent struct {
	msgID  string
	typ    string
	body   []byte
	copies int
}

// delivery is one copy of an event on its way to the merchant.
type delivery struct {
	ev       *outEvent
	attempts int
	due      time.Time
	seq      uint64
}

// deliveryHeap is a container/heap of deliveries, earliest due first.
type deliveryHeap []*delivery

func (h deliveryHeap) Len() int { return len(h) }
func (h deliveryHeap) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].seq < h[j].seq
}
func (h deliveryHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *deliveryHeap) Push(x any)   { *h = append(*h, x.(*delivery)) }
func (h *deliveryHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return d
}

// SignWebhook returns the Standard Webhooks signature "v1,<base64 of
// HMAC-SHA256(secret, msgID.timestamp.body)>". It is exported so merchant
// tests can forge correctly (and incorrectly) signed webhooks; secret is the
// decoded key from ParseWebhookSecret.
func SignWebhook(secret []byte, msgID string, timestamp int64, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(msgID))
	mac.Write([]byte{'.'})
	mac.Write([]byte(strconv.FormatInt(timestamp, 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Deliveries returns a snapshot of webhook delivery progress.
func (s *Server) Deliveries() DeliveryStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.webhooks.stats
}

// enqueueEventLocked creates an event for the merchant, when webhooks are
// configured. The duplicate count is fixed now, from the faults in force
// when the charge or refund happened. s.mu must be held.
func (s *Server) enqueueEventLocked(typ string, charge Charge, refund *Refund) {
	if s.webhookURL == "" {
		return
	}
	ev := event{
		ID:      newID("evt_"),
		Type:    typ,
		Created: s.now().Unix(),
		Data:    eventData{Object: charge, Refund: refund},
	}
	out := &outEvent{msgID: newID("msg_"), typ: typ, body: mustJSON(ev), copies: 1 + s.faults.WebhookDuplicates}
	s.webhooks.incoming = append(s.webhooks.incoming, out)
	s.webhooks.stats.Events++
	s.webhooks.stats.Pending += out.copies
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run delivers webhooks until ctx is cancelled, then returns nil. Only one
// Run may be active per Server (ErrAlreadyRunning otherwise). Without a
// webhook URL nothing is queued, so it simply waits for ctx (or for a URL
// set later and the events that follow). Deliveries still pending when ctx
// ends stay queued for a later Run; no goroutine outlives the call.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.webhooks.running {
		s.mu.Unlock()
		return ErrAlreadyRunning
	}
	s.webhooks.running = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.webhooks.running = false
		s.mu.Unlock()
	}()

	s.mu.Lock()
	url := s.webhookURL
	s.mu.Unlock()
	s.log.Info("webhook delivery started", "url", url, "secrets", len(s.secrets))
	for ctx.Err() == nil {
		if !s.releaseBatch(ctx) {
			break
		}
		d, wait := s.nextDelivery(time.Now())
		if d != nil {
			s.attempt(ctx, d)
			continue
		}
		if !s.idle(ctx, wait) {
			break
		}
	}
	if s.ownClient {
		s.client.CloseIdleConnections()
	}
	s.log.Info("webhook delivery stopped", "pending", s.Deliveries().Pending)
	return nil
}

// releaseBatch moves incoming events to the delivery queue. With the reorder
// fault on, it first waits WebhookBatchWindow so events created close
// together form one batch, then queues the batch in reverse. It returns
// false if ctx ended while waiting.
func (s *Server) releaseBatch(ctx context.Context) bool {
	s.mu.Lock()
	if len(s.webhooks.incoming) == 0 {
		s.mu.Unlock()
		return true
	}
	reorder := s.faults.WebhookReorder
	s.mu.Unlock()

	if reorder {
		t := time.NewTimer(s.cfg.WebhookBatchWindow)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	batch := s.webhooks.incoming
	s.webhooks.incoming = nil
	if reorder {
		slices.Reverse(batch)
	}
	now := time.Now()
	for _, ev := range batch {
		for range ev.copies {
			s.webhooks.seq++
			heap.Push(&s.webhooks.queue, &delivery{ev: ev, due: now, seq: s.webhooks.seq})
		}
	}
	return true
}

// nextDelivery pops the earliest delivery that is due, or reports how long
// until one is (negative: the queue is empty).
func (s *Server) nextDelivery(now time.Time) (*delivery, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := &s.webhooks.queue
	if q.Len() == 0 {
		return nil, -1
	}
	if next := (*q)[0]; next.due.After(now) {
		return nil, next.due.Sub(now)
	}
	return heap.Pop(q).(*delivery), 0
}

// idle waits for new events, the next due delivery, or ctx. It returns false
// when ctx ended.
func (s *Server) idle(ctx context.Context, wait time.Duration) bool {
	var timeout <-chan time.Time
	if wait >= 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-s.wake:
	case <-timeout:
	}
	return true
}

// attempt sends one delivery and records the outcome: done on 2xx,
// rescheduled with exponential backoff otherwise, abandoned after
// WebhookMaxAttempts. An attempt cut short by shutdown is requeued as is.
func (s *Server) attempt(ctx context.Context, d *delivery) {
	ts := s.now().Unix()
	sigs := make([]string, len(s.secrets))
	for i, secret := range s.secrets {
		sigs[i] = SignWebhook(secret, d.ev.msgID, ts, d.ev.body)
	}
	status, err := s.post(ctx, d.ev, ts, strings.Join(sigs, " "))

	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil && ctx.Err() != nil {
		heap.Push(&s.webhooks.queue, d)
		return
	}
	st := &s.webhooks.stats
	st.Attempts++
	d.attempts++
	attrs := []any{"webhook_id", d.ev.msgID, "type", d.ev.typ, "attempt", d.attempts, "status", status}
	if err != nil {
		attrs = append(attrs, "err", err.Error())
	}
	switch {
	case err == nil && status >= 200 && status < 300:
		st.Succeeded++
		st.Pending--
		s.log.Debug("webhook delivered", attrs...)
	case d.attempts >= s.cfg.WebhookMaxAttempts:
		st.Abandoned++
		st.Pending--
		s.log.Warn("webhook abandoned", attrs...)
	default:
		delay := s.backoff(d.attempts)
		d.due = time.Now().Add(delay)
		s.webhooks.seq++
		d.seq = s.webhooks.seq
		heap.Push(&s.webhooks.queue, d)
		s.log.Info("webhook not acknowledged; will retry", append(attrs, "retry_in", delay.String())...)
	}
}

// backoff is WebhookBackoffBase doubled per previous attempt, capped at
// WebhookBackoffMax.
func (s *Server) backoff(attempts int) time.Duration {
	d := s.cfg.WebhookBackoffBase
	for i := 1; i < attempts && d < s.cfg.WebhookBackoffMax; i++ {
		d *= 2
	}
	return min(d, s.cfg.WebhookBackoffMax)
}

// post performs one signed HTTP delivery and returns the receiver's status.
func (s *Server) post(ctx context.Context, ev *outEvent, ts int64, signature string) (int, error) {
	s.mu.Lock()
	url := s.webhookURL
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.WebhookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(ev.body))
	if err != nil {
		return 0, fmt.Errorf("build webhook request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "oncepay-pspsim/1")
	req.Header.Set("webhook-id", ev.msgID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", signature)
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("deliver webhook %s: %w", ev.msgID, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxReceiverBody))
	return resp.StatusCode, nil
}
