package httpapi

import (
	"bytes"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/wire"
)

// readBodyFirst reads the body of a request that has one (POST, PUT,
// PATCH), whole and bounded by wire.ReadBody, before the request asks
// Admission for a slot, and hands it to the handler from memory: the
// handler's own wire.ReadBody then reads what is already there. Until it
// is in, the connection waits for its client (ConnLimiter may reclaim it at
// its limit).
//
// The body must come within timeout of this call, that is of the headers:
// the server's read timeout bounds the whole request, and this one only
// shortens it. A body later than that is answered 408 request_timeout, and
// the connection is closed.
func readBodyFirst(c echo.Context, timeout time.Duration) error {
	req := c.Request()
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		return nil
	}
	if req.ContentLength == 0 {
		return nil
	}
	ctx := req.Context()
	awaitingBody(ctx, true)
	defer awaitingBody(ctx, false)

	// Past the timeout the connection's read deadline is moved to now,
	// which ends the read under way; never before, so the deadline the
	// server set for the whole request is only ever shortened. Once the
	// body is in the deadline is left alone: the server reads the
	// connection in the background while the handler works (to see the
	// client go away), and a deadline that passed would cancel the request.
	rc := http.NewResponseController(c.Response())
	var mu sync.Mutex
	finished, expired := false, false
	timer := time.AfterFunc(timeout, func() {
		mu.Lock()
		defer mu.Unlock()
		if !finished {
			expired = true
			_ = rc.SetReadDeadline(time.Now())
		}
	})
	body, err := wire.ReadBody(req)
	mu.Lock()
	finished = true
	late := expired
	mu.Unlock()
	timer.Stop()
	if late {
		return &problem.Error{Code: problem.RequestTimeout, Detail: "The request body did not arrive within " + timeout.String() + " of its headers.", Err: err}
	}
	if err != nil {
		return err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	return nil
}
