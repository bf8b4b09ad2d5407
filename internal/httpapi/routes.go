// Package httpapi is the HTTP surface of the service: every route in one
// file, the middleware chain, and the one place where errors become
// application/problem+json responses.
package httpapi

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/oncepay/oncepay/internal/attention"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/webhooks"
	"github.com/oncepay/oncepay/internal/wire"
	"github.com/oncepay/oncepay/openapi"
)

// Option configures the handler New returns.
type Option func(*options)

type options struct {
	outboxAdmin    *outbox.AdminHandler
	attentionAdmin *attention.AdminHandler
	adminToken     string
	attentionToken string
	observe        func(method, route string, status int, d time.Duration)
	admission      *Admission
	requestTimeout time.Duration

	onAdminAuthFailure func(result string)
	now                func() time.Time

	outer  []echo.MiddlewareFunc
	routes []func(e *echo.Echo, auth echo.MiddlewareFunc)
}

// DefaultRequestTimeout bounds the work of one request unless
// WithRequestTimeout says otherwise.
const DefaultRequestTimeout = 10 * time.Second

// WithRequestTimeout bounds the work of every request (default
// DefaultRequestTimeout, 10s; internal/app sets WRITE_TIMEOUT): its
// context ends after d, so a database or provider that accepts and never
// answers costs a request d, and its client a 503, never a hung
// connection. Operations that must run to their end (internal/operation)
// detach from it and keep a bound of their own.
func WithRequestTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.requestTimeout = d
		}
	}
}

// WithOutboxAdmin routes the operator's outbox endpoints (/admin/outbox/...)
// to h, guarded by the bearer token (ADMIN_TOKEN), with failed attempts
// limited per client address (adminGuard). The default is none:
// without this option, or with an empty token, they are not routed and
// answer 404 like any unknown path.
func WithOutboxAdmin(h *outbox.AdminHandler, token string) Option {
	return func(o *options) { o.outboxAdmin, o.adminToken = h, token }
}

// WithAttentionAdmin routes the operator's view of the needs-attention
// queue (/admin/attention, /admin/attention/{id}) to h, guarded by the
// bearer token (ADMIN_TOKEN, the same as the outbox's). The default is none:
// without this option, or with an empty token, they answer 404.
func WithAttentionAdmin(h *attention.AdminHandler, token string) Option {
	return func(o *options) { o.attentionAdmin, o.attentionToken = h, token }
}

// WithClock is the clock of the budgets of failed operator
// authentications (default time.Now); a test's service runs on the test's
// clock.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.now = now
		}
	}
}

// WithAdminAuthObserver receives every failed authentication at the
// operator's endpoints with its result (AdminAuthResults), e.g. for
// metrics (default none). It must not block.
func WithAdminAuthObserver(fn func(result string)) Option {
	return func(o *options) {
		if fn != nil {
			o.onAdminAuthFailure = fn
		}
	}
}

// WithRequestObserver receives every request's method, route, status and
// latency, e.g. for metrics (default none). It runs on the request's
// goroutine and must not block.
func WithRequestObserver(fn func(method, route string, status int, d time.Duration)) Option {
	return func(o *options) {
		if fn != nil {
			o.observe = fn
		}
	}
}

// WithAdmission bounds the requests worked on at once with a (default:
// NewAdmission(DefaultMaxInFlight, DefaultAdmissionWait) and the other
// defaults of admission).
func WithAdmission(a *Admission) Option {
	return func(o *options) {
		if a != nil {
			o.admission = a
		}
	}
}

// WithRoutes adds routes that are not part of the service's contract, a
// demo's for one: add receives the service's echo after its own routes,
// and the middleware that authenticates a tenant for /v1, to attach to the
// routes that need a tenant.
func WithRoutes(add func(e *echo.Echo, auth echo.MiddlewareFunc)) Option {
	return func(o *options) {
		if add != nil {
			o.routes = append(o.routes, add)
		}
	}
}

// WithOuterMiddleware runs mw on every request, inside the request log and
// the deadline and outside Recover, so that what mw does to an answer (a
// demo that loses it on purpose) applies to a 500 too.
func WithOuterMiddleware(mw echo.MiddlewareFunc) Option {
	return func(o *options) {
		if mw != nil {
			o.outer = append(o.outer, mw)
		}
	}
}

