package httpapi_test

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/oncepay/oncepay/internal/httpapi"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/testkit"
)

// logBuffer collects the error handler's log lines; the server logs from
// its own goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// server is a real echo with the service's error handler, served over
// loopback HTTP, and the handler's log.
type server struct {
	e    *echo.Echo
	url  string
	http *http.Client
	logs *logBuffer
}

// serve starts an echo whose routes are added by routes.
func serve(t *testing.T, routes func(e *echo.Echo)) *server {
	t.Helper()
	logs := &logBuffer{}
	e := echo.New()
	e.HideBanner = true
	e.HTTPErrorHandler = httpapi.ErrorHandler(slog.New(slog.NewTextHandler(logs, nil)))
	routes(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &server{e: e, url: srv.URL, http: srv.Client(), logs: logs}
}

func (s *server) do(t *testing.T, method, path string, body []byte) testkit.Response {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return testkit.Do(t, s.http, req)
}

// fail returns a handler that answers with err.
func fail(err error) echo.HandlerFunc {
	return func(echo.Context) error { return err }
}

// statuses is the HTTP contract's table of codes (docs/CONTRACT.md),
// written out independently of the code's own table.
var statuses = map[problem.Code]int{
	problem.Unauthorized:               401,
	problem.IdempotencyKeyMissing:      400,
	problem.IdempotencyKeyInvalid:      400,
	problem.InvalidJSON:                400,
	problem.CardDeclined:               402,
	problem.NotFound:                   404,
	problem.MethodNotAllowed:           405,
	problem.RequestInProgress:          409,
	problem.AwaitingOperator:           409,
	problem.OrderAlreadyPaid:           409,
	problem.OrderNotPayable:            409,
	problem.OrderNotCancellable:        409,
	problem.PaymentCancelled:           409,
	problem.PaymentNotRefundable:       409,
	problem.RequestTooLarge:            413,
	problem.RequestTimeout:             408,
	problem.ClientClosedRequest:        499,
	problem.IdempotencyKeyReused:       422,
	problem.ValidationFailed:           422,
	problem.RefundExceedsPayment:       422,
	problem.PaymentRejected:            422,
	problem.PaymentProviderUnavailable: 503,
	problem.ServiceUnavailable:         503,
	problem.RateLimited:                429,
	problem.Overloaded:                 503,
	problem.Internal:                   500,
}

// genericDetail is what a client reads about an internal error.
const genericDetail = "Something went wrong on our side. It was logged; retrying with the same Idempotency-Key is safe."

// Every code a handler can return reaches the client with its status, its
// type and its detail.
func TestEveryCodeAnswersWithItsStatus(t *testing.T) {
	t.Parallel()
	s := serve(t, func(e *echo.Echo) {
		e.GET("/codes/:code", func(c echo.Context) error {
			code := problem.Code(c.Param("code"))
			return problem.New(code, "detail of %s", code)
		})
	})
	for code, status := range statuses {
		t.Run(string(code), func(t *testing.T) {
			t.Parallel()
			p := testkit.WantProblem(t, s.do(t, http.MethodGet, "/codes/"+string(code), nil), status, code)
			want := "detail of " + string(code)
			if code == problem.Internal {
				want = genericDetail
			}
			title := http.StatusText(status)
			if status == 499 { // no reason phrase in HTTP: nginx's
				title = "Client Closed Request"
			}
			if p.Type != "urn:oncepay:problem:"+string(code) || p.Title != title || p.Detail != want {
				t.Fatalf("problem = %+v, want type urn:oncepay:problem:%s, title %q, detail %q", p, code, http.StatusText(status), want)
			}
		})
	}
	t.Run("validation fields", func(t *testing.T) {
		t.Parallel()
		s := serve(t, func(e *echo.Echo) {
			e.POST("/orders", fail(problem.Validation(problem.FieldError{Field: "items[1].sku", Message: "unknown SKU"})))
		})
		p := testkit.WantProblem(t, s.do(t, http.MethodPost, "/orders", nil), 422, problem.ValidationFailed)
		if len(p.Errors) != 1 || p.Errors[0] != (problem.FieldError{Field: "items[1].sku", Message: "unknown SKU"}) {
			t.Fatalf("errors = %+v, want items[1].sku: unknown SKU", p.Errors)
		}
	})
}

// The table above holds every code internal/problem declares, so a new code
// cannot reach clients without a status someone chose.
func TestEveryDeclaredCodeIsInTheTable(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "problem", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	declared := 0
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if typ, ok := vs.Type.(*ast.Ident); !ok || typ.Name != "Code" {
					continue
				}
				for _, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok {
						t.Fatalf("%s: a Code constant that is not a string literal", fset.Position(v.Pos()))
					}
					code, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					declared++
					if _, ok := statuses[problem.Code(code)]; !ok {
						t.Errorf("code %q is declared in internal/problem but has no status in this test's table", code)
					}
				}
			}
		}
	}
	if declared != len(statuses) {
		t.Fatalf("internal/problem declares %d codes, the table has %d", declared, len(statuses))
	}
}

