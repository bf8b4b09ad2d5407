package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// exchange is one request and its answer, as a client sees it.
type exchange struct {
	method, path string
	status       int
	header       http.Header
	body         []byte
}

func (x exchange) String() string {
	body := string(x.body)
	if len(body) > 300 {
		body = body[:300] + "..."
	}
	return fmt.Sprintf("%s %s answered %d %s", x.method, x.path, x.status, body)
}

// replayed reports whether the answer says it is a replay.
func (x exchange) replayed() bool { return x.header.Get("Idempotent-Replayed") == "true" }

// request is what the kit sends: the API key (empty: no Authorization),
// the Idempotency-Key header values (none: no header) and a body.
type request struct {
	method, path string
	apiKey       string
	keys         []string
	body         string
	header       http.Header
}

// do sends r and reads the whole answer; an error answer is remembered for
// the problem+json case.
func (k *kit) do(ctx context.Context, r request) (exchange, error) {
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, k.base+r.path, body)
	if err != nil {
		return exchange{}, err
	}
	if r.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+r.apiKey)
	}
	if len(r.keys) > 0 {
		req.Header["Idempotency-Key"] = r.keys
	}
	for name, v := range r.header {
		req.Header[name] = v
	}
	res, err := k.client.Do(req)
	if err != nil {
		return exchange{}, fmt.Errorf("%s %s: %w", r.method, r.path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return exchange{}, fmt.Errorf("%s %s: reading the answer: %w", r.method, r.path, err)
	}
	x := exchange{method: r.method, path: r.path, status: res.StatusCode, header: res.Header, body: b}
	if x.status >= 400 {
		k.mu.Lock()
		k.errorsSeen = append(k.errorsSeen, x)
		k.mu.Unlock()
	}
	return x, nil
}

// post sends a POST under one idempotency key as tenant 0 (apiKey empty) or
// the tenant named.
func (k *kit) post(ctx context.Context, apiKey, path, key, body string) (exchange, error) {
	return k.do(ctx, request{method: http.MethodPost, path: path, apiKey: apiKey, keys: []string{key}, body: body})
}

func (k *kit) get(ctx context.Context, apiKey, path string) (exchange, error) {
	return k.do(ctx, request{method: http.MethodGet, path: path, apiKey: apiKey})
}

// orderBody is a valid order of quantity n of the kit's product.
func (k *kit) orderBody(n int) string {
	return fmt.Sprintf(`{"currency":%q,"items":[{"sku":%q,"quantity":%d}]}`, k.cur, k.sku, n)
}

const payOK = `{"payment_method":"pm_card_ok"}`

// createOrder creates an order as the tenant of apiKey under a fresh key and
// returns its id and the answer.
func (k *kit) createOrder(ctx context.Context, apiKey string) (string, exchange, error) {
	x, err := k.post(ctx, apiKey, "/v1/orders", k.key("order"), k.orderBody(1))
	if err != nil {
		return "", x, err
	}
	if x.status != http.StatusCreated {
		return "", x, fmt.Errorf("creating an order: %v, want 201", x)
	}
	id, err := jsonID(x)
	return id, x, err
}

// jsonID is the "id" member of a JSON answer.
func jsonID(x exchange) (string, error) {
	var v struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(x.body, &v); err != nil || v.ID == "" {
		return "", fmt.Errorf("%v: no \"id\" in the body", x)
	}
	return v.ID, nil
}

// want checks the status of x.
func want(x exchange, status int) error {
	if x.status != status {
		return fmt.Errorf("%v, want %d", x, status)
	}
	return nil
}

// wantProblem checks that x is the problem code with status: a problem+json
// body whose status and code say so.
func wantProblem(x exchange, status int, code string) error {
	if x.status != status {
		return fmt.Errorf("%v, want %d %s", x, status, code)
	}
	return isProblem(x, code)
}

// isProblem checks that x's body is an RFC 9457 problem with a type, a
// title, the answer's status and, when code is not empty, that code.
func isProblem(x exchange, code string) error {
	mt, _, err := mime.ParseMediaType(x.header.Get("Content-Type"))
	if err != nil || mt != "application/problem+json" {
		return fmt.Errorf("%v: Content-Type %q, want application/problem+json", x, x.header.Get("Content-Type"))
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Code   string `json:"code"`
	}
	if err := json.Unmarshal(x.body, &p); err != nil {
		return fmt.Errorf("%v: the problem is not JSON: %v", x, err)
	}
	switch {
	case p.Type == "" || p.Title == "":
		return fmt.Errorf("%v: the problem lacks its type or title", x)
	case p.Status != x.status:
		return fmt.Errorf("%v: the problem's status is %d", x, p.Status)
	case p.Code == "":
		return fmt.Errorf("%v: the problem has no code", x)
	case code != "" && p.Code != code:
		return fmt.Errorf("%v, want the code %s", x, code)
	}
	return nil
}

// retryAfter checks that x carries a Retry-After of whole seconds, at least
// one, and returns it.
func retryAfter(x exchange) (time.Duration, error) {
	v := x.header.Get("Retry-After")
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%v: Retry-After %q, want a whole number of seconds of at least 1", x, v)
	}
	return time.Duration(n) * time.Second, nil
}

