package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// streamEvents is the broker's event stream (internal/broker.StreamEvents),
// named here rather than imported so that a build without the outbox still
// compiles the same package.
const streamEvents = "ONCEPAY_EVENTS"

// openDB opens the run's own pool. Its application_name is not the APIs'
// ("oncepay"), so pg_terminate_backend never hits the observer.
func openDB(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["application_name"] = "oncepay-chaos"
	return pgxpool.NewWithConfig(ctx, cfg)
}

// scanAll runs q and scans every row with scan.
func scanAll[T any](ctx context.Context, db *pgxpool.Pool, q string, scan func(pgx.Rows) (T, error)) ([]T, error) {
	rows, err := db.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", q, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func stock(ctx context.Context, db *pgxpool.Pool) ([]Stock, error) {
	return scanAll(ctx, db, `SELECT t.slug, p.sku, p.stock FROM products p JOIN tenants t ON t.id = p.tenant_id ORDER BY 1, 2`,
		func(r pgx.Rows) (s Stock, err error) { return s, r.Scan(&s.Tenant, &s.SKU, &s.Stock) })
}

// hasTable reports whether the schema has a table (the consumer's tables
// arrive with the outbox migration).
func hasTable(ctx context.Context, db *pgxpool.Pool, name string) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok)
	return ok, err
}

// snapshotDB reads the database part of a History.
func snapshotDB(ctx context.Context, db *pgxpool.Pool) (DBState, error) {
	var s DBState
	var err error
	if s.Orders, err = scanAll(ctx, db, `SELECT o.id::text, t.slug, o.idempotency_key, o.status, o.amount_total
		FROM orders o JOIN tenants t ON t.id = o.tenant_id ORDER BY o.id`,
		func(r pgx.Rows) (o Order, err error) {
			return o, r.Scan(&o.ID, &o.Tenant, &o.Key, &o.Status, &o.AmountTotal)
		}); err != nil {
		return s, err
	}
	if s.OrderItems, err = scanAll(ctx, db, `SELECT order_id::text, sku, quantity FROM order_items ORDER BY order_id, line`,
		func(r pgx.Rows) (i OrderItem, err error) { return i, r.Scan(&i.OrderID, &i.SKU, &i.Quantity) }); err != nil {
		return s, err
	}
	if s.Payments, err = scanAll(ctx, db, `SELECT p.id::text, t.slug, p.order_id::text, p.idempotency_key, p.provider_key,
		p.status, p.amount, coalesce(p.provider_charge_id, ''), p.amount_refunded, p.cancel_requested_at IS NOT NULL
		FROM payments p JOIN tenants t ON t.id = p.tenant_id ORDER BY p.id`,
		func(r pgx.Rows) (p Payment, err error) {
			return p, r.Scan(&p.ID, &p.Tenant, &p.OrderID, &p.Key, &p.ProviderKey, &p.Status, &p.Amount, &p.ChargeID, &p.AmountRefunded, &p.CancelRequested)
		}); err != nil {
		return s, err
	}
	if s.Refunds, err = scanAll(ctx, db, `SELECT r.id::text, t.slug, r.payment_id::text, r.idempotency_key, r.provider_key,
		r.status, r.amount, coalesce(r.provider_refund_id, '')
		FROM refunds r JOIN tenants t ON t.id = r.tenant_id ORDER BY r.id`,
		func(r pgx.Rows) (f Refund, err error) {
			return f, r.Scan(&f.ID, &f.Tenant, &f.PaymentID, &f.Key, &f.ProviderKey, &f.Status, &f.Amount, &f.ProviderRefundID)
		}); err != nil {
		return s, err
	}
	if s.Records, err = scanAll(ctx, db, `SELECT t.slug, i.operation, i.idempotency_key, i.state, coalesce(i.status_code, 0), i.recovery_point
		FROM api_idempotency i JOIN tenants t ON t.id = i.tenant_id ORDER BY 1, 2, 3`,
		func(r pgx.Rows) (c Record, err error) {
			return c, r.Scan(&c.Tenant, &c.Operation, &c.Key, &c.State, &c.Status, &c.Point)
		}); err != nil {
		return s, err
	}
	if s.Events, err = scanAll(ctx, db, `SELECT id::text, event_type, aggregate_id::text, published_at IS NOT NULL FROM outbox_events ORDER BY seq`,
		func(r pgx.Rows) (e Event, err error) { return e, r.Scan(&e.ID, &e.Type, &e.AggregateID, &e.Published) }); err != nil {
		return s, err
	}
	if s.UnprocessedWebhooks, err = scanAll(ctx, db, `SELECT delivery_id FROM webhook_receipts WHERE processed_at IS NULL ORDER BY 1`,
		func(r pgx.Rows) (id string, err error) { return id, r.Scan(&id) }); err != nil {
		return s, err
	}
	if s.StockAfter, err = stock(ctx, db); err != nil {
		return s, err
	}
	if ok, err := hasTable(ctx, db, "processed_messages"); err != nil {
		return s, err
	} else if ok {
		if s.Processed, err = scanAll(ctx, db, `SELECT message_id, subscriber FROM processed_messages ORDER BY 1, 2`,
			func(r pgx.Rows) (p Processed, err error) { return p, r.Scan(&p.MessageID, &p.Subscriber) }); err != nil {
			return s, err
		}
	}
	if ok, err := hasTable(ctx, db, "notifications"); err != nil {
		return s, err
	} else if ok {
		if s.Notifications, err = scanAll(ctx, db, `SELECT order_id::text, kind, event_id::text FROM notifications ORDER BY created_at, id`,
			func(r pgx.Rows) (n Notification, err error) { return n, r.Scan(&n.OrderID, &n.Kind, &n.EventID) }); err != nil {
			return s, err
		}
	}
	return s, nil
}