// echo's own errors (routing, body limit, its 401 and 400) answer with the
// service's codes.
func TestEchoErrorsAnswerWithTheServicesCodes(t *testing.T) {
	t.Parallel()
	s := serve(t, func(e *echo.Echo) {
		e.GET("/things", func(c echo.Context) error { return c.String(http.StatusOK, "things") })
		e.POST("/upload", func(c echo.Context) error {
			_, err := c.FormParams() // reads the body through the limit
			return err
		}, middleware.BodyLimit("1K"))
		e.GET("/echo-unauthorized", fail(echo.ErrUnauthorized))
		e.GET("/echo-bad-request", fail(echo.NewHTTPError(http.StatusBadRequest, "code=400, message=Syntax error")))
	})
	for _, tc := range []struct {
		name, method, path string
		body               []byte
		status             int
		code               problem.Code
	}{
		{"unrouted path", http.MethodGet, "/nothing-here", nil, 404, problem.NotFound},
		{"method not routed", http.MethodDelete, "/things", nil, 405, problem.MethodNotAllowed},
		{"body over the limit", http.MethodPost, "/upload", bytes.Repeat([]byte("x"), 2048), 413, problem.RequestTooLarge},
		{"echo's 401", http.MethodGet, "/echo-unauthorized", nil, 401, problem.Unauthorized},
		{"echo's 400", http.MethodGet, "/echo-bad-request", nil, 400, problem.InvalidJSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := testkit.WantProblem(t, s.do(t, tc.method, tc.path, tc.body), tc.status, tc.code)
			if strings.Contains(p.Detail, "code=") || strings.Contains(p.Detail, "Syntax error") {
				t.Fatalf("detail %q repeats echo's message", p.Detail)
			}
		})
	}
}

// A database that is away, and a row lock held past the lock timeout (the
// chaos run saw one while a concurrent payment of the same order waited out
// a database outage), are retryable: 503 with Retry-After, never a 500.
func TestRetryableDatabaseErrorsAreUnavailable(t *testing.T) {
	t.Parallel()
	s := serve(t, func(e *echo.Echo) {
		e.GET("/lock-timeout", fail(fmt.Errorf("advance order: %w", &pgconn.PgError{Code: "55P03", Message: "canceling statement due to lock timeout"})))
		e.GET("/terminated", fail(fmt.Errorf("query: %w", &pgconn.PgError{Code: "57P01"})))
	})
	for _, path := range []string{"/lock-timeout", "/terminated"} {
		r := s.do(t, http.MethodGet, path, nil)
		testkit.WantProblem(t, r, http.StatusServiceUnavailable, problem.ServiceUnavailable)
		if r.Header.Get("Retry-After") == "" {
			t.Errorf("%s: 503 without Retry-After", path)
		}
	}
}

