package attention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/wire"
)

// ReleaseFunc releases the held attempt a of tenantID for another try, in
// tx (idempotency.Store.Unhold), and reports whether it was held.
type ReleaseFunc func(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID, a Attempt) (bool, error)

// ErrNotRetryable is returned by Admin.Resolve for "retried" on an item
// that has no attempt to try again (a webhook delivery), or whose attempt
// is no longer held.
var ErrNotRetryable = errors.New("attention item has no held attempt to try again")

// Admin holds the operator's actions on the queue: list, show, resolve. They
// act on every tenant's items; expose them to operators only (the CLI, or
// an admin route behind its own credentials).
type Admin struct {
	pool    *pgxpool.Pool
	release ReleaseFunc
	now     func() time.Time
	logger  *slog.Logger
}

// NewAdmin returns the operator's actions; release gives a held attempt
// back for another try (Resolve with ResolutionRetried).
func NewAdmin(pool *pgxpool.Pool, release ReleaseFunc, now func() time.Time, logger *slog.Logger) *Admin {
	return &Admin{pool: pool, release: release, now: now, logger: logger}
}

// List returns up to limit items of a status (see List).
func (a *Admin) List(ctx context.Context, status Status, limit int) ([]Item, error) {
	return List(ctx, a.pool, status, limit)
}

// Get returns one item, or ErrNotFound.
func (a *Admin) Get(ctx context.Context, id uuid.UUID) (Item, error) { return Get(ctx, a.pool, id) }

// Resolve resolves the open item id with the operator's note, in one
// transaction with what the resolution does: ResolutionRetried releases the
// item's held attempt for another try (its client's retry or the recoverer
// resumes it from its recovery point, with a fresh bound of recoveries);
// ResolutionClosed only records that the matter was settled outside the
// service, and a held attempt stays held (its client keeps getting
// awaiting_operator). An unknown item is ErrNotFound, a resolved one
// ErrResolved, "retried" without a held attempt ErrNotRetryable; the note is
// required.
func (a *Admin) Resolve(ctx context.Context, id uuid.UUID, res Resolution, note string) (Item, error) {
	if note == "" {
		return Item{}, errors.New("attention: a resolution needs a note that says what was done")
	}
	var it Item
	err := postgres.InTx(ctx, a.pool, func(tx pgx.Tx) error {
		var err error
		if it, err = Resolve(ctx, tx, id, Resolved{At: a.now().UTC().Truncate(time.Microsecond), Resolution: res, Note: note}); err != nil {
			return err
		}
		if res != ResolutionRetried {
			return nil
		}
		if it.Attempt == nil {
			return fmt.Errorf("item %s is about webhook delivery %s: %w", id, it.DeliveryID, ErrNotRetryable)
		}
		released, err := a.release(ctx, tx, it.TenantID, *it.Attempt)
		if err != nil {
			return err
		}
		if !released {
			return fmt.Errorf("item %s: %s %q is not held: %w", id, it.Attempt.Operation, it.Attempt.Key, ErrNotRetryable)
		}
		return nil
	})
	if err != nil {
		return Item{}, err
	}
	a.logger.InfoContext(ctx, "attention item resolved by operator", "attention_id", it.ID, "reason", it.Reason,
		"resolution", res, "tenant_id", it.TenantID)
	return it, nil
}

// AdminHandler serves the operator's view of the queue over HTTP. It does
// no authentication of its own: mount it behind the admin credentials.
type AdminHandler struct {
	admin *Admin
}

// NewAdminHandler returns the handler for admin.
func NewAdminHandler(admin *Admin) *AdminHandler { return &AdminHandler{admin: admin} }

type itemJSON struct {
	ID             uuid.UUID     `json:"id"`
	Status         Status        `json:"status"`
	Reason         Reason        `json:"reason"`
	Detail         string        `json:"detail"`
	TenantID       uuid.UUID     `json:"tenant_id"`
	Operation      *string       `json:"operation"`
	IdempotencyKey *string       `json:"idempotency_key"`
	DeliveryID     *string       `json:"webhook_delivery_id"`
	Resource       *resourceJSON `json:"resource"`
	RaisedAt       time.Time     `json:"raised_at"`
	ResolvedAt     *time.Time    `json:"resolved_at"`
	Resolution     *Resolution   `json:"resolution"`
	Note           *string       `json:"note"`
}

type resourceJSON struct {
	Type string    `json:"type"`
	ID   uuid.UUID `json:"id"`
}

type listJSON struct {
	Data []itemJSON `json:"data"`
}

func itemJSONFrom(it Item) itemJSON {
	out := itemJSON{ID: it.ID, Status: it.Status(), Reason: it.Reason, Detail: it.Detail, TenantID: it.TenantID, RaisedAt: it.RaisedAt}
	if it.Attempt != nil {
		out.Operation, out.IdempotencyKey = &it.Attempt.Operation, &it.Attempt.Key
	}
	if it.DeliveryID != "" {
		out.DeliveryID = &it.DeliveryID
	}
	if it.Resource != nil {
		out.Resource = &resourceJSON{Type: it.Resource.Type, ID: it.Resource.ID}
	}
	if r := it.Resolved; r != nil {
		out.ResolvedAt, out.Resolution, out.Note = &r.At, &r.Resolution, &r.Note
	}
	return out
}

// List handles GET /admin/attention?status=open|resolved&limit=: the open
// items oldest first (the default), or the resolved ones newest first.
func (h *AdminHandler) List(c echo.Context) error {
	limit, err := wire.ParseLimit(c.QueryParam("limit"))
	if err != nil {
		return err
	}
	status := Status(c.QueryParam("status"))
	switch status {
	case "":
		status = StatusOpen
	case StatusOpen, StatusResolved:
	default:
		return problem.Validation(problem.FieldError{Field: "status", Message: "must be open or resolved"})
	}
	items, err := h.admin.List(c.Request().Context(), status, limit)
	if err != nil {
		return err
	}
	out := listJSON{Data: make([]itemJSON, len(items))}
	for i, it := range items {
		out.Data[i] = itemJSONFrom(it)
	}
	return wire.JSON(c, http.StatusOK, out)
}

// Get handles GET /admin/attention/{id}.
func (h *AdminHandler) Get(c echo.Context) error {
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return problem.New(problem.NotFound, "No such attention item.")
	}
	it, err := h.admin.Get(c.Request().Context(), id)
	if errors.Is(err, ErrNotFound) {
		return problem.New(problem.NotFound, "No such attention item.")
	}
	if err != nil {
		return err
	}
	return wire.JSON(c, http.StatusOK, itemJSONFrom(it))
}
