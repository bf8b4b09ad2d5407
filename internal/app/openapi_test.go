package app_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/attention"
	"github.com/oncepay/oncepay/internal/httpapi"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/testkit"
	"github.com/oncepay/oncepay/openapi"
	"github.com/oncepay/oncepay/proving/pspsim"
)

// The e2e tests talk to the server through b.client. Its transport,
// newOpenAPITransport, validates every request/response pair against
// openapi/openapi.yaml, the document GET /openapi.yaml serves, so the document
// cannot drift from the server without a failing test. Only the browser UI
// and the demo surface are left out (outsideAPI).

// openAPI is the loaded document, shared by every test of the package.
var openAPI = sync.OnceValues(func() (*openAPISpec, error) { return loadOpenAPISpec(openapi.YAML) })

// openAPISpec is a validated document ready to check exchanges against.
type openAPISpec struct {
	doc    *openapi3.T
	router routers.Router
	// unrouted checks answers to requests that match no operation: a 404
	// (no such path) or a 405 (no such method) problem.
	unrouted *openapi3.Operation
}

// loadOpenAPISpec loads and validates the document, then closes its response
// objects for the tests (closeObjects).
func loadOpenAPISpec(data []byte) (*openAPISpec, error) {
	ctx := context.Background()
	loader := openapi3.NewLoader()
	loader.Context = ctx
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("load openapi.yaml: %w", err)
	}
	if err := doc.Validate(ctx); err != nil {
		return nil, fmt.Errorf("openapi.yaml is not a valid OpenAPI document: %w", err)
	}
	if err := closeObjects(doc); err != nil {
		return nil, err
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route openapi.yaml: %w", err)
	}
	responses := doc.Components.Responses
	return &openAPISpec{doc: doc, router: router, unrouted: &openapi3.Operation{
		Responses: openapi3.NewResponses(
			openapi3.WithStatus(http.StatusNotFound, responses["NotFound"]),
			openapi3.WithStatus(http.StatusMethodNotAllowed, responses["MethodNotAllowed"])),
	}}, nil
}

// closeObjects sets additionalProperties: false on every object schema with
// properties that does not say otherwise. The document leaves response
// objects open, because clients must ignore members added later. The tests
// hold the server to exactly the documented members, so a new member of a
// wire type fails until it is documented. Schemas that must stay open, such
// as the provider's webhook events, say additionalProperties: true.
func closeObjects(doc *openapi3.T) error {
	closed := false
	return doc.WalkSchemas(func(_ string, ref *openapi3.SchemaRef) error {
		s := ref.Value
		if s.Type.Includes(openapi3.TypeObject) && len(s.Properties) > 0 &&
			s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
			s.AdditionalProperties.Has = &closed
		}
		return nil
	})
}

// openAPIOptions are the validation options of every check.
func openAPIOptions() *openapi3filter.Options {
	opts := &openapi3filter.Options{
		IncludeResponseStatus: true, // an undocumented status is drift too
		MultiError:            true,
		SkipSettingDefaults:   true,
		AuthenticationFunc:    bearerSyntax,
		SchemaValidationOptions: []openapi3.SchemaValidationOption{
			// kin-openapi defines no uuid format by default; ours are v7.
			openapi3.WithStringFormatValidator("uuid", openapi3.NewRegexpFormatValidator(openapi3.FormatOfStringForUUIDOfRFC9562)),
		},
	}
	// Say where and why, without dumping the whole schema and value.
	opts.WithCustomSchemaErrorFunc(func(err *openapi3.SchemaError) string {
		if p := "/" + strings.Join(err.JSONPointer(), "/"); p != "/" && !strings.Contains(err.Reason, `"`+p+`"`) {
			return fmt.Sprintf("at %q: %s", p, err.Reason)
		}
		return err.Reason
	})
	return opts
}

// bearerSyntax is the document's bearer scheme as far as a document can say
// it: the Authorization header has the form "Bearer <key>". Whether the key
// is known is the server's business (401).
func bearerSyntax(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	scheme, key, ok := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(key) == "" {
		return in.NewError(errors.New(`no "Authorization: Bearer <key>" header`))
	}
	return nil
}

// exchange is one request and the response it got.
type exchange struct {
	req     *http.Request
	reqBody []byte
	status  int
	header  http.Header
	body    []byte
}

// check returns what is wrong with x according to the document, and the
// operation it matched ("" for none).
//
//   - The response must be one the document describes for the operation and
//     status: headers, content type and body.
//   - A request the document refuses must be refused by the server with a 4xx:
//     otherwise the description is stricter than the server (or the server
//     lost a check). The e2e tests send invalid requests on purpose, so a
//     refused request alone is no error.
//   - A request for no documented operation must get a 404 or 405 problem.
func (s *openAPISpec) check(x exchange) (string, []error) {
	ctx := context.Background()
	req := x.req.Clone(ctx)
	req.Body = io.NopCloser(bytes.NewReader(x.reqBody))
	// The server reads every body as JSON whatever its Content-Type says (the
	// document's conventions); check it as the server reads it.
	if len(x.reqBody) > 0 && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	opts := openAPIOptions()
	route, pathParams, err := s.router.FindRoute(req)
	if err != nil {
		want := http.StatusNotFound
		if errors.Is(err, routers.ErrMethodNotAllowed) {
			want = http.StatusMethodNotAllowed
		} else if !errors.Is(err, routers.ErrPathNotFound) {
			return "", []error{fmt.Errorf("find route: %w", err)}
		}
		if x.status != want {
			return "", []error{fmt.Errorf("the document has no operation %s %s (%v), so the answer must be %d, not %d",
				req.Method, req.URL.Path, err, want, x.status)}
		}
		route = &routers.Route{Spec: s.doc, PathItem: &openapi3.PathItem{}, Path: req.URL.Path, Method: req.Method, Operation: s.unrouted}
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: pathParams, Route: route, Options: opts}
	var errs []error
	if route.Operation != s.unrouted {
		if err := openapi3filter.ValidateRequest(ctx, in); err != nil && (x.status < 400 || x.status > 499) {
			errs = append(errs, fmt.Errorf("the document refuses this request, but the server answered %d: %w", x.status, err))
		}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: x.status, Header: x.header, Options: opts}
	out.SetBodyBytes(x.body)
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		errs = append(errs, fmt.Errorf("response: %w", err))
	}
	return route.Operation.OperationID, errs
}

