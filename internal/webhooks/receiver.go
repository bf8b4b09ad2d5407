package webhooks

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/webhooks/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/wire"
)

// maxDeliveryIDLen bounds the webhook-id stored as the receipt's key.
const maxDeliveryIDLen = 255

// Receiver serves POST /webhooks/psp: verify, store the receipt, answer.
type Receiver struct {
	pool     *pgxpool.Pool
	verifier *Verifier
	logger   *slog.Logger
	now      func() time.Time
	notify   func()
	observe  func(result string)
}

// The results of a delivery, as WithResultObserver reports them.
const (
	DeliveryAccepted  = "accepted"  // a new receipt is stored
	DeliveryDuplicate = "duplicate" // its webhook-id was stored before
	DeliveryRejected  = "rejected"  // any 4xx: nothing stored
)

// DeliveryResults lists every delivery result.
func DeliveryResults() []string {
	return []string{DeliveryAccepted, DeliveryDuplicate, DeliveryRejected}
}

// ReceiverOption configures a Receiver.
type ReceiverOption func(*Receiver)

// WithResultObserver reports every delivery's result (DeliveryAccepted,
// DeliveryDuplicate, DeliveryRejected), e.g. to metrics (default none).
func WithResultObserver(fn func(result string)) ReceiverOption {
	return func(r *Receiver) { r.observe = fn }
}

// WithNotify calls fn after a new receipt committed, to wake the worker at
// once (Worker.Notify); it must not block. The default is none: the worker
// finds the receipt at its next poll.
func WithNotify(fn func()) ReceiverOption {
	return func(r *Receiver) { r.notify = fn }
}

// NewReceiver returns the webhook endpoint, which checks deliveries with v.
func NewReceiver(pool *pgxpool.Pool, v *Verifier, logger *slog.Logger, now func() time.Time, opts ...ReceiverOption) *Receiver {
	r := &Receiver{pool: pool, verifier: v, logger: logger, now: now, observe: func(string) {}}
	for _, o := range opts {
		o(r)
	}
	return r
}

// receivedJSON is the answer to every accepted delivery.
type receivedJSON struct {
	Received  bool `json:"received"`
	Duplicate bool `json:"duplicate"`
}

// Handle receives one delivery. The signature is checked before anything
// else (401 unauthorized); a malformed envelope is 400 invalid_json or 422
// validation_failed; both store nothing. A verified, valid delivery is stored
// by its webhook-id and answered 200 {"received":true,"duplicate":false};
// a redelivery of the same id answers {"duplicate":true} and changes
// nothing. The receipt is the request's only effect: the worker applies it.
func (r *Receiver) Handle(c echo.Context) error {
	result, err := r.handle(c)
	if err != nil && problem.Status(problem.CodeOf(err)) < 500 {
		result = DeliveryRejected
	}
	if result != "" {
		r.observe(result)
	}
	return err
}

func (r *Receiver) handle(c echo.Context) (string, error) {
	req := c.Request()
	body, err := wire.ReadBody(req)
	if err != nil {
		return "", err
	}
	id, ev, err := r.check(req.Header, body)
	if err != nil {
		if problem.CodeOf(err) == problem.Unauthorized {
			r.logger.WarnContext(req.Context(), "webhook refused", "error", err.Error(), "webhook_id", wire.Loggable(req.Header.Get(HeaderID)))
		}
		return "", err
	}
	stored, err := dbsqlc.New(r.pool).WebhookReceiptInsert(req.Context(), dbsqlc.WebhookReceiptInsertParams{
		DeliveryID: id,
		EventType:  ev.typ,
		Payload:    bytes.TrimSpace(body),
		ReceivedAt: r.now().UTC().Truncate(time.Microsecond),
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22") {
			// Valid JSON that jsonb refuses, such as \u0000 in a string.
			return "", &problem.Error{Code: problem.InvalidJSON, Detail: "The webhook body cannot be stored as JSON.", Err: err}
		}
		return "", fmt.Errorf("store webhook receipt %s: %w", id, err)
	}
	duplicate := stored == 0
	if !duplicate && r.notify != nil {
		r.notify()
	}
	r.logger.DebugContext(req.Context(), "webhook received", "webhook_id", id, "event_id", ev.id, "type", ev.typ, "duplicate", duplicate)
	result := DeliveryAccepted
	if duplicate {
		result = DeliveryDuplicate
	}
	return result, wire.JSON(c, http.StatusOK, receivedJSON{Received: true, Duplicate: duplicate})
}

// check verifies the delivery, then validates it: it returns the delivery
// id and the event, or a *problem.Error (always 4xx).
func (r *Receiver) check(h http.Header, body []byte) (string, event, error) {
	if err := r.verifier.Verify(h, body); err != nil {
		// The provider signs; it has no token to send, so the 401 names
		// no Bearer challenge.
		return "", event{}, &problem.Error{Code: problem.Unauthorized, Detail: "The webhook signature could not be verified.", NoChallenge: true, Err: err}
	}
	id := h.Get(HeaderID)
	if len(id) > maxDeliveryIDLen {
		return "", event{}, problem.Validation(problem.FieldError{Field: HeaderID, Message: fmt.Sprintf("must be at most %d bytes", maxDeliveryIDLen)})
	}
	ev, err := parseEvent(body)
	if err != nil {
		return "", event{}, err
	}
	return id, ev, nil
}

// truncate cuts s to at most n bytes of valid UTF-8, for a receipt's
// last_error.
func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ToValidUTF8(s, "")
}