// An error the service did not classify is a 500 internal_error whose body
// says nothing about it; the log line has the cause. A 5xx the service did
// classify keeps its client-safe detail, and its cause is only logged.
func TestInternalErrorsAreLoggedNotShown(t *testing.T) {
	t.Parallel()
	const secret = "password authentication failed for user oncepay at 10.1.2.3"
	for _, tc := range []struct {
		name       string
		err        error
		status     int
		code       problem.Code
		wantDetail string
	}{
		{"plain error", fmt.Errorf("load products: %w", errors.New(secret)), 500, problem.Internal, genericDetail},
		{"echo status the service does not use", echo.NewHTTPError(http.StatusTeapot, secret), 500, problem.Internal, genericDetail},
		{"internal problem with an internal detail", &problem.Error{Code: problem.Internal, Detail: secret, Err: errors.New("cause")}, 500, problem.Internal, genericDetail},
		{"classified 5xx", &problem.Error{Code: problem.PaymentProviderUnavailable, Detail: "The payment provider did not answer.", RetryAfter: 2 * time.Second, Err: errors.New(secret)},
			503, problem.PaymentProviderUnavailable, "The payment provider did not answer."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := serve(t, func(e *echo.Echo) { e.POST("/orders", fail(tc.err)) })
			r := s.do(t, http.MethodPost, "/orders", nil)
			p := testkit.WantProblem(t, r, tc.status, tc.code)
			if p.Detail != tc.wantDetail || strings.Contains(string(r.Body), "10.1.2.3") || strings.Contains(string(r.Body), "password") {
				t.Fatalf("body %s: want detail %q and nothing of the cause", r.Body, tc.wantDetail)
			}
			logs := s.logs.String()
			for _, want := range []string{"level=ERROR", `msg="request failed"`, "10.1.2.3", "method=POST", "path=/orders"} {
				if !strings.Contains(logs, want) {
					t.Fatalf("log %q lacks %q", logs, want)
				}
			}
		})
	}
}

// A 4xx is the client's business: it is not logged as a failure.
func TestClientErrorsAreNotLoggedAsFailures(t *testing.T) {
	t.Parallel()
	s := serve(t, func(e *echo.Echo) { e.POST("/orders", fail(problem.New(problem.ValidationFailed, "bad"))) })
	testkit.WantProblem(t, s.do(t, http.MethodPost, "/orders", nil), 422, problem.ValidationFailed)
	if logs := s.logs.String(); logs != "" {
		t.Fatalf("a 422 was logged: %q", logs)
	}
}

// A shed request is not a failure of the service: under overload there are
// thousands, and an error line each would only add to the load.
func TestShedRequestsAreNotLoggedAsFailures(t *testing.T) {
	t.Parallel()
	s := serve(t, func(e *echo.Echo) {
		e.POST("/orders", fail(&problem.Error{Code: problem.Overloaded, Detail: "at capacity", RetryAfter: time.Second}))
	})
	testkit.WantProblem(t, s.do(t, http.MethodPost, "/orders", nil), 503, problem.Overloaded)
	if logs := s.logs.String(); logs != "" {
		t.Fatalf("a shed request was logged as a failure: %q", logs)
	}
}

// Retry-After is sent in whole seconds, rounded up so that a client never
// retries sooner than the error says, when the error carries one, and not
// otherwise.
func TestRetryAfterIsSentInSeconds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		after time.Duration
		want  string
	}{
		{0, ""},
		{300 * time.Millisecond, "1"},
		{time.Second, "1"},
		{1500 * time.Millisecond, "2"},
		{2 * time.Second, "2"},
		{30 * time.Second, "30"},
	} {
		t.Run(tc.after.String(), func(t *testing.T) {
			t.Parallel()
			s := serve(t, func(e *echo.Echo) {
				e.POST("/pay", fail(&problem.Error{Code: problem.RequestInProgress, Detail: "busy", RetryAfter: tc.after}))
			})
			r := s.do(t, http.MethodPost, "/pay", nil)
			testkit.WantProblem(t, r, 409, problem.RequestInProgress)
			if got, ok := r.Header["Retry-After"]; tc.want == "" && ok || tc.want != "" && (len(got) != 1 || got[0] != tc.want) {
				t.Fatalf("Retry-After = %q, want %q", got, tc.want)
			}
		})
	}
}