// openAPITransport is an http.RoundTripper that checks every exchange
// passing through it against the document and reports each mismatch with
// t.Errorf. It hands the response on unchanged (its body buffered), so the
// tests using it see what they would see without it. The check runs in the
// background, so that it does not change the timing the tests see (some
// race the provider's webhooks); the test's cleanup waits for it.
type openAPITransport struct {
	t    testing.TB
	next http.RoundTripper
	spec *openAPISpec
	wg   sync.WaitGroup

	mu sync.Mutex
	// seen counts the checked answers by "operationId status" ("404" and
	// "405" alone for requests that match no operation).
	seen map[string]int
}

// newOpenAPITransport wraps next (nil: http.DefaultTransport) for the test t.
func newOpenAPITransport(t testing.TB, next http.RoundTripper) *openAPITransport {
	t.Helper()
	spec, err := openAPI()
	if err != nil {
		t.Fatal(err)
	}
	if next == nil {
		next = http.DefaultTransport.(*http.Transport).Clone() // this test's connections only
	}
	v := &openAPITransport{t: t, next: next, spec: spec, seen: make(map[string]int)}
	t.Cleanup(v.wg.Wait)
	return v
}

// CloseIdleConnections closes the idle connections of the transport below
// (http.Client.CloseIdleConnections calls it).
func (v *openAPITransport) CloseIdleConnections() {
	if c, ok := v.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (v *openAPITransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		reqBody = b
	}
	sent := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		sent.Body = io.NopCloser(bytes.NewReader(reqBody))
		sent.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(reqBody)), nil }
	}
	res, err := v.next.RoundTrip(sent)
	if err != nil {
		return nil, err // no answer, nothing to check
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		// A cut-off answer (some tests cut connections on purpose) is no
		// answer to check; hand on what arrived, and the error.
		res.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
		return res, nil
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	// The demo's X-Demo-Chaos header, which any request may carry, belongs
	// to the demo surface too: outside demo mode it is a 404 on any route.
	if outsideAPI(req.URL.Path) || req.Header.Get("X-Demo-Chaos") != "" {
		return res, nil
	}
	x := exchange{req: req.Clone(context.Background()), reqBody: reqBody, status: res.StatusCode, header: res.Header.Clone(), body: body}
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		v.report(x)
	}()
	return res, nil
}

// report checks x and reports what is wrong with it.
func (v *openAPITransport) report(x exchange) {
	op, errs := v.spec.check(x)
	v.mu.Lock()
	v.seen[strings.TrimSpace(op+" "+strconv.Itoa(x.status))]++
	v.mu.Unlock()
	for _, err := range errs {
		v.t.Errorf("openapi.yaml: %s %s -> %d %s\n%v", x.req.Method, x.req.URL.RequestURI(), x.status, truncate(x.body, 600), err)
	}
}

// covered waits for the checks under way and returns how many answers were
// checked per "operationId status".
func (v *openAPITransport) covered() map[string]int {
	v.wg.Wait()
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]int, len(v.seen))
	for k, n := range v.seen {
		out[k] = n
	}
	return out
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// validating makes b's client check every exchange against the document
// (setup may have done so already) and returns its transport.
func validating(t *testing.T, b *testBundle) *openAPITransport {
	t.Helper()
	if v, ok := b.client.Transport.(*openAPITransport); ok {
		return v
	}
	v := newOpenAPITransport(t, b.client.Transport)
	b.client.Transport = v
	return v
}

// outsideAPI reports the routes the document leaves out on purpose: the
// browser UI (web/) and the demo-mode surface (internal/demo).
func outsideAPI(path string) bool {
	return path == "/" || strings.HasPrefix(path, "/assets/") || path == "/demo" || strings.HasPrefix(path, "/demo/")
}

// (1) The document loads, is a valid OpenAPI 3.1 document, and its problem
// codes are exactly the server's, each under its status.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	spec, err := openAPI()
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.doc.OpenAPI; got != "3.1.0" {
		t.Fatalf("openapi = %q, want 3.1.0", got)
	}
	// The document is valid as the tests use it, too.
	if err := spec.doc.Validate(context.Background()); err != nil {
		t.Fatalf("validate after closeObjects: %v", err)
	}

	// The ProblemCode enum is the list of codes in internal/problem.
	documented := map[string]bool{}
	for _, c := range spec.doc.Components.Schemas["ProblemCode"].Value.Enum {
		documented[c.(string)] = true
	}
	var server []string
	for _, c := range problem.Codes() {
		server = append(server, string(c))
	}
	for _, c := range server {
		if !documented[c] {
			t.Errorf("problem code %q (internal/problem) is missing from the ProblemCode enum", c)
		}
	}
	if len(documented) != len(server) {
		t.Errorf("ProblemCode enum has %d codes, internal/problem %d: %v", len(documented), len(server), server)
	}

	// Every problem response lists codes of its own status only.
	checked := 0
	for path, item := range spec.doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status, ref := range op.Responses.Map() {
				mt := ref.Value.Content.Get(problem.ContentType)
				if mt == nil {
					continue
				}
				codes := responseCodes(mt.Schema.Value)
				if len(codes) == 0 {
					t.Errorf("%s %s %s: a problem response without a code enum", method, path, status)
				}
				for _, c := range codes {
					checked++
					if got := strconv.Itoa(problem.Status(problem.Code(c))); got != status {
						t.Errorf("%s %s: code %s is listed under %s, but the server sends it with %s", method, path, c, status, got)
					}
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d problem codes of responses, want the document's (> 50)", checked)
	}
}

