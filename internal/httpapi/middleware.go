package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/tracing"
	"github.com/oncepay/oncepay/internal/wire"
)

// MaxRequestIDLen bounds a request id a client sends in X-Request-Id.
const MaxRequestIDLen = 128

// clientRequestID drops an X-Request-Id the client sent unless it is 1 to
// MaxRequestIDLen visible ASCII characters, so that echo's RequestID
// generates one instead. The id is logged and stored with the idempotency
// record: bytes PostgreSQL's text refuses (invalid UTF-8, U+0000) would fail
// every POST with a 500, and an unbounded one would be kept for 45 days.
func clientRequestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Request().Header
		if rid := h.Get(echo.HeaderXRequestID); rid != "" && !wire.VisibleASCII(rid, MaxRequestIDLen) {
			h.Del(echo.HeaderXRequestID)
		}
		return next(c)
	}
}

// requestDeadline ends every request's context after d (WithRequestTimeout).
func requestDeadline(d time.Duration) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			ctx, cancel := context.WithTimeout(c.Request().Context(), d)
			defer cancel()
			c.SetRequest(c.Request().WithContext(ctx))
			return next(c)
		}
	}
}

// traceRequest names the request's span, when the request has one that
// records (the server span otelhttp starts around the handler when tracing
// is on, see internal/app), after the route it matched, as metricRoute does
// for the metrics, and puts the tenant it authenticated as on it. The
// operation, the idempotency key and its outcome are put there by the
// idempotency store, which decides them. Without tracing it costs one
// context lookup.
func traceRequest(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		span := trace.SpanFromContext(c.Request().Context())
		if !span.IsRecording() {
			return next(c)
		}
		route := metricRoute(c)
		span.SetName(metricMethod(c.Request().Method) + " " + route)
		span.SetAttributes(semconv.HTTPRoute(route))
		err := next(c)
		if t := tenants.FromContext(c); t.Slug != "" {
			span.SetAttributes(tracing.Tenant.String(t.Slug))
		}
		return err
	}
}

// requestLogger writes one JSON log line per request, and it is the only
// line of a request that failed: at ERROR for a 5xx that is a failure
// (isFailure; a shed request is a WARN, a starting service's answer and a
// client that hung up, 499, are INFO), with the error ErrorHandler
// rendered and its code. Every value in
// it that the client chose is bounded (wire.Loggable), and the idempotency
// key is logged as the key only when it is valid. The request id (one
// transport attempt, for tracing) and the idempotency key (one business
// intent, for correctness) are separate fields, never one for the other:
// a replay shows up as a new request id with an old key.
func requestLogger(logger *slog.Logger, observe func(method, route string, status int, d time.Duration)) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			var rendered error // what ErrorHandler answered with, if anything
			c.Set(renderedErrorKey, &rendered)
			if err := next(c); err != nil {
				c.Error(err) // render now, so the status below is the real one
			}
			req, res := c.Request(), c.Response()
			route := metricRoute(c)
			observe(metricMethod(req.Method), route, res.Status, time.Since(start))
			attrs := []slog.Attr{
				slog.String("method", wire.Loggable(req.Method)),
				slog.String("path", wire.Loggable(req.URL.Path)),
				slog.String("route", route),
				slog.Int("status", res.Status),
				slog.Duration("duration", time.Since(start)),
				slog.String("request_id", res.Header().Get(echo.HeaderXRequestID)),
			}
			if raw := req.Header.Get(idempotency.HeaderKey); raw != "" {
				// Only a key that parsed is logged as the key; anything
				// else is logged bounded, under a name of its own.
				if key, err := idempotency.ParseKey(req.Header); err == nil {
					attrs = append(attrs, slog.String("idempotency_key", string(key)))
				} else {
					attrs = append(attrs, slog.String("idempotency_key_invalid", wire.Loggable(raw)))
				}
			}
			if res.Header().Get(idempotency.HeaderReplayed) == "true" {
				attrs = append(attrs, slog.Bool("replayed", true))
			}
			if t := tenants.FromContext(c); t.Slug != "" {
				attrs = append(attrs, slog.String("tenant", t.Slug))
			}
			level := slog.LevelInfo
			if rendered != nil {
				pe := toProblem(rendered)
				attrs = append(attrs, slog.String("code", string(pe.Code)))
				switch {
				case pe.Code == problem.Overloaded:
					level = slog.LevelWarn // shed by design (admission.go), not a failure
				case isFailure(pe):
					// Also when the answer was sent before the error.
					attrs = append(attrs, slog.String("error", rendered.Error()))
					level = slog.LevelError
				}
			}
			if rendered == nil && res.Status >= 500 {
				level = slog.LevelError // a 5xx a handler wrote itself
			}
			logger.LogAttrs(req.Context(), level, "request", attrs...)
			return nil
		}
	}
}

// metricMethod is a request's method as a metric label: the method itself
// when it is one of the standard ones, OTHER for anything else. A client
// chooses the method freely (any token, up to the header limit), and every
// distinct label value is a new series kept for the life of the process.
func metricMethod(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return method
	}
	return "OTHER"
}

// unmatchedRoute is the route label of a request that matched no route.
const unmatchedRoute = "unmatched"

// metricRoute is the route template a request matched (/v1/orders/:id), as
// a metric label: one of the routes of New, never the request's own path.
func metricRoute(c echo.Context) string {
	if route := c.Path(); route != "" {
		return route
	}
	return unmatchedRoute
}

// readyz answers 200 when the database answers and has every migration this
// binary expects; a load balancer keeps traffic away until then.
func readyz(pool *pgxpool.Pool) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
		defer cancel()
		if err := pool.Ping(ctx); err != nil {
			return &problem.Error{Code: problem.ServiceUnavailable, Detail: "The database is not reachable.", RetryAfter: time.Second, Err: err}
		}
		if err := postgres.SchemaCurrent(ctx, pool); err != nil {
			return &problem.Error{Code: problem.ServiceUnavailable, Detail: "The database schema is not current.", RetryAfter: time.Second, Err: err}
		}
		return wire.JSON(c, http.StatusOK, map[string]string{"status": "ready"})
	}
}
