package orders

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/wire"
)

// Handler serves the order endpoints.
type Handler struct {
	svc *Service
}

// NewHandler returns the handler for svc.
func NewHandler(svc *Service) *Handler { return &Handler{svc: svc} }

// The wire types: handlers encode their own response types, never the
// generated database rows.
type (
	productJSON struct {
		SKU        string `json:"sku"`
		Name       string `json:"name"`
		UnitAmount int64  `json:"unit_amount"`
		Currency   string `json:"currency"`
		Stock      int64  `json:"stock"`
	}
	itemJSON struct {
		SKU        string `json:"sku"`
		Name       string `json:"name"`
		Quantity   int    `json:"quantity"`
		UnitAmount int64  `json:"unit_amount"`
		Amount     int64  `json:"amount"`
	}
	orderJSON struct {
		ID          uuid.UUID  `json:"id"`
		Status      Status     `json:"status"`
		Currency    string     `json:"currency"`
		AmountTotal int64      `json:"amount_total"`
		Items       []itemJSON `json:"items"`
		CreatedAt   time.Time  `json:"created_at"`
	}
	listJSON[T any] struct {
		Data       []T     `json:"data"`
		NextCursor *string `json:"next_cursor"`
	}
	createRequestJSON struct {
		Currency *string           `json:"currency"`
		Items    []itemRequestJSON `json:"items"`
	}
	itemRequestJSON struct {
		SKU *string `json:"sku"`
		// Quantity is a JSON number read exactly (wire.Integer): 2 and 2.0
		// are the same number (and the same canonical JSON), so both are
		// accepted; 2.5 is not a quantity, and neither is
		// 2.0000000000000001, which a float64 would round to 2.
		Quantity *wire.Integer `json:"quantity"`
	}
)

func orderJSONFrom(o Order) orderJSON {
	out := orderJSON{ID: o.ID, Status: o.Status, Currency: o.Currency, AmountTotal: o.AmountTotal,
		CreatedAt: o.CreatedAt.UTC(), Items: make([]itemJSON, len(o.Items))}
	for i, it := range o.Items {
		out.Items[i] = itemJSON(it)
	}
	return out
}

func encodeJSON(v any) ([]byte, error) { return wire.Encode(v) }

var currencyPattern = regexp.MustCompile(`^[A-Z]{3}$`)

// parseCreate decodes and validates an order request. Errors found here are
// raised before execution: they are not stored, and the key stays free.
func parseCreate(body []byte) (CreateInput, error) {
	var req createRequestJSON
	if err := wire.Decode(body, &req); err != nil {
		return CreateInput{}, err
	}
	return validateCreate(req)
}

// validateCreate checks a decoded order request.
func validateCreate(req createRequestJSON) (CreateInput, error) {
	var fields []problem.FieldError
	bad := func(field, msg string) { fields = append(fields, problem.FieldError{Field: field, Message: msg}) }
	in := CreateInput{}
	switch {
	case req.Currency == nil:
		bad("currency", "is required")
	case !currencyPattern.MatchString(*req.Currency):
		bad("currency", "must be an ISO 4217 code such as EUR")
	case !slices.Contains(SupportedCurrencies(), *req.Currency):
		bad("currency", "unsupported currency; supported: "+strings.Join(SupportedCurrencies(), ", "))
	default:
		in.Currency = *req.Currency
	}
	switch {
	case len(req.Items) == 0:
		bad("items", "must hold at least one item")
	case len(req.Items) > MaxItems:
		bad("items", fmt.Sprintf("must hold at most %d items", MaxItems))
	}
	seen := make(map[string]bool, len(req.Items))
	for i, it := range req.Items {
		if i >= MaxItems {
			break
		}
		f := func(name string) string { return fmt.Sprintf("items[%d].%s", i, name) }
		skuProblem := "is required"
		if it.SKU != nil {
			skuProblem = wire.CheckText(*it.SKU, MaxSKULen)
		}
		switch {
		case skuProblem != "":
			bad(f("sku"), skuProblem)
		case seen[*it.SKU]:
			bad(f("sku"), "appears twice; use one line with the total quantity")
		default:
			seen[*it.SKU] = true
		}
		var quantity int64
		if it.Quantity == nil {
			bad(f("quantity"), "is required")
		} else if q, err := it.Quantity.Int(1, MaxQuantity); errors.Is(err, wire.ErrNotWhole) {
			bad(f("quantity"), "must be a whole number")
		} else if err != nil {
			bad(f("quantity"), fmt.Sprintf("must be between 1 and %d", MaxQuantity))
		} else {
			quantity = q
		}
		if len(fields) == 0 {
			in.Items = append(in.Items, ItemInput{SKU: *it.SKU, Quantity: int(quantity)})
		}
	}
	if len(fields) > 0 {
		return CreateInput{}, problem.Validation(fields...)
	}
	return in, nil
}