// A 401 names its scheme (RFC 9110), unless its error says the caller
// authenticates by signature (NoChallenge); other answers do not.
func TestUnauthorizedNamesItsScheme(t *testing.T) {
	t.Parallel()
	s := serve(t, func(e *echo.Echo) {
		e.GET("/problem", fail(problem.New(problem.Unauthorized, "The API key is not valid.")))
		e.GET("/echo", fail(echo.ErrUnauthorized))
		e.GET("/not-found", fail(problem.New(problem.NotFound, "No such order.")))
		e.GET("/signed", fail(&problem.Error{Code: problem.Unauthorized, Detail: "The signature could not be verified.", NoChallenge: true}))
	})
	for _, path := range []string{"/problem", "/echo"} {
		r := s.do(t, http.MethodGet, path, nil)
		testkit.WantProblem(t, r, 401, problem.Unauthorized)
		if got := r.Header.Get("WWW-Authenticate"); got != `Bearer realm="oncepay"` {
			t.Fatalf("%s: WWW-Authenticate = %q, want Bearer realm=\"oncepay\"", path, got)
		}
	}
	if got := s.do(t, http.MethodGet, "/not-found", nil).Header.Get("WWW-Authenticate"); got != "" {
		t.Fatalf("a 404 has WWW-Authenticate %q", got)
	}
	r := s.do(t, http.MethodGet, "/signed", nil)
	testkit.WantProblem(t, r, 401, problem.Unauthorized)
	if got := r.Header.Get("WWW-Authenticate"); got != "" {
		t.Fatalf("a 401 without a challenge has WWW-Authenticate %q", got)
	}
}

// A HEAD answer has the status and headers of the GET, and no body. Over
// HTTP the server drops a HEAD body itself, so this test reads what the
// handler writes.
func TestHeadAnswersWithoutABody(t *testing.T) {
	t.Parallel()
	s := serve(t, func(e *echo.Echo) {
		e.GET("/orders/:id", fail(problem.New(problem.NotFound, "No such order.")))
		e.HEAD("/orders/:id", fail(problem.New(problem.NotFound, "No such order.")))
	})
	for _, method := range []string{http.MethodHead, http.MethodGet} {
		rec := httptest.NewRecorder()
		s.e.ServeHTTP(rec, httptest.NewRequest(method, "/orders/42", nil))
		if rec.Code != http.StatusNotFound || rec.Header().Get("Content-Type") != problem.ContentType {
			t.Fatalf("%s: status %d, Content-Type %q; want 404, %s", method, rec.Code, rec.Header().Get("Content-Type"), problem.ContentType)
		}
		if gotBody := rec.Body.Len() > 0; gotBody != (method == http.MethodGet) {
			t.Fatalf("%s: body %q", method, rec.Body)
		}
	}
}

// An error after the handler has answered changes nothing the client gets:
// the status and body already sent stay as they are (and a 5xx cause is
// still logged).
func TestCommittedResponseIsLeftAlone(t *testing.T) {
	t.Parallel()
	s := serve(t, func(e *echo.Echo) {
		e.GET("/stream", func(c echo.Context) error {
			if err := c.String(http.StatusOK, "partial answer"); err != nil {
				return err
			}
			return errors.New("connection to the database lost after the answer")
		})
	})
	r := s.do(t, http.MethodGet, "/stream", nil)
	if r.Status != http.StatusOK || string(r.Body) != "partial answer" || r.Header.Get("Content-Type") == problem.ContentType {
		t.Fatalf("answer = %d %q (%s), want 200 \"partial answer\" untouched", r.Status, r.Body, r.Header.Get("Content-Type"))
	}
	if logs := s.logs.String(); !strings.Contains(logs, "connection to the database lost") {
		t.Fatalf("log %q lacks the error", logs)
	}
}