// problemCodes parses internal/problem/problem.go for its Code constants.

// responseCodes collects the codes a problem response's schema allows: the
// const or enum of "code" in it or in its allOf parts.
func responseCodes(s *openapi3.Schema) []string {
	var out []string
	for _, part := range append(openapi3.SchemaRefs{{Value: s}}, s.AllOf...) {
		code := part.Value.Properties["code"]
		if code == nil || part.Ref != "" {
			continue
		}
		if c, ok := code.Value.Const.(string); ok {
			out = append(out, c)
		}
		for _, c := range code.Value.Enum {
			out = append(out, c.(string))
		}
	}
	return out
}

// openAPIAdminToken is the ADMIN_TOKEN of the OpenAPI tests: with it the
// server routes the operator endpoints, which the document describes too.
const openAPIAdminToken = "admin-token-of-the-openapi-tests-0123456789"

// withAdminToken sets the ADMIN_TOKEN of a setup.
func withAdminToken(c *app.Config) { c.AdminToken = openAPIAdminToken }

// Every route of the server is described, and every described operation is
// a route of the server (the operator endpoints included: they are routed
// with an ADMIN_TOKEN).
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	t.Parallel()
	b := setup(t, withAdminToken)
	spec, err := openAPI()
	if err != nil {
		t.Fatal(err)
	}
	e, ok := b.app.Handler().(*echo.Echo)
	if !ok {
		t.Fatalf("the handler is a %T, not *echo.Echo", b.app.Handler())
	}
	served := map[string]bool{}
	for _, r := range e.Routes() {
		path := r.Path
		for _, part := range strings.Split(path, "/") {
			if name, ok := strings.CutPrefix(part, ":"); ok {
				path = strings.Replace(path, part, "{"+name+"}", 1)
			}
		}
		if outsideAPI(path) {
			continue
		}
		served[r.Method+" "+path] = true
	}
	described := map[string]bool{}
	for path, item := range spec.doc.Paths.Map() {
		for method := range item.Operations() {
			described[method+" "+path] = true
		}
	}
	for r := range served {
		if !described[r] {
			t.Errorf("the server serves %s, the document does not describe it", r)
		}
	}
	for r := range described {
		if !served[r] {
			t.Errorf("the document describes %s, the server does not serve it", r)
		}
	}
}

