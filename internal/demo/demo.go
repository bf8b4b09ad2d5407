// Package demo owns the endpoints that exist only in demo mode
// (DEMO_MODE=true): what the web UI needs to make the brief's failure drills
// visible to a person, and the chaos that provokes them on purpose.
//
//   - GET  /demo: whether demo mode is on, the demo tenants and what chaos
//     this build offers (no API key needed: the demo keys are public).
//   - GET  /demo/orders/{id}/payments: every payment attempt of an order,
//     its refunds, and how often the provider really charged it, read from
//     the payment simulator's ledger over HTTP (the ground truth of "charged
//     once").
//   - GET, PUT /demo/faults: arm the simulator's one-shot faults for the
//     tenant's next calls (a timeout, a 5xx, or a charge whose answer is
//     dropped), through its admin API. They are the tenant's own: only its
//     charges and refunds meet them (the simulator scopes them by the
//     tenant_id every charge carries), so one tenant cannot break another's
//     payments.
//
// The simulator is reached like any provider, at PSP_URL with PSP_API_KEY
// (Simulator); when the provider is not a simulator, charge counts are null
// and faults cannot be armed.
//   - POST /demo/events/{id}/replay: an operator's republish of an outbox
//     event, through a function injected at construction.
//   - the X-Demo-Chaos request header (Handler.Chaos): "lose-response" runs
//     the request to its end, then closes the connection unanswered, so the
//     client sees a commit whose response never arrived, and its retry
//     gets the replay.
//
// They exist only in demo mode because they reveal internals (the provider's
// ledger, idempotency keys) and let a caller break the provider on purpose;
// a production service must offer neither. Outside demo mode every one of
// them answers 404 not_found, exactly like a route that does not exist, so
// nothing about them is revealed; a request that carries X-Demo-Chaos is
// refused with the same 404 before it executes, so nobody believes they
// tested a lost response that was in fact delivered.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/wire"
)

// ReplayFunc republishes one outbox event, as an operator would: consumers
// receive the same message id again and must ignore it (their inbox).
type ReplayFunc func(ctx context.Context, eventID uuid.UUID) error

// Handler serves the demo endpoints and the chaos middleware.
type Handler struct {
	enabled  bool
	pool     *pgxpool.Pool
	orders   *orders.Service
	payments *payments.Service
	sim      *Simulator
	replay   ReplayFunc
	logger   *slog.Logger
	now      func() time.Time

	replayEvery time.Duration
	replayBurst int
	replays     *tenantLimiter
}

// HandlerOption configures a Handler.
type HandlerOption func(*Handler)

// WithDemoMode turns the demo endpoints and the chaos header on when
// enabled is true: the service's demo mode (DEMO_MODE). The default is off:
// every endpoint answers 404 and Chaos refuses its header.
func WithDemoMode(enabled bool) HandlerOption {
	return func(h *Handler) { h.enabled = enabled }
}

// WithSimulator reaches the payment provider's ledger and faults through
// sim, when the provider is the simulator. The default is none (no provider
// to ask): charge counts are null and faults unavailable.
func WithSimulator(sim *Simulator) HandlerOption {
	return func(h *Handler) { h.sim = sim }
}

// WithReplay republishes outbox events with replay for POST
// /demo/events/{id}/replay. The default is none: GET /demo hides the replay
// control and the endpoint answers 404.
func WithReplay(replay ReplayFunc) HandlerOption {
	return func(h *Handler) { h.replay = replay }
}

// WithReplayLimit bounds each tenant's POST /demo/events/{id}/replay to a
// burst of burst, then one more every every (default DefaultReplayBurst, 5,
// and DefaultReplayEvery, 1s); past it the answer is 429 rate_limited with
// Retry-After. Each replay republishes an event to the broker, which no
// tenant may flood.
func WithReplayLimit(every time.Duration, burst int) HandlerOption {
	return func(h *Handler) { h.replayEvery, h.replayBurst = every, burst }
}