// getJSON fetches url into out.
func getJSON(ctx context.Context, hc *http.Client, url string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 256<<20))
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", url, res.StatusCode, raw)
	}
	return json.Unmarshal(raw, out)
}

// fetchLedger reads the provider's ledger: every charge and refund it ever
// made.
func fetchLedger(ctx context.Context, hc *http.Client, pspURL string) (Ledger, error) {
	var raw struct {
		Charges []struct {
			ID             string            `json:"id"`
			Amount         int64             `json:"amount"`
			Status         string            `json:"status"`
			Metadata       map[string]string `json:"metadata"`
			IdempotencyKey string            `json:"idempotency_key"`
			AmountRefunded int64             `json:"amount_refunded"`
		} `json:"charges"`
		Refunds []struct {
			ID             string            `json:"id"`
			Charge         string            `json:"charge"`
			Amount         int64             `json:"amount"`
			Status         string            `json:"status"`
			Metadata       map[string]string `json:"metadata"`
			IdempotencyKey string            `json:"idempotency_key"`
		} `json:"refunds"`
	}
	if err := getJSON(ctx, hc, pspURL+"/v1/ledger", &raw); err != nil {
		return Ledger{}, fmt.Errorf("provider ledger: %w", err)
	}
	var l Ledger
	for _, c := range raw.Charges {
		l.Charges = append(l.Charges, Charge{ID: c.ID, Amount: c.Amount, Status: c.Status, Reference: c.Metadata["reference"],
			IdempotencyKey: c.IdempotencyKey, AmountRefunded: c.AmountRefunded})
	}
	for _, r := range raw.Refunds {
		l.Refunds = append(l.Refunds, LedgerRefund{ID: r.ID, Charge: r.Charge, Amount: r.Amount, Status: r.Status,
			Reference: r.Metadata["reference"], IdempotencyKey: r.IdempotencyKey})
	}
	return l, nil
}

// streamStall bounds how long fetchStream waits for the next message.
const streamStall = 30 * time.Second

// jsRequest runs one JetStream API request, each try bounded by wait,
// until one is answered or ctx ends. A request can go
// unanswered: after a server of the cluster was killed, one waited for
// minutes, until the whole run's deadline (2026-12-05).
func jsRequest(ctx context.Context, wait time.Duration, do func(context.Context) error) error {
	for {
		try, cancel := context.WithTimeout(ctx, wait)
		err := do(try)
		cancel()
		if err == nil || ctx.Err() != nil || !(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders)) {
			return err
		}
		if pause(ctx, 250*time.Millisecond) != nil {
			return err
		}
	}
}

// jsRequestWait is how long one try of a JetStream API request waits.
const jsRequestWait = 10 * time.Second

// fetchStream reads every message of the event stream and counts them by
// message id. It is bounded by the stream's size at the start and by ctx.
func fetchStream(ctx context.Context, natsURL string) (*StreamState, error) {
	nc, err := nats.Connect(natsURL, nats.Name("oncepay-chaos"), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("connect to nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	st := &StreamState{MessageIDs: map[string]int{}}
	var stream jetstream.Stream
	err = jsRequest(ctx, jsRequestWait, func(ctx context.Context) (err error) {
		stream, err = js.Stream(ctx, streamEvents)
		return err
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return st, nil // nothing was ever published: every event will be missing
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", streamEvents, err)
	}
	var info *jetstream.StreamInfo
	if err := jsRequest(ctx, jsRequestWait, func(ctx context.Context) (err error) {
		info, err = stream.Info(ctx)
		return err
	}); err != nil {
		return nil, fmt.Errorf("stream %s: %w", streamEvents, err)
	}
	st.Replicas = info.Config.Replicas
	total := info.State.Msgs
	if total == 0 {
		return st, nil
	}
	var cons jetstream.Consumer
	if err := jsRequest(ctx, jsRequestWait, func(ctx context.Context) (err error) {
		cons, err = stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		return err
	}); err != nil {
		return nil, fmt.Errorf("stream %s: %w", streamEvents, err)
	}
	// A fetch may come back empty or fail while the messages are there: on
	// an R3 stream of a loaded machine a 2-second wait ran out after 22,000
	// of 23,909 messages. The read gives up only after streamStall without
	// a message.
	var read uint64
	moved := time.Now()
	for read < total && ctx.Err() == nil {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		n := 0
		if err == nil {
			for m := range batch.Messages() {
				st.MessageIDs[m.Headers().Get(jetstream.MsgIDHeader)]++
				read++
				n++
			}
			err = batch.Error()
		}
		if n > 0 {
			moved = time.Now()
			continue
		}
		if time.Since(moved) > streamStall {
			return nil, fmt.Errorf("read stream %s: %d of %d messages, then nothing for %v (last: %v)", streamEvents, read, total, streamStall, err)
		}
	}
	return st, ctx.Err()
}