// (2) The endpoints and their problem answers, through the validating
// transport: every exchange below is checked against the document.
func TestOpenAPIResponsesMatchTheDocument(t *testing.T) {
	t.Parallel()
	b := setup(t, withAdminToken)
	v := validating(t, b)

	want := func(r response, status int) response {
		t.Helper()
		if r.status != status {
			t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
		}
		return r
	}

	// Operations.
	want(b.do(t, "GET", "/healthz", "", "", ""), http.StatusOK)
	want(b.do(t, "GET", "/readyz", "", "", ""), http.StatusOK)
	want(b.do(t, "GET", "/metrics", "", "", ""), http.StatusOK)
	doc := want(b.do(t, "GET", "/openapi.yaml", "", "", ""), http.StatusOK)
	if ct := doc.header.Get("Content-Type"); ct != openapi.ContentType {
		t.Fatalf("GET /openapi.yaml Content-Type = %q, want %q", ct, openapi.ContentType)
	}
	if !bytes.Equal(doc.body, openapi.YAML) {
		t.Fatal("GET /openapi.yaml is not the embedded document")
	}
	want(b.do(t, "GET", "/v1/products", acme, "", ""), http.StatusOK)

	// Orders: create, replay, mismatch, and the refusals before execution.
	created := want(b.do(t, "POST", "/v1/orders", acme, "oa-order", orderBody), http.StatusCreated)
	orderID := created.json(t)["id"].(string)
	replay := want(b.do(t, "POST", "/v1/orders", acme, `"oa-order"`, orderBodyReordered), http.StatusCreated)
	want(b.do(t, "GET", "/v1/idempotency-keys/orders.create/oa-order", acme, "", ""), http.StatusOK)
	want(b.do(t, "GET", "/v1/idempotency-keys/orders.create/never-used", acme, "", ""), http.StatusOK)
	want(b.do(t, "GET", "/v1/idempotency-keys/orders.nope/k", acme, "", ""), http.StatusNotFound)
	want(b.do(t, "GET", "/v1/idempotency-keys/orders.create/caf%C3%A9", acme, "", ""), http.StatusBadRequest)
	want(b.do(t, "GET", "/v1/idempotency-keys/orders.create/k", "", "", ""), http.StatusUnauthorized)
	// A cancel by key of a payment never asked for (200 prevented), and of a
	// succeeded one (202 refund_started) further down; its refusals.
	cancelBody := func(order, key string) string {
		return fmt.Sprintf(`{"order_id":%q,"idempotency_key":%q}`, order, key)
	}
	want(b.do(t, "POST", "/v1/payments/cancel-by-key", acme, "oa-cancel-1", cancelBody(orderID, "oa-never-sent")), http.StatusOK)
	want(b.do(t, "GET", "/v1/idempotency-keys/payments.create/oa-never-sent", acme, "", ""), http.StatusOK)
	want(b.do(t, "POST", "/v1/payments/cancel-by-key", acme, "oa-cancel-2", cancelBody("00000000-0000-7000-8000-000000000000", "k")), http.StatusNotFound)
	want(b.do(t, "POST", "/v1/payments/cancel-by-key", acme, "oa-cancel-3", `{"order_id":"x"}`), http.StatusUnprocessableEntity)
	want(b.do(t, "POST", "/v1/payments/cancel-by-key", acme, "", cancelBody(orderID, "k")), http.StatusBadRequest)
	want(b.do(t, "POST", "/v1/payments/cancel-by-key", "", "oa-cancel-4", cancelBody(orderID, "k")), http.StatusUnauthorized)
	if replay.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("replay is not marked Idempotent-Replayed: true")
	}
	wantProblem(t, b.do(t, "POST", "/v1/orders", acme, "oa-order", `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":3}]}`), 422, "idempotency_key_reused")
	wantProblem(t, b.do(t, "POST", "/v1/orders", acme, "oa-invalid", `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":0}],"x":1}`), 422, "validation_failed")
	wantProblem(t, b.do(t, "POST", "/v1/orders", acme, "oa-invalid", `{"currency":`), 400, "invalid_json")
	wantProblem(t, b.do(t, "POST", "/v1/orders", acme, "", orderBody), 400, "idempotency_key_missing")
	wantProblem(t, b.do(t, "POST", "/v1/orders", acme, "has space", orderBody), 400, "idempotency_key_invalid")
	wantProblem(t, b.do(t, "POST", "/v1/orders", "", "oa-anon", orderBody), 401, "unauthorized")
	wantProblem(t, b.do(t, "GET", "/v1/orders", "sk_test_nobody", "", ""), 401, "unauthorized")
	wantProblem(t, b.do(t, "GET", "/v1/orders/"+orderID, globex, "", ""), 404, "not_found")
	wantProblem(t, b.do(t, "GET", "/v1/orders/not-a-uuid", acme, "", ""), 404, "not_found")
	wantProblem(t, b.do(t, "GET", "/v1/nothing-here", acme, "", ""), 404, "not_found")
	notAllowed := b.do(t, "DELETE", "/v1/orders", acme, "", "")
	wantProblem(t, notAllowed, 405, "method_not_allowed")
	if got := notAllowed.header.Get("Allow"); !strings.Contains(got, "GET") || !strings.Contains(got, "POST") {
		t.Fatalf("405 Allow = %q, want GET and POST", got)
	}
	big := `{"currency":"EUR","items":[{"sku":"` + strings.Repeat("x", 70<<10) + `","quantity":1}]}`
	wantProblem(t, b.do(t, "POST", "/v1/orders", acme, "oa-big", big), 413, "request_too_large")
	want(b.do(t, "GET", "/v1/orders/"+orderID, acme, "", ""), http.StatusOK)
	want(b.do(t, "POST", "/v1/orders", acme, "oa-order-2", orderBody), http.StatusCreated)
	page := want(b.do(t, "GET", "/v1/orders?limit=1", acme, "", ""), http.StatusOK).json(t)
	cursor, ok := page["next_cursor"].(string)
	if !ok {
		t.Fatalf("first of two pages has no next_cursor: %v", page)
	}
	want(b.do(t, "GET", "/v1/orders?limit=1&cursor="+cursor, acme, "", ""), http.StatusOK)
	wantProblem(t, b.do(t, "GET", "/v1/orders?limit=0", acme, "", ""), 422, "validation_failed")

	// Payments: pay, replay, already paid, decline, provider unavailable.
	paid := want(b.pay(t, orderID, "oa-pay", "pm_card_ok"), http.StatusCreated)
	paymentID := paid.json(t)["id"].(string)
	want(b.pay(t, orderID, "oa-pay", "pm_card_ok"), http.StatusCreated)
	wantProblem(t, b.pay(t, orderID, "oa-pay-again", "pm_card_ok"), 409, "order_already_paid")
	wantProblem(t, b.pay(t, orderID, "", "pm_card_ok"), 400, "idempotency_key_missing")
	wantProblem(t, b.pay(t, orderID, "oa-pay-bad", "pm_card_ok\",\"x\":\"1"), 422, "validation_failed")
	wantProblem(t, b.pay(t, "01a22931-c9da-71c4-a494-fc128972f4cb", "oa-pay-none", "pm_card_ok"), 404, "not_found")
	want(b.do(t, "GET", "/v1/payments/"+paymentID, acme, "", ""), http.StatusOK)
	wantProblem(t, b.do(t, "GET", "/v1/payments/01a22931-c9da-71c4-a494-fc128972f4cb", acme, "", ""), 404, "not_found")

	declinedOrder, _ := b.order(t, "oa-order-declined")
	declined := wantProblem(t, b.pay(t, declinedOrder, "oa-decline", "pm_card_declined"), 402, "card_declined")
	if !strings.HasPrefix(declined["instance"].(string), "/v1/payments/") {
		t.Fatalf("card_declined instance = %v", declined["instance"])
	}
	if r := b.pay(t, declinedOrder, "oa-decline", "pm_card_declined"); r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("decline replay = %d replayed=%q", r.status, r.header.Get("Idempotent-Replayed"))
	}
	failedPayment := strings.TrimPrefix(declined["instance"].(string), "/v1/payments/")

	unknownOrder, _ := b.order(t, "oa-order-unknown")
	b.faults(t, pspsim.Faults{FailNext: 1}) // a 5xx: the outcome is unknown
	wantProblem(t, b.pay(t, unknownOrder, "oa-pay-unknown", "pm_card_ok"), 503, "payment_provider_unavailable")
	want(b.pay(t, unknownOrder, "oa-pay-unknown", "pm_card_ok"), http.StatusCreated)
	want(b.do(t, "POST", "/v1/payments/cancel-by-key", acme, "oa-cancel-5", cancelBody(unknownOrder, "oa-pay-unknown")), http.StatusAccepted)
	wantProblem(t, b.pay(t, orderID, "oa-never-sent", "pm_card_ok"), 409, "payment_cancelled")

	// Cancels: a cancelled order, its replay, a paid order refused, a
	// cancelled order not payable, a reused key, no key, no such order.
	cancelled, _ := b.order(t, "oa-order-cancelled")
	cancel := func(id, key, body string) response {
		return b.do(t, "POST", "/v1/orders/"+id+"/cancel", acme, key, body)
	}
	want(cancel(cancelled, "oa-cancel", `{"reason":"changed my mind"}`), http.StatusOK)
	want(cancel(cancelled, "oa-cancel", `{"reason":"changed my mind"}`), http.StatusOK)
	wantProblem(t, cancel(cancelled, "oa-cancel", ``), 422, "idempotency_key_reused")
	wantProblem(t, cancel(cancelled, "oa-cancel-bad", `{"reason":""}`), 422, "validation_failed")
	wantProblem(t, cancel(cancelled, "oa-cancel-bad", `{"reason":`), 400, "invalid_json")
	wantProblem(t, cancel(cancelled, "", ``), 400, "idempotency_key_missing")
	wantProblem(t, cancel("01a22931-c9da-71c4-a494-fc128972f4cb", "oa-cancel-none", ``), 404, "not_found")
	wantProblem(t, b.do(t, "POST", "/v1/orders/"+cancelled+"/cancel", "", "oa-cancel-anon", ``), 401, "unauthorized")
	wantProblem(t, cancel(orderID, "oa-cancel-paid", ``), 409, "order_not_cancellable")
	wantProblem(t, b.pay(t, cancelled, "oa-pay-cancelled", "pm_card_ok"), 409, "order_not_payable")

	// Refunds: refund, replay, over-refund, not refundable, invalid amount.
	refund := func(paymentID, key, body string) response {
		return b.do(t, "POST", "/v1/payments/"+paymentID+"/refunds", acme, key, body)
	}
	refunded := want(refund(paymentID, "oa-refund", `{"amount":500}`), http.StatusCreated)
	want(refund(paymentID, "oa-refund", `{"amount":500}`), http.StatusCreated)
	want(b.do(t, "GET", refunded.header.Get("Location"), acme, "", ""), http.StatusOK)
	wantProblem(t, b.do(t, "GET", refunded.header.Get("Location"), globex, "", ""), 404, "not_found")
	wantProblem(t, b.do(t, "GET", "/v1/refunds/not-a-uuid", acme, "", ""), 404, "not_found")
	wantProblem(t, refund(paymentID, "oa-refund-over", `{"amount":1000000}`), 422, "refund_exceeds_payment")
	wantProblem(t, refund(paymentID, "oa-refund-over", `{"amount":1000000}`), 422, "refund_exceeds_payment")
	wantProblem(t, refund(failedPayment, "oa-refund-failed", `{"amount":1}`), 409, "payment_not_refundable")
	wantProblem(t, refund(paymentID, "oa-refund-zero", `{"amount":0}`), 422, "validation_failed")
	wantProblem(t, refund(paymentID, "oa-refund", `{"amount":501}`), 422, "idempotency_key_reused")
	wantProblem(t, refund("01a22931-c9da-71c4-a494-fc128972f4cb", "oa-refund-none", `{"amount":1}`), 404, "not_found")
	b.faults(t, pspsim.Faults{FailNext: 1})
	wantProblem(t, refund(paymentID, "oa-refund-unknown", `{"amount":100}`), 503, "payment_provider_unavailable")
	want(refund(paymentID, "oa-refund-unknown", `{"amount":100}`), http.StatusCreated)

	// Events.
	events := want(b.do(t, "GET", "/v1/events?limit=2", acme, "", ""), http.StatusOK).json(t)
	next, ok := events["next_cursor"].(string)
	if !ok {
		t.Fatalf("events page without next_cursor: %v", events)
	}
	want(b.do(t, "GET", "/v1/events?cursor="+next, acme, "", ""), http.StatusOK)
	wantProblem(t, b.do(t, "GET", "/v1/events?cursor=x", acme, "", ""), 422, "validation_failed")

	// Provider webhooks.
	delivery := `{"id":"evt_oa_1","type":"charge.succeeded","created":1767225600,"data":{"object":{"id":"ch_oa_1","amount":100,"currency":"EUR","status":"succeeded","failure_code":null,"amount_refunded":0,"metadata":{"reference":"01a22931-c9da-71c4-a494-fc128972f4cb"}}}}`
	if r := want(b.webhook(t, "msg_oa_1", delivery, true), http.StatusOK).json(t); r["duplicate"] != false {
		t.Fatalf("first delivery = %v", r)
	}
	if r := want(b.webhook(t, "msg_oa_1", delivery, true), http.StatusOK).json(t); r["duplicate"] != true {
		t.Fatalf("redelivery = %v", r)
	}
	wantProblem(t, b.webhook(t, "msg_oa_2", delivery, false), 401, "unauthorized")
	wantProblem(t, b.webhook(t, "msg_oa_3", `{"id":`, true), 400, "invalid_json")
	wantProblem(t, b.webhook(t, "msg_oa_5", `{"id":"`+strings.Repeat("x", 70<<10)+`"}`, true), 413, "request_too_large")
	wantProblem(t, b.webhook(t, "msg_oa_4", `{"id":"evt_oa_4","type":"charge.exploded","data":{"object":{"id":"ch_1"}}}`, true), 422, "validation_failed")

	// Operator endpoints (ADMIN_TOKEN): the first order's event is made
	// stuck, listed, retried (the dispatcher publishes it again), retried
	// once more (published: nothing to do) and replayed.
	ctx := context.Background()
	var eventID string
	if err := b.pool.QueryRow(ctx, `SELECT id::text FROM outbox_events WHERE aggregate_id = $1 AND event_type = 'order.created'`,
		orderID).Scan(&eventID); err != nil {
		t.Fatalf("order.created event of %s: %v", orderID, err)
	}
	published := func() bool {
		return b.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND published_at IS NOT NULL`, eventID) == 1
	}
	testkit.WaitFor(t, 15*time.Second, "the event to be published", published)
	// As the dispatcher leaves an event after its last failed attempt; once
	// published, the dispatcher no longer touches the row, so this does not race.
	if _, err := b.pool.Exec(ctx, `UPDATE outbox_events SET published_at = NULL, stuck_at = now(), attempts = 10,
		last_error = 'nats: timeout', next_attempt_at = now() WHERE id = $1`, eventID); err != nil {
		t.Fatal(err)
	}
	stuck := want(b.admin(t, "GET", "/admin/outbox/stuck?limit=5"), http.StatusOK).json(t)
	if data, _ := stuck["data"].([]any); len(data) != 1 || data[0].(map[string]any)["id"] != eventID {
		t.Fatalf("stuck = %v, want the one event %s", stuck, eventID)
	}
	want(b.admin(t, "GET", "/admin/outbox/stuck"), http.StatusOK)
	wantProblem(t, b.admin(t, "GET", "/admin/outbox/stuck?limit=101"), 422, "validation_failed")

	retryPath, replayPath := "/admin/outbox/events/"+eventID+"/retry", "/admin/outbox/events/"+eventID+"/replay"
	retried := want(b.admin(t, "POST", retryPath), http.StatusOK).json(t)
	if ev := retried["event"].(map[string]any); retried["retried"] != true || ev["id"] != eventID || ev["status"] != "pending" {
		t.Fatalf("retry of the stuck event = %v, want it retried and pending", retried)
	}
	testkit.WaitFor(t, 15*time.Second, "the retried event to be published", published) // the dispatcher, woken by the retry
	if again := want(b.admin(t, "POST", retryPath), http.StatusOK).json(t); again["retried"] != false {
		t.Fatalf("retry of the published event = %v, want retried false", again)
	}
	replayed := want(b.admin(t, "POST", replayPath), http.StatusOK).json(t)
	if ev := replayed["event"].(map[string]any); ev["id"] != eventID || ev["status"] != "published" || replayed["stream"] != "ONCEPAY_EVENTS" {
		t.Fatalf("replay = %v, want event %s published, stream ONCEPAY_EVENTS", replayed, eventID)
	}
	const unknownEvent = "01a22931-c9da-71c4-a494-fc128972f4cb"
	wantProblem(t, b.admin(t, "POST", "/admin/outbox/events/"+unknownEvent+"/retry"), 404, "not_found")
	wantProblem(t, b.admin(t, "POST", "/admin/outbox/events/"+unknownEvent+"/replay"), 404, "not_found")
	wantProblem(t, b.admin(t, "POST", "/admin/outbox/events/not-a-uuid/retry"), 404, "not_found")
	wantProblem(t, b.admin(t, "GET", replayPath), 405, "method_not_allowed")

	// The needs-attention queue: empty, then with an item about a webhook
	// (raised here directly: the worker's tests raise it for real).
	want(b.admin(t, "GET", "/admin/attention"), http.StatusOK)
	wantProblem(t, b.admin(t, "GET", "/admin/attention?status=all"), 422, "validation_failed")
	wantProblem(t, b.admin(t, "GET", "/admin/attention/"+unknownEvent), 404, "not_found")
	var item attention.Item
	if err := postgres.InTx(context.Background(), b.pool, func(tx pgx.Tx) error {
		var tenant uuid.UUID
		if err := tx.QueryRow(context.Background(), `SELECT id FROM tenants WHERE slug = 'acme'`).Scan(&tenant); err != nil {
			return err
		}
		var err error
		item, _, err = attention.Raise(context.Background(), tx, attention.Item{Reason: attention.ReasonMismatch, Detail: "webhook msg_oa_odd: other money",
			TenantID: tenant, DeliveryID: "msg_oa_odd", Resource: &attention.Resource{Type: "payment", ID: uuid.New()}, RaisedAt: b.clock.Now()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	want(b.admin(t, "GET", "/admin/attention?limit=1"), http.StatusOK)
	want(b.admin(t, "GET", "/admin/attention/"+item.ID.String()), http.StatusOK)
	want(b.admin(t, "GET", "/admin/attention?status=resolved"), http.StatusOK)

	// Failed operator authentications, last: they are limited per client
	// address (httpapi.AdminAuthBurst, then one every AdminAuthEvery; the
	// service runs on the test's clock, which stands still here). The five
	// allowed are 401; past them the right token too gets 429.
	anonymous := b.do(t, "GET", "/admin/outbox/stuck", "", "", "")
	wantProblem(t, anonymous, 401, "unauthorized")
	if got := anonymous.header.Get("WWW-Authenticate"); got != `Bearer realm="oncepay"` {
		t.Fatalf("401 WWW-Authenticate = %q", got)
	}
	wantProblem(t, b.do(t, "GET", "/admin/outbox/stuck", acme, "", ""), 401, "unauthorized") // an API key is no operator token
	wantProblem(t, b.do(t, "POST", retryPath, "not-the-admin-token", "", ""), 401, "unauthorized")
	wantProblem(t, b.do(t, "POST", replayPath, "not-the-admin-token", "", ""), 401, "unauthorized")
	wantProblem(t, b.do(t, "GET", "/admin/attention", "not-the-admin-token", "", ""), 401, "unauthorized")
	limited := b.admin(t, "GET", "/admin/attention/"+item.ID.String())
	wantProblem(t, limited, 429, "rate_limited")
	if got := limited.header.Get("Retry-After"); got != strconv.Itoa(int(httpapi.AdminAuthEvery/time.Second)) {
		t.Fatalf("429 Retry-After = %q, want %d", got, httpapi.AdminAuthEvery/time.Second)
	}

	// Not ready: the schema no longer matches the binary.
	if _, err := b.pool.Exec(context.Background(), `UPDATE schema_migrations SET dirty = true`); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, b.do(t, "GET", "/readyz", "", "", ""), 503, "service_unavailable")

	// Every operation of the document was exercised.
	seen := v.covered()
	var untried []string
	for path, item := range openAPIMust(t).doc.Paths.Map() {
		for method, op := range item.Operations() {
			n := 0
			for status := range op.Responses.Map() {
				k := op.OperationID + " " + status
				n += seen[k]
				if seen[k] == 0 {
					untried = append(untried, k)
				}
			}
			if n == 0 {
				t.Errorf("%s %s (%s) was not exercised", method, path, op.OperationID)
			}
		}
	}
	slices.Sort(untried)
	t.Logf("documented answers not exercised here: %s", strings.Join(untried, ", "))
	for _, k := range []string{"404", "405"} {
		if seen[k] == 0 {
			t.Errorf("no unrouted %s was checked", k)
		}
	}
}

// webhook posts body to /webhooks/psp as the provider would; sign false sends
// a wrong signature.
func (b *testBundle) webhook(t *testing.T, id, body string, sign bool) response {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(app.DemoWebhookSecret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	ts := strconv.FormatInt(b.clock.Now().Unix(), 10)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + body))
	sig := mac.Sum(nil)
	if !sign {
		sig[0] ^= 0xff
	}
	req, err := http.NewRequest("POST", b.baseURL+"/webhooks/psp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(sig))
	res, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: raw}
}

// admin sends a request to an operator endpoint with the admin token (no
// Idempotency-Key, no body), through b's validating client.
func (b *testBundle) admin(t *testing.T, method, path string) response {
	t.Helper()
	return b.do(t, method, path, openAPIAdminToken, "", "")
}

func openAPIMust(t *testing.T) *openAPISpec {
	t.Helper()
	spec, err := openAPI()
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// (3) The checks catch drift: hand-made exchanges that contradict the
// document are reported, and the same exchanges made right are not, so each
// failure below is about the one thing changed.
func TestOpenAPIValidatorCatchesDrift(t *testing.T) {
	t.Parallel()
	spec := openAPIMust(t)
	const id = "01968c3e-5a00-7b2d-8e4f-0a1b2c3d4e5f"
	const order = `{"id":"` + id + `","status":"awaiting_payment","currency":"EUR","amount_total":3600,` +
		`"items":[{"sku":"travel-mug","name":"Travel mug","quantity":2,"unit_amount":1800,"amount":3600}],"created_at":"2026-05-04T10:15:30.123456Z"}`
	// orderWith is order with one change.
	orderWith := func(old, new string) string {
		if !strings.Contains(order, old) {
			t.Fatalf("order has no %s", old)
		}
		return strings.Replace(order, old, new, 1)
	}
	jsonHeader := func(kv ...string) http.Header {
		h := http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"rid-1"}}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	problemHeader := http.Header{"Content-Type": {problem.ContentType}, "X-Request-Id": {"rid-1"}}
	created := jsonHeader("Location", "/v1/orders/"+id, "Idempotency-Expires", "Sun, 06 Dec 2026 21:24:18 GMT")
	request := func(method, path string) *http.Request {
		r := httptest.NewRequest(method, "http://oncepay.test"+path, nil)
		r.Header.Set("Authorization", "Bearer "+acme)
		if method == "POST" {
			r.Header.Set("Idempotency-Key", "k-1")
			r.Header.Set("Content-Type", "application/json")
		}
		return r
	}
	getOrder := func(status int, h http.Header, body string) exchange {
		return exchange{req: request("GET", "/v1/orders/"+id), status: status, header: h, body: []byte(body)}
	}
	createOrder := func(reqBody string, status int, h http.Header, body string) exchange {
		return exchange{req: request("POST", "/v1/orders"), reqBody: []byte(reqBody), status: status, header: h, body: []byte(body)}
	}
	pay := func(reqBody string, status int, h http.Header, body string) exchange {
		return exchange{req: request("POST", "/v1/orders/"+id+"/payments"), reqBody: []byte(reqBody), status: status, header: h, body: []byte(body)}
	}
	notFound := `{"type":"urn:oncepay:problem:not_found","title":"Not Found","status":404,"detail":"No such order.","code":"not_found"}`

	for _, tc := range []struct {
		name      string
		good, bad exchange
	}{
		{"amount as a string",
			getOrder(200, jsonHeader(), order),
			getOrder(200, jsonHeader(), orderWith(`"amount_total":3600`, `"amount_total":"3600"`))},
		{"an undocumented member",
			getOrder(200, jsonHeader(), order),
			getOrder(200, jsonHeader(), orderWith(`{"id"`, `{"discount":0,"id"`))},
		{"a required member missing",
			getOrder(200, jsonHeader(), order),
			getOrder(200, jsonHeader(), orderWith(`"currency":"EUR",`, ``))},
		{"null where the document has no null",
			getOrder(200, jsonHeader(), order),
			getOrder(200, jsonHeader(), orderWith(`"created_at":"2026-05-04T10:15:30.123456Z"`, `"created_at":null`))},
		{"an unknown order status",
			getOrder(200, jsonHeader(), order),
			getOrder(200, jsonHeader(), orderWith(`awaiting_payment`, `shipped`))},
		{"an id that is no uuid",
			getOrder(200, jsonHeader(), order),
			getOrder(200, jsonHeader(), orderWith(id, "order-1"))},
		{"an undocumented status",
			getOrder(404, problemHeader, notFound),
			getOrder(418, problemHeader, strings.ReplaceAll(notFound, "404", "418"))},
		{"a problem with a code of another status",
			getOrder(404, problemHeader, notFound),
			getOrder(404, problemHeader, strings.ReplaceAll(notFound, `"not_found"`, `"unauthorized"`))},
		{"a problem code that does not exist",
			getOrder(404, problemHeader, notFound),
			getOrder(404, problemHeader, strings.ReplaceAll(notFound, `"not_found"`, `"gone"`))},
		{"a problem as plain JSON",
			getOrder(404, problemHeader, notFound),
			getOrder(404, jsonHeader(), notFound)},
		{"no X-Request-Id",
			getOrder(200, jsonHeader(), order),
			getOrder(200, http.Header{"Content-Type": {"application/json"}}, order)},
		{"a 201 without Location",
			createOrder(orderBody, 201, created, order),
			createOrder(orderBody, 201, jsonHeader("Idempotency-Expires", "Sun, 06 Dec 2026 21:24:18 GMT"), order)},
		{"a malformed Idempotency-Expires",
			createOrder(orderBody, 201, created, order),
			createOrder(orderBody, 201, jsonHeader("Location", "/v1/orders/"+id, "Idempotency-Expires", "2026-12-06T21:24:18Z"), order)},
		{"a request the document refuses, executed",
			createOrder(orderBody, 201, created, order),
			createOrder(`{"currency":"EUR","items":[{"sku":"travel-mug","quantity":2}],"coupon":"x"}`, 201, created, order)},
		{"a payment method longer than the document allows, executed",
			pay(`{"payment_method":"pm_card_ok"}`, 404, problemHeader, notFound),
			pay(`{"payment_method":"pm_`+strings.Repeat("x", 70)+`"}`, 500, problemHeader, `{"type":"urn:oncepay:problem:internal_error","title":"Internal Server Error","status":500,"code":"internal_error"}`)},
		{"an undocumented path answered",
			exchange{req: httptest.NewRequest("GET", "http://oncepay.test/v1/refunds", nil), status: 404, header: problemHeader, body: []byte(notFound)},
			exchange{req: httptest.NewRequest("GET", "http://oncepay.test/v1/refunds", nil), status: 200, header: jsonHeader(), body: []byte(`{"data":[]}`)}},
		{"a 405 without Allow",
			exchange{req: httptest.NewRequest("PUT", "http://oncepay.test/v1/orders", nil), status: 405,
				header: http.Header{"Content-Type": {problem.ContentType}, "X-Request-Id": {"r"}, "Allow": {"GET, POST"}},
				body:   []byte(`{"type":"urn:oncepay:problem:method_not_allowed","title":"Method Not Allowed","status":405,"code":"method_not_allowed"}`)},
			exchange{req: httptest.NewRequest("PUT", "http://oncepay.test/v1/orders", nil), status: 405, header: problemHeader,
				body: []byte(`{"type":"urn:oncepay:problem:method_not_allowed","title":"Method Not Allowed","status":405,"code":"method_not_allowed"}`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, errs := spec.check(tc.good); len(errs) != 0 {
				t.Fatalf("the correct exchange is refused: %v", errs)
			}
			_, errs := spec.check(tc.bad)
			if len(errs) == 0 {
				t.Fatal("the drifted exchange passes")
			}
			t.Log(errors.Join(errs...)) // why, for -v
		})
	}
}

// The transport reports a drifted answer with t.Errorf and still hands the
// response on unchanged.
func TestOpenAPITransportReportsDrift(t *testing.T) {
	t.Parallel()
	const body = `{"id":"01968c3e-5a00-7b2d-8e4f-0a1b2c3d4e5f","status":"awaiting_payment","currency":"EUR","amount_total":"3600",` +
		`"items":[{"sku":"travel-mug","name":"Travel mug","quantity":2,"unit_amount":1800,"amount":3600}],"created_at":"2026-05-04T10:15:30Z"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", "rid")
		_, _ = io.WriteString(w, body)
	}))
	defer srv.Close()
	rec := &errorRecorder{TB: t}
	v := newOpenAPITransport(rec, nil)
	client := &http.Client{Timeout: 10 * time.Second, Transport: v}
	req, err := http.NewRequest("GET", srv.URL+"/v1/orders/01968c3e-5a00-7b2d-8e4f-0a1b2c3d4e5f", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+acme)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != body {
		t.Fatalf("body = %s, want it unchanged: %s", got, body)
	}
	if n := v.covered()["getOrder 200"]; n != 1 {
		t.Fatalf("checked %d getOrder 200 answers, want 1", n)
	}
	errs := rec.errors()
	if len(errs) != 1 || !strings.Contains(errs[0], "amount_total") {
		t.Fatalf("reported %q, want one error about amount_total", errs)
	}
}

// errorRecorder is a testing.TB whose Errorf records instead of failing.
type errorRecorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *errorRecorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *errorRecorder) errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.errs)
}