// NewHandler returns the demo handler, off unless WithDemoMode turns it on.
// The handler owns no table: it reads orders through orderSvc, payments and
// refunds through paySvc and events through the outbox, on pool. now is the
// clock of the replay limit.
func NewHandler(pool *pgxpool.Pool, orderSvc *orders.Service, paySvc *payments.Service, logger *slog.Logger, now func() time.Time, opts ...HandlerOption) *Handler {
	h := &Handler{pool: pool, orders: orderSvc, payments: paySvc, logger: logger, now: now,
		replayEvery: DefaultReplayEvery, replayBurst: DefaultReplayBurst}
	for _, o := range opts {
		o(h)
	}
	h.replays = newTenantLimiter(h.replayEvery, h.replayBurst, now)
	return h
}

// paymentMethods are the simulator's test cards, which the demo UI offers:
// one that succeeds and two that are declined.
var paymentMethods = []string{"pm_card_ok", "pm_card_declined", "pm_card_insufficient_funds"}

// errDisabled is the answer of every demo endpoint outside demo mode: the
// same 404 as a route that does not exist.
func errDisabled() error {
	return problem.New(problem.NotFound, "No such resource. The demo endpoints exist only in demo mode (DEMO_MODE=true).")
}

// Gate answers every request with the 404 of errDisabled outside demo mode,
// before anything else of the route runs: mounted in front of the API-key
// check, it makes a demo endpoint without a key answer 404 like a route
// that does not exist, not 401 (which would say that it does). In demo
// mode it passes every request on.
func (h *Handler) Gate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !h.enabled {
			return errDisabled()
		}
		return next(c)
	}
}

type tenantJSON struct {
	Slug   string `json:"slug"`
	Name   string `json:"name"`
	APIKey string `json:"api_key"`
}

type chaosJSON struct {
	// LoseResponse: the X-Demo-Chaos: lose-response header works.
	LoseResponse bool `json:"lose_response"`
	// ProviderFaults: PUT /demo/faults works (the provider is a simulator
	// that answers its admin API).
	ProviderFaults bool `json:"provider_faults"`
	// EventReplay: POST /demo/events/{id}/replay works.
	EventReplay bool `json:"event_replay"`
}

type statusJSON struct {
	DemoMode       bool         `json:"demo_mode"`
	Tenants        []tenantJSON `json:"tenants"`
	PaymentMethods []string     `json:"payment_methods"`
	Chaos          chaosJSON    `json:"chaos"`
}

// Status handles GET /demo. It needs no API key: it names the demo tenants
// and their well-known keys, which the README prints anyway. Whether
// provider faults work is asked of the provider itself, each time.
func (h *Handler) Status(c echo.Context) error {
	if !h.enabled {
		return errDisabled()
	}
	out := statusJSON{
		DemoMode:       true,
		PaymentMethods: paymentMethods,
		Chaos:          chaosJSON{LoseResponse: true, ProviderFaults: h.providerFaults(c.Request().Context()), EventReplay: h.replay != nil},
	}
	for _, t := range tenants.DemoTenants() {
		out.Tenants = append(out.Tenants, tenantJSON{Slug: t.Slug, Name: t.Name, APIKey: t.APIKey})
	}
	return wire.JSON(c, http.StatusOK, out)
}

// providerJSON is what the provider's ledger says about one payment.
type providerJSON struct {
	ChargesSucceeded int   `json:"charges_succeeded"`
	ChargesFailed    int   `json:"charges_failed"`
	Refunds          int   `json:"refunds"`
	AmountRefunded   int64 `json:"amount_refunded"`
}

type paymentJSON struct {
	ID               uuid.UUID     `json:"id"`
	Status           string        `json:"status"`
	Amount           int64         `json:"amount"`
	Currency         string        `json:"currency"`
	PaymentMethod    string        `json:"payment_method"`
	IdempotencyKey   string        `json:"idempotency_key"`
	ProviderChargeID *string       `json:"provider_charge_id"`
	FailureCode      *string       `json:"failure_code"`
	AmountRefunded   int64         `json:"amount_refunded"`
	CreatedAt        time.Time     `json:"created_at"`
	UpdatedAt        time.Time     `json:"updated_at"`
	Provider         *providerJSON `json:"provider"`
}

