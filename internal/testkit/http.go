package testkit

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/oncepay/oncepay/internal/problem"
)

// Response is one HTTP answer, its body read in full.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Send sends req with client and reads the whole answer. It is for
// goroutines other than the test's, which must not call t.Fatal; the test's
// own goroutine uses Do.
func Send(client *http.Client, req *http.Request) (Response, error) {
	res, err := client.Do(req) // #nosec G704 -- tests send requests to the servers they started
	if err != nil {
		return Response{}, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return Response{}, fmt.Errorf("%s %s: read the answer: %w", req.Method, req.URL.Path, err)
	}
	return Response{Status: res.StatusCode, Header: res.Header, Body: body}, nil
}

// Do is Send that fails the test when no answer comes.
func Do(t testing.TB, client *http.Client, req *http.Request) Response {
	t.Helper()
	r, err := Send(client, req)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Problem is an application/problem+json body as a client reads it.
type Problem struct {
	Type     string               `json:"type"`
	Title    string               `json:"title"`
	Status   int                  `json:"status"`
	Detail   string               `json:"detail"`
	Instance string               `json:"instance"`
	Code     problem.Code         `json:"code"`
	Errors   []problem.FieldError `json:"errors"`
}

// WantProblem fails the test unless r is a problem with the given status and
// code (in the status line, the Content-Type and the body), and returns the
// body for further checks.
func WantProblem(t testing.TB, r Response, status int, code problem.Code) Problem {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status = %d, want %d (%s); body %s", r.Status, status, code, r.Body)
	}
	if ct := r.Header.Get("Content-Type"); ct != problem.ContentType {
		t.Fatalf("Content-Type = %q, want %s; body %s", ct, problem.ContentType, r.Body)
	}
	var p Problem
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("decode problem %s: %v", r.Body, err)
	}
	if p.Code != code || p.Status != status {
		t.Fatalf("problem code %q, status %d; want %q, %d; body %s", p.Code, p.Status, code, status, r.Body)
	}
	return p
}
