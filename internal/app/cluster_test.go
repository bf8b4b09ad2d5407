package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/broker/brokertest"
	"github.com/oncepay/oncepay/internal/fulfillment"
	"github.com/oncepay/oncepay/internal/testkit"
)

// clusterLoad creates orders and pays them, one after the other, until it
// is stopped: the load a server of the cluster is lost under. It runs on a
// goroutine of its own and reports instead of failing the test.
type clusterLoad struct {
	b    *testBundle
	stop chan struct{}
	done chan struct{}

	mu     sync.Mutex
	orders []string // paid, in order
	err    error
}

func startClusterLoad(b *testBundle) *clusterLoad {
	l := &clusterLoad{b: b, stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l
}

// maxClusterOrders bounds the load, so a test that waits in vain does not
// fill the database meanwhile.
const maxClusterOrders = 500

func (l *clusterLoad) run() {
	defer close(l.done)
	for i := 0; i < maxClusterOrders; i++ {
		select {
		case <-l.stop:
			return
		default:
		}
		orderID, err := l.post("/v1/orders", fmt.Sprintf("cluster-order-%d", i), orderBody)
		if err == nil {
			_, err = l.post("/v1/orders/"+orderID+"/payments", fmt.Sprintf("cluster-pay-%d", i), `{"payment_method":"pm_card_ok"}`)
		}
		l.mu.Lock()
		if err != nil {
			l.err = err
			l.mu.Unlock()
			return
		}
		l.orders = append(l.orders, orderID)
		l.mu.Unlock()
	}
}

// post sends one create and returns the id it answered with. The broker is
// on no request's path: every answer must be 201, whatever the cluster does.
func (l *clusterLoad) post(path, key, body string) (string, error) {
	req, err := http.NewRequest("POST", l.b.baseURL+path, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+acme)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	res, err := l.b.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("POST %s: %w", path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return "", err
	}
	var created struct {
		ID string `json:"id"`
	}
	if res.StatusCode != http.StatusCreated || json.Unmarshal(raw, &created) != nil || created.ID == "" {
		return "", fmt.Errorf("POST %s: %d %s", path, res.StatusCode, raw)
	}
	return created.ID, nil
}

// paid returns the orders paid so far, failing the test if the load failed.
func (l *clusterLoad) paid(t *testing.T) []string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		t.Fatalf("load: %v", l.err)
	}
	return append([]string(nil), l.orders...)
}

// waitPaid waits until at least n orders are paid.
func (l *clusterLoad) waitPaid(t *testing.T, n int, what string) {
	t.Helper()
	testkit.WaitFor(t, 60*time.Second, fmt.Sprintf("%d orders paid %s", n, what), func() bool { return len(l.paid(t)) >= n })
}

func (l *clusterLoad) end(t *testing.T) []string {
	t.Helper()
	close(l.stop)
	<-l.done
	return l.paid(t)
}