type refundJSON struct {
	ID               uuid.UUID `json:"id"`
	PaymentID        uuid.UUID `json:"payment_id"`
	Status           string    `json:"status"`
	Amount           int64     `json:"amount"`
	IdempotencyKey   string    `json:"idempotency_key"`
	ProviderRefundID *string   `json:"provider_refund_id"`
	CreatedAt        time.Time `json:"created_at"`
}

type orderPaymentsJSON struct {
	OrderID     uuid.UUID `json:"order_id"`
	OrderStatus string    `json:"order_status"`
	AmountTotal int64     `json:"amount_total"`
	Currency    string    `json:"currency"`
	// Charged counts the provider's succeeded charges over all of the
	// order's payments: 1 for a paid order, whatever the network did. It
	// is null when the provider's ledger cannot be read (it is no
	// simulator, or it did not answer).
	Charged  *int          `json:"charged"`
	Payments []paymentJSON `json:"payments"`
	Refunds  []refundJSON  `json:"refunds"`
}

// OrderPayments handles GET /demo/orders/{id}/payments: the order's payment
// attempts and refunds from our database, each payment with what the
// provider's ledger holds for it (looked up by our payment id, the
// reference every charge carries).
func (h *Handler) OrderPayments(c echo.Context) error {
	if !h.enabled {
		return errDisabled()
	}
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return problem.New(problem.NotFound, "No such order.")
	}
	ctx := c.Request().Context()
	tenantID := tenants.FromContext(c).ID
	var (
		order orders.Order
		pays  []payments.Payment
		refs  []payments.Refund
	)
	err = postgres.InTx(ctx, h.pool, func(tx pgx.Tx) error {
		// One read-only snapshot, so the order, its payments and its
		// refunds agree with each other.
		if _, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
		var err error
		if order, err = h.orders.GetTx(ctx, tx, tenantID, id); err != nil {
			return err
		}
		if pays, err = h.payments.PaymentsOfOrder(ctx, tx, tenantID, id); err != nil {
			return err
		}
		refs, err = h.payments.RefundsOfOrder(ctx, tx, tenantID, id)
		return err
	})
	if errors.Is(err, orders.ErrNotFound) {
		return problem.New(problem.NotFound, "No such order.")
	}
	if err != nil {
		return fmt.Errorf("demo order payments: %w", err)
	}

	out := orderPaymentsJSON{
		OrderID: order.ID, OrderStatus: string(order.Status), AmountTotal: order.AmountTotal, Currency: order.Currency,
		Payments: make([]paymentJSON, 0, len(pays)), Refunds: make([]refundJSON, 0, len(refs)),
	}
	charged, counted := 0, h.sim != nil
	for _, p := range pays {
		pj := paymentJSON{
			ID: p.ID, Status: string(p.Status), Amount: p.Amount, Currency: p.Currency, PaymentMethod: p.PaymentMethod,
			IdempotencyKey: p.IdempotencyKey, ProviderChargeID: p.ProviderChargeID, FailureCode: p.FailureCode,
			AmountRefunded: p.AmountRefunded, CreatedAt: p.CreatedAt.UTC(), UpdatedAt: p.UpdatedAt.UTC(),
		}
		if counted {
			l, err := h.sim.ledger(ctx, p.ID.String())
			if err != nil {
				// The count is null rather than wrong: one payment
				// unread would make a paid order look uncharged.
				h.logSimulatorError(ctx, "demo: provider ledger not read", err)
				counted = false
			} else {
				pj.Provider = ledgerOf(l)
				charged += pj.Provider.ChargesSucceeded
			}
		}
		out.Payments = append(out.Payments, pj)
	}
	if counted {
		out.Charged = &charged
	}
	for _, r := range refs {
		out.Refunds = append(out.Refunds, refundJSON{
			ID: r.ID, PaymentID: r.PaymentID, Status: string(r.Status), Amount: r.Amount,
			IdempotencyKey: r.IdempotencyKey, ProviderRefundID: r.ProviderRefundID, CreatedAt: r.CreatedAt.UTC(),
		})
	}
	return wire.JSON(c, http.StatusOK, out)
}

