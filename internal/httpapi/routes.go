// Package httpapi is the HTTP surface of the service: every route in one
// file, the middleware chain, and the one place where errors become
// application/problem+json responses.
package httpapi

import (
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/oncepay/oncepay/internal/demo"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/webhooks"
	"github.com/oncepay/oncepay/internal/wire"
	"github.com/oncepay/oncepay/openapi"
	"github.com/oncepay/oncepay/web"
)

// Deps are the parts the routes call.
type Deps struct {
	Logger   *slog.Logger
	Pool     *pgxpool.Pool
	Tenants  *tenants.Service
	Orders   *orders.Handler
	Payments *payments.Handler
	Events   *outbox.Handler
	Webhooks *webhooks.Receiver
	// Demo serves the demo-mode endpoints and the X-Demo-Chaos middleware;
	// outside demo mode they answer 404.
	Demo *demo.Handler
	// OutboxAdmin serves the operator's outbox endpoints, guarded by
	// AdminToken; without a token they are not routed.
	OutboxAdmin *outbox.AdminHandler
	AdminToken  string
	// Metrics serves /metrics; ObserveHTTP receives every request's latency.
	Metrics     http.Handler
	ObserveHTTP func(method, route string, status int, d time.Duration)
}

// New returns the service's HTTP handler.
func New(d Deps) *echo.Echo {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = ErrorHandler(d.Logger)
	// Recover turns a panic into a 500 problem and a log line, never a dead
	// process; it runs inside the logger so the 500 is logged.
	e.Use(
		clientRequestID,
		middleware.RequestID(),
		requestLogger(d.Logger, d.ObserveHTTP),
		d.Demo.Chaos, // outside Recover, so a lost answer is lost even when it is a 500
		middleware.RecoverWithConfig(middleware.RecoverConfig{DisableStackAll: true, DisablePrintStack: true}),
	)
	// Request bodies are bounded where they are read: wire.ReadBody.

	e.GET("/healthz", healthz)
	e.GET("/readyz", readyz(d.Pool))
	e.GET("/metrics", echo.WrapHandler(d.Metrics))
	e.GET("/openapi.yaml", func(c echo.Context) error { return c.Blob(http.StatusOK, openapi.ContentType, openapi.YAML) })
	// The provider authenticates by signature, not by tenant key.
	e.POST("/webhooks/psp", d.Webhooks.Handle)

	// Authentication is attached per route, not to the group: echo turns
	// group middleware into catch-all routes, which would hide 405s.
	auth := tenants.Middleware(d.Tenants)
	v1 := e.Group("/v1")
	v1.GET("/products", d.Orders.Products, auth)
	v1.POST("/orders", d.Orders.Create, auth)
	v1.GET("/orders", d.Orders.List, auth)
	v1.GET("/orders/:id", d.Orders.Get, auth)
	v1.POST("/orders/:id/payments", d.Payments.Pay, auth)
	v1.GET("/payments/:id", d.Payments.Get, auth)
	v1.POST("/payments/:id/refunds", d.Payments.Refund, auth)
	v1.GET("/refunds/:id", d.Payments.GetRefund, auth)
	v1.GET("/events", d.Events.List, auth)

	if d.AdminToken != "" {
		admin := adminAuth(d.AdminToken)
		e.GET("/admin/outbox/stuck", d.OutboxAdmin.Stuck, admin)
		e.POST("/admin/outbox/events/:id/retry", d.OutboxAdmin.Retry, admin)
		e.POST("/admin/outbox/events/:id/replay", d.OutboxAdmin.Replay, admin)
	}

	// The web UI, embedded.
	ui := web.Handler()
	e.GET("/", ui)
	e.GET("/assets/*", ui)

	// Demo mode only (internal/demo); 404 otherwise, with or without a key:
	// the gate runs before the key check. GET /demo needs no key.
	e.GET("/demo", d.Demo.Status)
	e.GET("/demo/orders/:id/payments", d.Demo.OrderPayments, d.Demo.Gate, auth)
	e.GET("/demo/faults", d.Demo.Faults, d.Demo.Gate, auth)
	e.PUT("/demo/faults", d.Demo.SetFaults, d.Demo.Gate, auth)
	e.POST("/demo/events/:id/replay", d.Demo.ReplayEvent, d.Demo.Gate, auth)

	return e
}

// adminAuth admits requests bearing the operator token (compared in
// constant time) in their one Authorization header.
func adminAuth(token string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			values := c.Request().Header.Values("Authorization")
			if len(values) != 1 {
				return problem.New(problem.Unauthorized, "Send the operator token in exactly one Authorization header.")
			}
			got, ok := strings.CutPrefix(values[0], "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
				return problem.New(problem.Unauthorized, "The operator token is not valid.")
			}
			return next(c)
		}
	}
}

func healthz(c echo.Context) error {
	return wire.JSON(c, http.StatusOK, map[string]string{"status": "ok"})
}
