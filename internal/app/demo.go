package app

import (
	"context"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/demo"
	"github.com/oncepay/oncepay/internal/httpapi"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/web"
)

// demoHTTP is the demo's part of the HTTP surface: the web UI (web) at "/"
// and the demo-mode endpoints and their X-Demo-Chaos header
// (internal/demo), which answer 404 outside demo mode. The service's own
// routes do not depend on it: make starter deletes this file, web/ and
// internal/demo, and the one line of build that calls it
// (docs/FORKING.md).
func (a *App) demoHTTP(orderSvc *orders.Service) []httpapi.Option {
	cfg := a.cfg
	opts := []demo.HandlerOption{
		demo.WithDemoMode(cfg.DemoMode),
		demo.WithReplay(func(ctx context.Context, id uuid.UUID) error {
			_, err := a.outboxAdmin.Replay(ctx, id)
			return err
		}),
	}
	if cfg.PSPURL != "" { // without one there is no provider to ask for its ledger or faults
		opts = append(opts, demo.WithSimulator(demo.NewSimulator(cfg.PSPURL, demo.WithAPIKey(cfg.PSPAPIKey), demo.WithTimeout(cfg.PSPTimeout))))
	}
	h := demo.NewHandler(a.pool, orderSvc, a.payments, a.logger, a.now, opts...)
	ui := web.Handler()
	return []httpapi.Option{
		httpapi.WithOuterMiddleware(h.Chaos),
		httpapi.WithRoutes(func(e *echo.Echo, auth echo.MiddlewareFunc) {
			// The web UI, embedded.
			e.GET("/", ui)
			e.GET("/assets/*", ui)
			// Demo mode only; 404 otherwise, with or without a key: the
			// gate runs before the key check. GET /demo needs no key.
			e.GET("/demo", h.Status)
			e.GET("/demo/orders/:id/payments", h.OrderPayments, h.Gate, auth)
			e.GET("/demo/faults", h.Faults, h.Gate, auth)
			e.PUT("/demo/faults", h.SetFaults, h.Gate, auth)
			e.POST("/demo/events/:id/replay", h.ReplayEvent, h.Gate, auth)
		}),
	}
}