// Create handles POST /v1/orders.
func (h *Handler) Create(c echo.Context) error {
	req, input, err := operation.ParseRequest(c, OpCreate, operation.Target{}, func(raw []byte, _ uuid.UUID) (CreateInput, error) {
		var body createRequestJSON
		if err := wire.Decode(raw, &body); err != nil {
			return CreateInput{}, err
		}
		return validateCreate(body)
	})
	if err != nil {
		return err
	}
	resp, err := h.svc.create.RunWith(c.Request().Context(), req, input)
	if err != nil {
		return err
	}
	return resp.Write(c.Response())
}

// Get handles GET /v1/orders/{id}.
func (h *Handler) Get(c echo.Context) error {
	t := tenants.FromContext(c)
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return problem.New(problem.NotFound, "No such order.")
	}
	o, err := h.svc.Get(c.Request().Context(), t.ID, id)
	if errors.Is(err, ErrNotFound) {
		return problem.New(problem.NotFound, "No such order.")
	}
	if err != nil {
		return err
	}
	return wire.JSON(c, http.StatusOK, orderJSONFrom(o))
}

// List handles GET /v1/orders?limit=&cursor=.
func (h *Handler) List(c echo.Context) error {
	t := tenants.FromContext(c)
	limit, err := wire.ParseLimit(c.QueryParam("limit"))
	if err != nil {
		return err
	}
	var after *Cursor
	if raw := c.QueryParam("cursor"); raw != "" {
		cur, err := decodeCursor(raw)
		if err != nil {
			return problem.Validation(problem.FieldError{Field: "cursor", Message: "is not a cursor this API returned"})
		}
		after = &cur
	}
	list, next, err := h.svc.List(c.Request().Context(), t.ID, limit, after)
	if err != nil {
		return err
	}
	out := listJSON[orderJSON]{Data: make([]orderJSON, len(list))}
	for i, o := range list {
		out.Data[i] = orderJSONFrom(o)
	}
	if next != nil {
		s := encodeCursor(*next)
		out.NextCursor = &s
	}
	return wire.JSON(c, http.StatusOK, out)
}

// Products handles GET /v1/products.
func (h *Handler) Products(c echo.Context) error {
	t := tenants.FromContext(c)
	list, err := h.svc.Products(c.Request().Context(), t.ID)
	if err != nil {
		return err
	}
	out := listJSON[productJSON]{Data: make([]productJSON, len(list))}
	for i, p := range list {
		out.Data[i] = productJSON(p)
	}
	return wire.JSON(c, http.StatusOK, out)
}

func encodeCursor(c Cursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.CreatedAt.UTC().Format(time.RFC3339Nano) + "|" + c.ID.String()))
}

func decodeCursor(s string) (Cursor, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Cursor{}, err
	}
	ts, id, ok := strings.Cut(string(raw), "|")
	if !ok {
		return Cursor{}, errors.New("cursor: no separator")
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return Cursor{}, err
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return Cursor{}, err
	}
	return Cursor{CreatedAt: t, ID: u}, nil
}