// New returns the service's HTTP handler. Its collaborators come in the
// order the routes below use them: pool answers /readyz, metrics serves
// /metrics, receiver the provider's webhooks, tenantSvc authenticates the
// /v1 routes, which orderAPI, paymentAPI, eventAPI and keyAPI serve. logger gets one
// line per request; a 5xx's is at ERROR and carries its cause. Every route
// of the service is here (WithRoutes adds others).
func New(pool *pgxpool.Pool, metrics http.Handler, receiver *webhooks.Receiver, tenantSvc *tenants.Service,
	orderAPI *orders.Handler, paymentAPI *payments.Handler, eventAPI *outbox.Handler, keyAPI *operation.KeyHandler,
	logger *slog.Logger, opts ...Option) *echo.Echo {
	o := options{
		observe:            func(string, string, int, time.Duration) {},
		onAdminAuthFailure: func(string) {},
		now:                time.Now,
		admission:          NewAdmission(DefaultMaxInFlight, DefaultAdmissionWait),
		requestTimeout:     DefaultRequestTimeout,
	}
	for _, opt := range opts {
		opt(&o)
	}
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = ErrorHandler(logger)
	// Recover turns a panic into a 500 problem and a log line, never a dead
	// process; it runs inside the logger so the 500 is logged.
	e.Use(traceRequest, clientRequestID, middleware.RequestID(), requestLogger(logger, o.observe), requestDeadline(o.requestTimeout))
	e.Use(o.outer...)
	e.Use(
		middleware.RecoverWithConfig(middleware.RecoverConfig{DisableStackAll: true, DisablePrintStack: true}),
		// Read the body, then past capacity shed at once, before the key
		// check (admission.go); inside the logger, so a shed request is
		// logged and counted like any other.
		o.admission.middleware,
	)
	// Request bodies are bounded where they are read: wire.ReadBody, first
	// by admission, then from memory by the handler.

	e.GET("/healthz", healthz)
	e.GET("/readyz", readyz(pool))
	e.GET("/metrics", echo.WrapHandler(metrics))
	e.GET("/openapi.yaml", func(c echo.Context) error { return c.Blob(http.StatusOK, openapi.ContentType, openapi.YAML) })
	// The provider authenticates by signature, not by tenant key.
	e.POST("/webhooks/psp", receiver.Handle)

	// Authentication is attached per route, not to the group: echo turns
	// group middleware into catch-all routes, which would hide 405s. Once a
	// request's tenant is known, admission holds it to the tenant's share.
	auth := o.admission.authenticated(tenants.Middleware(tenantSvc))
	v1 := e.Group("/v1")
	v1.GET("/products", orderAPI.Products, auth)
	v1.POST("/orders", orderAPI.Create, auth)
	v1.GET("/orders", orderAPI.List, auth)
	v1.GET("/orders/:id", orderAPI.Get, auth)
	v1.POST("/orders/:id/cancel", orderAPI.Cancel, auth)
	v1.POST("/orders/:id/payments", paymentAPI.Pay, auth)
	v1.GET("/payments/:id", paymentAPI.Get, auth)
	v1.POST("/payments/cancel-by-key", paymentAPI.CancelByKey, auth)
	v1.POST("/payments/:id/refunds", paymentAPI.Refund, auth)
	v1.GET("/refunds/:id", paymentAPI.GetRefund, auth)
	v1.GET("/events", eventAPI.List, auth)
	// The key is one path segment, URL-encoded ("/" as %2F).
	v1.GET("/idempotency-keys/:operation/:key", keyAPI.Get, auth)

	// The operator's endpoints: one guard per token, so that both sets of
	// routes spend one budget of failed attempts per address when they
	// share the token (adminauth.go).
	guards := map[string]*adminGuard{}
	guard := func(token string) echo.MiddlewareFunc {
		if guards[token] == nil {
			guards[token] = newAdminGuard(token, o.now, o.onAdminAuthFailure)
		}
		return guards[token].middleware
	}
	if o.adminToken != "" && o.outboxAdmin != nil {
		admin := guard(o.adminToken)
		e.GET("/admin/outbox/stuck", o.outboxAdmin.Stuck, admin)
		e.POST("/admin/outbox/events/:id/retry", o.outboxAdmin.Retry, admin)
		e.POST("/admin/outbox/events/:id/replay", o.outboxAdmin.Replay, admin)
	}
	if o.attentionToken != "" && o.attentionAdmin != nil {
		admin := guard(o.attentionToken)
		e.GET("/admin/attention", o.attentionAdmin.List, admin)
		e.GET("/admin/attention/:id", o.attentionAdmin.Get, admin)
	}

	for _, add := range o.routes {
		add(e, auth)
	}
	return e
}

// Starting returns the handler of a service that listens but is not built
// yet: it waits for its database and its broker (app.Start). /healthz
// answers 200, since the process is alive and will serve; /readyz and every
// other path answer 503 service_unavailable with Retry-After, and the detail
// says what the service waits for (waiting returns it, e.g. "the database
// and NATS"), so a load balancer keeps traffic away and a person sees why.
// Those answers are logged at INFO: they are what a start looks like.
func Starting(waiting func() string, logger *slog.Logger) *echo.Echo {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = ErrorHandler(logger)
	e.Use(clientRequestID, middleware.RequestID(), requestLogger(logger, func(string, string, int, time.Duration) {}))
	starting := func(echo.Context) error {
		return &problem.Error{Code: problem.ServiceUnavailable, Detail: "The service is starting: it waits for " + waiting() + ".", RetryAfter: time.Second, Err: errStarting}
	}
	e.GET("/healthz", healthz)
	e.Any("/*", starting)
	return e
}

func healthz(c echo.Context) error {
	return wire.JSON(c, http.StatusOK, map[string]string{"status": "ok"})
}
