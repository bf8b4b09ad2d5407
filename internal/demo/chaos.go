package demo

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/wire"
)

// HeaderChaos asks, in demo mode, for something to go wrong with this one
// request. The only value is ChaosLoseResponse.
const HeaderChaos = "X-Demo-Chaos"

// ChaosLoseResponse runs the request to its end (committed, stored as the
// idempotent answer) and then closes the connection without a byte of the
// answer: the server commits but the response never arrives.
const ChaosLoseResponse = "lose-response"

// Chaos is the middleware behind X-Demo-Chaos. Mount it on the whole API
// (e.Use, after the request logger) so any request can lose its response.
// Requests without the header pass untouched; outside demo mode a request
// with it is refused with 404 before it executes.
func (h *Handler) Chaos(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		mode := c.Request().Header.Get(HeaderChaos)
		if mode == "" {
			return next(c)
		}
		if !h.enabled {
			return problem.New(problem.NotFound, "The %s header works only in demo mode (DEMO_MODE=true); nothing was executed.", HeaderChaos)
		}
		if mode != ChaosLoseResponse {
			return problem.Validation(problem.FieldError{Field: "header " + HeaderChaos, Message: "must be " + ChaosLoseResponse})
		}
		return h.loseResponse(c, next)
	}
}

// loseResponse runs next with its answer going nowhere, then hijacks the
// connection and closes it. The handler runs completely, error rendering
// included, before the connection goes: whatever it committed stays
// committed, and a retry with the same Idempotency-Key gets the replay.
func (h *Handler) loseResponse(c echo.Context, next echo.HandlerFunc) error {
	res := c.Response()
	conn := res.Writer
	sink := &discardWriter{header: conn.Header()}
	res.Writer = sink
	err := next(c)
	if err != nil {
		c.Error(err) // render into the sink, as the answer would have been
	}
	res.Writer = conn

	h.logger.InfoContext(c.Request().Context(), "demo chaos: response lost on purpose after the request finished",
		"method", wire.Loggable(c.Request().Method), "path", wire.Loggable(c.Request().URL.Path), "status", sink.status, "bytes", sink.n,
		"request_id", conn.Header().Get(echo.HeaderXRequestID))
	raw, _, hijackErr := http.NewResponseController(conn).Hijack()
	if hijackErr != nil {
		// Not hijackable (HTTP/2): aborting the handler makes net/http
		// reset the stream without an answer, which is the same loss.
		panic(http.ErrAbortHandler)
	}
	_ = raw.Close() // the loss is the point; a close error changes nothing
	return nil
}

// discardWriter takes a response and keeps only its status and size. It
// shares the real writer's header map, so the request log still shows what
// the answer would have carried (Idempotent-Replayed, the request id).
type discardWriter struct {
	header http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header { return w.header }

func (w *discardWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(p)
	return len(p), nil
}