// The event stream on a three-server JetStream cluster (NATS_URL listing the
// three, the token written once; NATS_STREAM_REPLICAS=3), with the server
// that leads the stream shut down while orders are created and paid, and
// started again. Proven:
//   - the stream is R3, and so is the fulfillment consumer;
//   - while the server is down, the orders paid meanwhile have their events
//     published and consumed, and are fulfilled: the two servers left carry
//     the flow (with one replica the stream would be gone with its server);
//   - once it is back: every outbox event is published and none stuck, the
//     stream holds every one of them (no event lost), every payment.succeeded
//     is in the fulfillment consumer's inbox and fulfilled its order exactly
//     once (one receipt each), and the provider charged each payment once.
func TestEventsFlowThroughAClusterThatLosesAServer(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t) // before setup: stopped after the service
	b := setup(t, func(cfg *app.Config) {
		cfg.NATSURL = c.URL()
		cfg.NATSStreamReplicas = 3
		cfg.Tuning.NATSPingInterval = 250 * time.Millisecond
		cfg.Tuning.OutboxPollInterval = 200 * time.Millisecond
		cfg.Tuning.OutboxPublishTimeout = 2 * time.Second
		cfg.Tuning.OutboxLease = 6 * time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, js := brokertest.Connect(t, c.URL(), testkit.Logger(t))
	stream, err := js.Stream(ctx, broker.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("stream %s: %d replicas configured, cluster %+v; want 3", broker.StreamEvents, info.Config.Replicas, info.Cluster)
	}
	cons, err := js.Consumer(ctx, broker.StreamEvents, fulfillment.Subscriber)
	if err != nil {
		t.Fatal(err)
	}
	if ci, err := cons.Info(ctx); err != nil || ci.Cluster == nil || len(ci.Cluster.Replicas) != 2 {
		t.Fatalf("consumer %s: %v, cluster %+v; want 3 replicas, as the stream's", fulfillment.Subscriber, err, ci)
	}
	leader := c.Index(info.Cluster.Leader)
	if leader < 0 {
		t.Fatalf("stream leader %q is not a server of the cluster", info.Cluster.Leader)
	}

	fulfilled := func(orders []string) func() bool {
		return func() bool {
			return b.count(t, `SELECT count(*) FROM orders WHERE id = ANY($1::uuid[]) AND status = 'fulfilled'`, orders) == len(orders)
		}
	}
	load := startClusterLoad(b)
	load.waitPaid(t, 5, "before the outage")

	c.Stop(leader)
	stopped := time.Now()
	before := len(load.paid(t))
	load.waitPaid(t, before+5, "with the stream's leader down")
	during := load.paid(t)[before:]
	testkit.WaitFor(t, 60*time.Second, "the orders paid during the outage to be fulfilled through the two servers left", fulfilled(during))
	if c.Server(leader) != nil {
		t.Fatal("the server came back before the check")
	}

	outage := time.Since(stopped)
	c.Start(t, leader)
	c.WaitReady(t, 60*time.Second)
	rejoined := time.Since(stopped) - outage
	after := len(load.paid(t))
	load.waitPaid(t, after+5, "after the server came back")
	orders := load.end(t)
	t.Logf("%d orders paid: %d before the outage, %d during (%d fulfilled during it, %v), %d after; the server rejoined in %v",
		len(orders), before, after-before, len(during), outage.Round(time.Millisecond), len(orders)-after, rejoined.Round(time.Millisecond))

	// Settled: every event published, none stuck, every order fulfilled.
	testkit.WaitFor(t, 60*time.Second, "every event published", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox_events WHERE published_at IS NULL OR stuck_at IS NOT NULL`) == 0
	})
	testkit.WaitFor(t, 60*time.Second, "every order fulfilled", fulfilled(orders))

	// No event lost: the stream holds every outbox event's id.
	ids := map[string]int{} // event id -> copies in the stream
	rows, err := b.pool.Query(ctx, `SELECT id::text FROM outbox_events`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[id] = 0
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	info, err = stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("stream message %d: %v", seq, err)
		}
		if id := m.Header.Get(jetstream.MsgIDHeader); id != "" {
			if _, ours := ids[id]; ours {
				ids[id]++
			}
		}
	}
	missing := 0
	for id, n := range ids {
		if n == 0 {
			missing++
			t.Errorf("event %s is not in the stream", id)
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d events lost", missing, len(ids))
	}

	// Consumed exactly once: each payment.succeeded in the inbox, one
	// receipt per order; charged once per payment.
	payments := b.count(t, `SELECT count(*) FROM outbox_events WHERE event_type = 'payment.succeeded'`)
	if payments != len(orders) {
		t.Fatalf("%d payment.succeeded events for %d paid orders", payments, len(orders))
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_events e JOIN processed_messages m ON m.tenant_id = e.tenant_id AND m.message_id = e.id::text AND m.subscriber = 'fulfillment'
		WHERE e.event_type = 'payment.succeeded'`); n != payments {
		t.Fatalf("%d of %d payment.succeeded events in the fulfillment inbox", n, payments)
	}
	if n := b.count(t, `SELECT count(*) FROM (SELECT order_id FROM notifications WHERE kind = 'receipt' GROUP BY order_id HAVING count(*) = 1) o
		WHERE o.order_id = ANY($1::uuid[])`, orders); n != len(orders) {
		t.Fatalf("%d of %d orders have exactly one receipt", n, len(orders))
	}
	if n := b.count(t, `SELECT count(*) FROM notifications WHERE kind = 'receipt'`); n != len(orders) {
		t.Fatalf("%d receipts for %d orders", n, len(orders))
	}
	rows, err = b.pool.Query(ctx, `SELECT id::text FROM payments`)
	if err != nil {
		t.Fatal(err)
	}
	var paymentIDs []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		paymentIDs = append(paymentIDs, id)
	}
	rows.Close()
	for _, id := range paymentIDs {
		if n := b.charges(t, id); n != 1 {
			t.Fatalf("payment %s charged %d times, want 1", id, n)
		}
	}
	if n := b.allCharges(); n != len(orders) {
		t.Fatalf("the provider made %d charges for %d orders", n, len(orders))
	}

	// The stream is still R3, the restarted server caught up.
	testkit.WaitFor(t, 30*time.Second, "the stream on three current replicas", func() bool {
		info, err := stream.Info(ctx)
		if err != nil || info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			return false
		}
		for _, p := range info.Cluster.Replicas {
			if !p.Current || p.Offline {
				return false
			}
		}
		return true
	})
}

// A replica configured with fewer stream replicas than the stream has is
// refused at once, with the line that says what to set: Start retries a
// stream declaration that got no answer, never one the broker refused.
func TestStartupRefusesFewerStreamReplicasAtOnce(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t)
	cfg := testConfig(t)
	cfg.NATSURL = c.URL()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, js := brokertest.Connect(t, c.URL(), testkit.Logger(t))
	if err := broker.EnsureStreams(ctx, js, broker.StreamsConfig{DuplicateWindow: cfg.Tuning.NATSDuplicateWindow, MaxAge: 7 * 24 * time.Hour, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	_, cfg.PSPURL = startSimulator(t, cfg, nil, testkit.Logger(t), time.Now)
	a, err := app.New(cfg, testkit.Logger(t), time.Now) // NATS_STREAM_REPLICAS 1, the default
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	t.Cleanup(a.Close)
	began := time.Now()
	err = a.Start(ctx)
	if !errors.Is(err, broker.ErrFewerReplicas) || !strings.Contains(err.Error(), "NATS_STREAM_REPLICAS=3") {
		t.Fatalf("start against an R3 stream with NATS_STREAM_REPLICAS=1: %v, want ErrFewerReplicas naming NATS_STREAM_REPLICAS=3", err)
	}
	// At once: the first attempt's answer, not the startup timeout (a minute).
	if took := time.Since(began); took > cfg.Tuning.StartupTimeout/2 {
		t.Fatalf("refused after %v: the refusal was retried", took)
	}
}