// ledgerOf summarises the simulator's ledger for one reference.
func ledgerOf(l simLedger) *providerJSON {
	out := &providerJSON{}
	for _, ch := range l.Charges {
		switch ch.Status {
		case simSucceeded:
			out.ChargesSucceeded++
		case simFailed:
			out.ChargesFailed++
		}
	}
	for _, r := range l.Refunds {
		if r.Status == simSucceeded {
			out.Refunds++
			out.AmountRefunded += r.Amount
		}
	}
	return out
}

// MaxFaultsNext bounds each one-shot fault counter of PUT /demo/faults.
const MaxFaultsNext = 5

// faultsJSON is the body of PUT /demo/faults and the answer of both fault
// endpoints: the simulator's one-shot counters. Each makes that many of the
// provider's next calls fail in one way.
type faultsJSON struct {
	// TimeoutNext: the provider charges, then hangs until our client gives
	// up (PSP_TIMEOUT). Our answer is 503; the retry finds the charge.
	TimeoutNext *int `json:"timeout_next"`
	// FailNext: the provider answers 503 before charging. Our answer is
	// 503; the retry charges.
	FailNext *int `json:"fail_next"`
	// DropNext: the provider charges, then drops the connection. Our answer
	// is 503; the retry finds the charge.
	DropNext *int `json:"drop_next"`
}

// The simulator's fault members behind faultsJSON.
const (
	faultTimeoutNext = "timeout_next"
	faultFailNext    = "fail_next"
	faultDropNext    = "drop_next"
)

func faultsJSONFrom(f simFaults) faultsJSON {
	timeout, fail, drop := f.count(faultTimeoutNext), f.count(faultFailNext), f.count(faultDropNext)
	return faultsJSON{TimeoutNext: &timeout, FailNext: &fail, DropNext: &drop}
}

// Faults handles GET /demo/faults: the tenant's one-shot faults still armed.
func (h *Handler) Faults(c echo.Context) error {
	f, err := h.simFaults(c.Request().Context(), faultScope(c))
	if err != nil {
		return err
	}
	return wire.JSON(c, http.StatusOK, faultsJSONFrom(f))
}

// SetFaults handles PUT /demo/faults: it sets the tenant's one-shot counters
// named in the body (0 to MaxFaultsNext; absent ones keep their value). No
// other tenant's counters, and none of the simulator's global settings,
// change. Setting a counter is idempotent: PUT the same body twice and one
// fault is armed, not two.
func (h *Handler) SetFaults(c echo.Context) error {
	if !h.enabled {
		return errDisabled()
	}
	body, err := wire.ReadBody(c.Request())
	if err != nil {
		return err
	}
	var in faultsJSON
	if err := wire.Decode(body, &in); err != nil {
		return err
	}
	var fields []problem.FieldError
	for _, f := range []struct {
		name string
		v    *int
	}{{"timeout_next", in.TimeoutNext}, {"fail_next", in.FailNext}, {"drop_next", in.DropNext}} {
		if f.v != nil && (*f.v < 0 || *f.v > MaxFaultsNext) {
			fields = append(fields, problem.FieldError{Field: f.name, Message: fmt.Sprintf("must be between 0 and %d", MaxFaultsNext)})
		}
	}
	if len(fields) > 0 {
		return problem.Validation(fields...)
	}
	// Read-modify-write of the simulator's settings: two concurrent PUTs may
	// interleave, which a demo accepts; the simulator's own lock keeps each
	// call consistent.
	ctx, scope := c.Request().Context(), faultScope(c)
	f, err := h.simFaults(ctx, scope)
	if err != nil {
		return err
	}
	for name, v := range map[string]*int{faultTimeoutNext: in.TimeoutNext, faultFailNext: in.FailNext, faultDropNext: in.DropNext} {
		if v != nil {
			f[name] = json.RawMessage(strconv.Itoa(*v))
		}
	}
	if f, err = h.sim.setFaults(ctx, scope, f); err != nil {
		return fmt.Errorf("demo faults: %w", err)
	}
	out := faultsJSONFrom(f)
	h.logger.InfoContext(ctx, "demo: provider faults armed",
		"timeout_next", *out.TimeoutNext, "fail_next", *out.FailNext, "drop_next", *out.DropNext)
	return wire.JSON(c, http.StatusOK, out)
}

