package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/wire"
)

// ErrorHandler is echo's HTTPErrorHandler: the one place where an error
// becomes a response. A 5xx body says nothing internal; the log says
// everything, once: behind the request logger (New, Starting) the error
// goes on the request's own line, and only a request that no request
// logger sees (a feature's handlers served on their own echo, in that
// feature's tests, which install this handler so that they answer exactly
// as the service does) gets a line of its own here.
func ErrorHandler(logger *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		pe := toProblem(err)
		if isFailure(pe) && clientWentAway(c, err) {
			// The work failed because its client hung up and the request's
			// context ended: a client error, not a failure of the service.
			pe = &problem.Error{Code: problem.ClientClosedRequest, Detail: "The client went away before the answer was ready.", Err: err}
			err = pe
		}
		status := problem.Status(pe.Code)
		// Behind requestLogger, the request's line logs err.
		rendered, behindLogger := c.Get(renderedErrorKey).(*error)
		if behindLogger {
			*rendered = err
		}
		if isFailure(pe) {
			if !behindLogger {
				logger.ErrorContext(c.Request().Context(), "request failed",
					"error", err.Error(),
					"request_id", c.Response().Header().Get(echo.HeaderXRequestID),
					"method", wire.Loggable(c.Request().Method), "path", wire.Loggable(c.Request().URL.Path))
			}
			if pe.Code == problem.Internal {
				pe = &problem.Error{Code: problem.Internal, Detail: "Something went wrong on our side. It was logged; retrying with the same Idempotency-Key is safe."}
			}
		}
		if c.Response().Committed {
			return
		}
		h := c.Response().Header()
		h.Set(echo.HeaderContentType, problem.ContentType)
		if status == http.StatusUnauthorized && !pe.NoChallenge {
			h.Set("WWW-Authenticate", `Bearer realm="oncepay"`) // RFC 9110: a 401 names its scheme
		}
		if pe.RetryAfter > 0 {
			// Whole seconds (RFC 9110), rounded up: a client must not come
			// back sooner than told, and "0" would mean at once.
			h.Set("Retry-After", strconv.FormatInt(int64((pe.RetryAfter+time.Second-1)/time.Second), 10))
		}
		c.Response().WriteHeader(status)
		if c.Request().Method != http.MethodHead {
			_, _ = c.Response().Write(pe.JSON())
		}
	}
}

// renderedErrorKey is where requestLogger gives ErrorHandler a place for
// the error it renders, so that the request's line logs it, whoever called
// the handler: requestLogger itself, echo's Recover after a panic, or the
// demo's lost answer.
const renderedErrorKey = "httpapi.rendered_error"

// isFailure says whether pe is a failure of the service, logged at ERROR
// with its cause: a 5xx, except the ones the service answers by design. A
// shed request is counted in oncepay_http_shed_total: one error line each
// would add to the load exactly when there is too much of it. A service
// that is starting (Starting) answers 503 until it is ready, and a load
// balancer asks /readyz until then: that is how a start looks, not an
// error.
func isFailure(pe *problem.Error) bool {
	return problem.Status(pe.Code) >= 500 && pe.Code != problem.Overloaded && !errors.Is(pe, errStarting)
}

// errStarting is the cause of Starting's answers.
var errStarting = errors.New("the service is starting")

// clientWentAway says whether err is the end of the request's context
// because its client hung up (net/http cancels the context when the
// connection closes): both the context and err say so. A deadline is not
// a hang-up, and an error of another cause stays what it is even when the
// client left meanwhile.
func clientWentAway(c echo.Context, err error) bool {
	return errors.Is(c.Request().Context().Err(), context.Canceled) && errors.Is(err, context.Canceled)
}

// toProblem classifies err: an application error as it is, a database that
// could not be reached or did not answer in time as unavailable, echo's own
// routing and limit errors by status, everything else as internal.
func toProblem(err error) *problem.Error {
	var pe *problem.Error
	if errors.As(err, &pe) {
		return pe
	}
	if postgres.IsUnavailable(err) {
		return &problem.Error{Code: problem.ServiceUnavailable, RetryAfter: time.Second, Err: err,
			Detail: "The database is not reachable or did not answer in time. Retry shortly; with the same Idempotency-Key a retry is safe."}
	}
	if postgres.IsLockTimeout(err) {
		// Another transaction held a row this request needed for longer
		// than the lock timeout (a concurrent payment of the same order
		// whose transaction waited out a database outage): this request's
		// transaction rolled back whole, and the same request later finds
		// the row free.
		return &problem.Error{Code: problem.ServiceUnavailable, RetryAfter: time.Second, Err: err,
			Detail: "Another request held what this one needs for too long. Retry shortly; with the same Idempotency-Key a retry is safe."}
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		switch he.Code {
		case http.StatusNotFound:
			return problem.New(problem.NotFound, "No such resource.")
		case http.StatusMethodNotAllowed:
			return problem.New(problem.MethodNotAllowed, "This method is not allowed on this resource.")
		case http.StatusRequestEntityTooLarge:
			// echo's own body limit; the service's is wire.ReadBody's.
			return problem.New(problem.RequestTooLarge, "The request body is too large.")
		case http.StatusUnauthorized:
			return problem.New(problem.Unauthorized, "The API key is not valid.")
		case http.StatusBadRequest:
			return &problem.Error{Code: problem.InvalidJSON, Detail: "The request could not be read.", Err: err}
		}
	}
	return &problem.Error{Code: problem.Internal, Detail: "internal error", Err: fmt.Errorf("unclassified: %w", err)}
}
