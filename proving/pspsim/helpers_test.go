package pspsim

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is an injectable clock tests advance by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// harness is a Server behind a real loopback HTTP server.
type harness struct {
	t      *testing.T
	srv    *Server
	ts     *httptest.Server
	clock  *fakeClock
	apiKey string
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	clock := newFakeClock()
	srv, err := New(cfg, nil, clock.Now)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &harness{t: t, srv: srv, ts: ts, clock: clock, apiKey: cfg.APIKey}
}

// reply is a decoded HTTP answer.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request with client (the harness's keep-alive client if nil)
// and returns the transport error instead of failing, for drop tests.
func (h *harness) do(client *http.Client, method, path, key, body string) (reply, error) {
	h.t.Helper()
	if client == nil {
		client = h.ts.Client()
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, h.ts.URL+path, rd)
	if err != nil {
		h.t.Fatalf("build request: %v", err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if h.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+h.apiKey)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// must is do that fails the test on a transport error.
func (h *harness) must(method, path, key, body string) reply {
	h.t.Helper()
	r, err := h.do(nil, method, path, key, body)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

func (h *harness) charge(key, body string) reply {
	h.t.Helper()
	return h.must(http.MethodPost, "/v1/charges", key, body)
}

func (h *harness) refund(key, body string) reply {
	h.t.Helper()
	return h.must(http.MethodPost, "/v1/refunds", key, body)
}

func (h *harness) ledger(reference string) Ledger {
	h.t.Helper()
	path := "/v1/ledger"
	if reference != "" {
		path += "?reference=" + reference
	}
	r := h.must(http.MethodGet, path, "", "")
	if r.status != http.StatusOK {
		h.t.Fatalf("GET %s: status %d, want 200: %s", path, r.status, r.body)
	}
	return decode[Ledger](h.t, r.body)
}

// freshClient never reuses connections, so a dropped connection surfaces
// as an error instead of being retried transparently by net/http.
func freshClient(t *testing.T, timeout time.Duration) *http.Client {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: timeout}
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %T from %q: %v", v, b, err)
	}
	return v
}

// wireError mirrors the error envelope independently of the package types.
type wireError struct {
	Error struct {
		Type        string `json:"type"`
		Code        string `json:"code"`
		Message     string `json:"message"`
		Charge      string `json:"charge"`
		DeclineCode string `json:"decline_code"`
	} `json:"error"`
}

func wantError(t *testing.T, r reply, status int, typ, code string) wireError {
	t.Helper()
	if r.status != status {
		t.Fatalf("status: got %d, want %d (body %s)", r.status, status, r.body)
	}
	e := decode[wireError](t, r.body)
	if e.Error.Type != typ || e.Error.Code != code {
		t.Fatalf("error: got %s/%s, want %s/%s (body %s)", e.Error.Type, e.Error.Code, typ, code, r.body)
	}
	if e.Error.Message == "" {
		t.Fatalf("error message is empty (body %s)", r.body)
	}
	return e
}

func wantCharge(t *testing.T, r reply) Charge {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("status: got %d, want 200 (body %s)", r.status, r.body)
	}
	return decode[Charge](t, r.body)
}

// startRun runs the webhook worker until the test ends and checks it
// stops cleanly.
func startRun(t *testing.T, srv *Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: got %v, want nil", err)
		}
	})
}

// received is one webhook as the merchant saw it.
type received struct {
	id, timestamp, signature, contentType string
	body                                  []byte
}

// receiver is a merchant webhook endpoint answering with the scripted
// statuses in order (200 once the script is exhausted).
type receiver struct {
	ts *httptest.Server

	mu     sync.Mutex
	got    []received
	script []int
}

func newReceiver(t *testing.T, script ...int) *receiver {
	t.Helper()
	rc := &receiver{script: script}
	rc.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		rc.got = append(rc.got, received{
			id:          r.Header.Get("webhook-id"),
			timestamp:   r.Header.Get("webhook-timestamp"),
			signature:   r.Header.Get("webhook-signature"),
			contentType: r.Header.Get("Content-Type"),
			body:        b,
		})
		status := http.StatusOK
		if len(rc.script) > 0 {
			status, rc.script = rc.script[0], rc.script[1:]
		}
		rc.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.ts.Close)
	return rc
}

func (rc *receiver) all() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

// testSecret builds a whsec_ secret from fixed bytes.
func testSecret(seed string) string {
	return "whsec_" + base64.StdEncoding.EncodeToString([]byte(seed+"-0123456789abcdef"))
}

// verifySignature computes the Standard Webhooks signature independently of
// the package and reports whether header carries it.
func verifySignature(t *testing.T, secret string, r received) bool {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatalf("decode test secret: %v", err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(r.id + "." + r.timestamp + "." + string(r.body)))
	want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(r.signature) {
		version, value, ok := strings.Cut(sig, ",")
		if ok && version == "v1" && hmac.Equal([]byte(value), []byte(want)) {
			return true
		}
	}
	return false
}

// isNetError reports whether err is a transport failure (EOF, reset,
// timeout), which is what a dropped connection must look like.
func isNetError(err error) bool {
	return err != nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "reset") ||
		strings.Contains(err.Error(), "Timeout") || strings.Contains(err.Error(), "deadline"))
}

// chargeBody builds a charge request body.
func chargeBody(amount int64, pm, reference string) string {
	var b bytes.Buffer
	_ = json.NewEncoder(&b).Encode(map[string]any{
		"amount": amount, "currency": "EUR", "payment_method": pm,
		"metadata": map[string]string{"reference": reference},
	})
	return b.String()
}
