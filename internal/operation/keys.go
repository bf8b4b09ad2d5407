package operation

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/wire"
)

// KeyHandler serves GET /v1/idempotency-keys/{operation}/{key}: what a
// client may know of its own key (idempotency.Store.Lookup), for a client
// that lost an answer and would rather ask than send the request again.
type KeyHandler struct {
	runner *Runner
	known  map[idempotency.Operation]bool
}

// NewKeyHandler returns the handler of the keys of the operations specs
// declares (the service's registry); any other operation is 404.
func NewKeyHandler(r *Runner, specs []Spec) *KeyHandler {
	known := make(map[idempotency.Operation]bool, len(specs))
	for _, s := range specs {
		known[s.Name] = true
	}
	return &KeyHandler{runner: r, known: known}
}

// KeysPath is the path under which keys are looked up.
const KeysPath = "/v1/idempotency-keys/"

type keyJSON struct {
	Operation string               `json:"operation"`
	Key       string               `json:"key"`
	State     idempotency.KeyState `json:"state"`
	// RetryAfter is the Retry-After header's, in seconds, of an in-progress
	// key.
	RetryAfter int `json:"retry_after,omitempty"`
	// Response is the stored answer's status and link, of a completed key.
	Response  *storedJSON `json:"response,omitempty"`
	ExpiresAt *time.Time  `json:"expires_at,omitempty"`
}

type storedJSON struct {
	Status   int    `json:"status"`
	Location string `json:"location,omitempty"`
}

// Get handles GET /v1/idempotency-keys/{operation}/{key}. The key is one
// path segment, URL-encoded: read from the escaped path and decoded once,
// so a key holding "/" or "%" is named by its encoding (%2F, %25).
func (h *KeyHandler) Get(c echo.Context) error {
	op, key, err := h.parse(c.Request().URL)
	if err != nil {
		return err
	}
	st, err := h.runner.store.Lookup(c.Request().Context(), h.runner.pool, tenants.FromContext(c).ID, op, key)
	if err != nil {
		return err
	}
	out := keyJSON{Operation: string(op), Key: string(key), State: st.State}
	if !st.ExpiresAt.IsZero() {
		out.ExpiresAt = &st.ExpiresAt
	}
	switch st.State {
	case idempotency.KeyCompleted, idempotency.KeyCancelled:
		out.Response = &storedJSON{Status: st.Status, Location: st.Location}
	case idempotency.KeyInProgress:
		out.RetryAfter = int(st.RetryAfter / time.Second)
		c.Response().Header().Set("Retry-After", strconv.Itoa(out.RetryAfter))
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return wire.JSON(c, http.StatusOK, out)
}

// parse reads the operation and the key of a lookup's path.
func (h *KeyHandler) parse(u *url.URL) (idempotency.Operation, idempotency.Key, error) {
	rest, _ := strings.CutPrefix(u.EscapedPath(), KeysPath)
	rawOp, rawKey, _ := strings.Cut(rest, "/")
	op, err := url.PathUnescape(rawOp)
	if err != nil || !h.known[idempotency.Operation(op)] || strings.Contains(rawKey, "/") {
		// A "/" the client did not encode makes another path, not a key.
		return "", "", problem.New(problem.NotFound, "No such operation: the operations are those of the API reference (e.g. payments.create).")
	}
	k, err := url.PathUnescape(rawKey)
	if err != nil {
		return "", "", problem.New(problem.IdempotencyKeyInvalid, "The key in the path is not a valid URL-encoding.")
	}
	key, err := idempotency.KeyOf(k)
	if err != nil {
		return "", "", err
	}
	return idempotency.Operation(op), key, nil
}