// settle sends r until its answer is no longer 409 request_in_progress,
// waiting each answer's Retry-After (as a client must), for at most a
// minute.
func (k *kit) settle(ctx context.Context, r request) (exchange, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		x, err := k.do(ctx, r)
		if err != nil || x.status != http.StatusConflict || isProblem(x, "request_in_progress") != nil {
			return x, err
		}
		wait, err := retryAfter(x)
		if err != nil {
			return x, err
		}
		if time.Now().Add(wait).After(deadline) {
			return x, fmt.Errorf("%v: still in progress after a minute of retries", x)
		}
		select {
		case <-ctx.Done():
			return x, ctx.Err()
		case <-time.After(wait): // the floor Retry-After sets
		}
	}
}

// sameAnswer checks that replay is first replayed: the same status,
// Content-Type, Location and body, byte for byte, with Idempotent-Replayed.
func sameAnswer(first, replay exchange) error {
	switch {
	case replay.status != first.status:
		return fmt.Errorf("the replay's status is %d, the first answer's %d", replay.status, first.status)
	case replay.header.Get("Content-Type") != first.header.Get("Content-Type"):
		return fmt.Errorf("the replay's Content-Type is %q, the first answer's %q", replay.header.Get("Content-Type"), first.header.Get("Content-Type"))
	case replay.header.Get("Location") != first.header.Get("Location"):
		return fmt.Errorf("the replay's Location is %q, the first answer's %q", replay.header.Get("Location"), first.header.Get("Location"))
	case !bytes.Equal(replay.body, first.body):
		return fmt.Errorf("the replay's body differs from the first answer's:\n  first:  %s\n  replay: %s", first.body, replay.body)
	case !replay.replayed():
		return fmt.Errorf("the replay lacks Idempotent-Replayed: true (%v)", replay)
	}
	return nil
}

// demoStatus is what the kit reads of GET /demo.
type demoStatus struct {
	DemoMode bool `json:"demo_mode"`
	Tenants  []struct {
		APIKey string `json:"api_key"`
	} `json:"tenants"`
	Chaos struct {
		ProviderFaults bool `json:"provider_faults"`
	} `json:"chaos"`
}

// demoStatus asks GET /demo; nil when the target is not in demo mode (or
// has no such endpoint).
func (k *kit) demoStatus(ctx context.Context) (*demoStatus, error) {
	x, err := k.get(ctx, "", "/demo")
	if err != nil {
		return nil, fmt.Errorf("conformance: the target does not answer: %w", err)
	}
	k.mu.Lock()
	k.errorsSeen = nil // a target without /demo answers 404: no case's concern
	k.mu.Unlock()
	if x.status != http.StatusOK {
		return nil, nil
	}
	var s demoStatus
	if err := json.Unmarshal(x.body, &s); err != nil || !s.DemoMode {
		return nil, nil
	}
	return &s, nil
}

// demoHold is the hold a target in demo mode offers when its provider is
// the payment simulator: the simulator's timeout_next for the tenant, so
// that its next charge is made and then hangs until the service gives up
// on it (PSP_TIMEOUT). Otherwise it returns why there is none.
func demoHold(k *kit, s *demoStatus) (func(context.Context, string) error, string) {
	switch {
	case s == nil:
		return nil, "the target is not in demo mode (GET /demo), and no Hold was given: nothing holds a payment at its provider"
	case !s.Chaos.ProviderFaults:
		return nil, "the target's provider is not the payment simulator (GET /demo: provider_faults false), and no Hold was given"
	}
	return func(ctx context.Context, apiKey string) error {
		x, err := k.do(ctx, request{method: http.MethodPut, path: "/demo/faults", apiKey: apiKey, body: `{"timeout_next":1}`})
		if err != nil {
			return err
		}
		if x.status != http.StatusOK {
			return fmt.Errorf("arming the provider's timeout: %v", x)
		}
		return nil
	}, ""
}

// pickProduct chooses the product of the catalog with the most stock: each
// order buys one of it.
func (k *kit) pickProduct(ctx context.Context) error {
	x, err := k.get(ctx, k.keys[0], "/v1/products")
	if err != nil {
		return fmt.Errorf("conformance: %w", err)
	}
	if x.status != http.StatusOK {
		return fmt.Errorf("conformance: GET /v1/products with the first key: %v (is it an API key of the target?)", x)
	}
	var list struct {
		Data []struct {
			SKU      string `json:"sku"`
			Currency string `json:"currency"`
			Stock    int64  `json:"stock"`
		} `json:"data"`
	}
	if err := json.Unmarshal(x.body, &list); err != nil {
		return fmt.Errorf("conformance: GET /v1/products: %w", err)
	}
	best := int64(-1)
	for _, p := range list.Data {
		if p.Stock > best {
			best, k.sku, k.cur = p.Stock, p.SKU, p.Currency
		}
	}
	if best < 1 {
		return errors.New("conformance: the catalog (GET /v1/products) has no product in stock to order")
	}
	return nil
}