// faultScope is the scope of the request's tenant at the simulator: the
// tenant_id its charges and refunds carry.
func faultScope(c echo.Context) string { return tenants.FromContext(c).ID.String() }

// simFaults reads the faults of scope for the fault endpoints: 404 outside
// demo mode, and when the provider is no simulator that answers us.
func (h *Handler) simFaults(ctx context.Context, scope string) (simFaults, error) {
	if !h.enabled {
		return nil, errDisabled()
	}
	if h.sim == nil {
		return nil, problem.New(problem.NotFound, "Provider faults need the payment simulator; no provider is configured.")
	}
	f, err := h.sim.faults(ctx, scope)
	if errors.Is(err, errNotSimulator) {
		h.logSimulatorError(ctx, "demo: provider faults not available", err)
		return nil, problem.New(problem.NotFound, "Provider faults need the payment simulator; the provider at PSP_URL does not offer them.")
	}
	if err != nil {
		return nil, fmt.Errorf("demo faults: %w", err)
	}
	return f, nil
}

// providerFaults reports whether the provider is a simulator that answers
// its admin API with our key, with faults it can scope to one tenant (asked
// for the empty scope, which no charge carries).
func (h *Handler) providerFaults(ctx context.Context) bool {
	if h.sim == nil {
		return false
	}
	_, err := h.sim.faults(ctx, "")
	if err != nil {
		h.logSimulatorError(ctx, "demo: provider faults not available", err)
	}
	return err == nil
}

// logSimulatorError logs why the simulator could not be used: at debug
// level when the provider is simply no simulator (a real provider is
// normal), as a warning when the simulator did not answer.
func (h *Handler) logSimulatorError(ctx context.Context, msg string, err error) {
	level := slog.LevelWarn
	if errors.Is(err, errNotSimulator) {
		level = slog.LevelDebug
	}
	h.logger.Log(ctx, level, msg, "error", err.Error())
}

type replayJSON struct {
	EventID uuid.UUID `json:"event_id"`
	Status  string    `json:"status"`
}

// ReplayEvent handles POST /demo/events/{id}/replay: the operator's
// republish of one of the tenant's outbox events. The consumers get the same
// message id again; their inbox makes the redelivery change nothing. It
// answers 202: the dispatcher publishes the event again soon, not now. Each
// tenant's replays are rate-limited (WithReplayLimit): past the limit, 429
// rate_limited with Retry-After, before anything is looked up.
func (h *Handler) ReplayEvent(c echo.Context) error {
	if !h.enabled {
		return errDisabled()
	}
	if h.replay == nil {
		return problem.New(problem.NotFound, "Event replay is not available in this build.")
	}
	if ok, wait := h.replays.allow(tenants.FromContext(c).ID); !ok {
		return &problem.Error{Code: problem.RateLimited, RetryAfter: wait,
			Detail: fmt.Sprintf("Too many event replays: at most %d at once, then one every %s. Retry after the Retry-After seconds.", h.replayBurst, h.replayEvery)}
	}
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return problem.New(problem.NotFound, "No such event.")
	}
	ctx := c.Request().Context()
	exists, err := outbox.HasEvent(ctx, h.pool, tenants.FromContext(c).ID, id)
	if err != nil {
		return err
	}
	if !exists { // another tenant's event is "no such event" too
		return problem.New(problem.NotFound, "No such event.")
	}
	if err := h.replay(ctx, id); err != nil {
		return fmt.Errorf("replay event %s: %w", id, err)
	}
	h.logger.InfoContext(ctx, "demo: event replayed by operator", "event_id", id)
	return wire.JSON(c, http.StatusAccepted, replayJSON{EventID: id, Status: "replay_requested"})
}
