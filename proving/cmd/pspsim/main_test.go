package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/proving/pspsim"
)

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestRunHelpPrintsUsage(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := run(context.Background(), []string{"pspsim", "--help"}, env(map[string]string{"PSP_API_KEY": "sk_hidden"}), &out)
	if err != nil {
		t.Fatalf("run --help: got %v, want nil", err)
	}
	for _, want := range []string{"Usage:", "-addr", "PSP_ADDR", "PSP_KEY_RETENTION", "PSP_WEBHOOK_SECRET", "PSP_FAIL_RATE", "/v1/charges"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("usage does not mention %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "sk_hidden") {
		t.Fatalf("usage leaks the API key from the environment")
	}
}

func TestRunRejectsBadConfiguration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"bad env float", nil, map[string]string{"PSP_FAIL_RATE": "lots"}, "PSP_FAIL_RATE"},
		{"bad env duration", nil, map[string]string{"PSP_KEY_RETENTION": "1 day"}, "PSP_KEY_RETENTION"},
		{"rate out of range", []string{"-drop-rate", "1.5"}, nil, "drop_rate"},
		{"unknown flag", []string{"-nope"}, nil, "nope"},
		{"webhook without secret", []string{"-webhook-url", "http://127.0.0.1:1/h"}, nil, "secret"},
		{"bad log level", nil, map[string]string{"PSP_LOG_LEVEL": "loud"}, "log level"},
		{"stray argument", []string{"serve"}, nil, "serve"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			args := append([]string{"pspsim", "-addr", "127.0.0.1:0"}, tc.args...)
			err := run(context.Background(), args, env(tc.env), &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run: got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

func TestRunServesUntilCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &syncBuffer{}
	done := make(chan error, 1)
	environment := env(map[string]string{
		"PSP_API_KEY":       "sk_test",
		"PSP_KEY_RETENTION": "1h",
		"PSP_SEED":          "42",
	})
	go func() { done <- run(ctx, []string{"pspsim", "-addr", "127.0.0.1:0"}, environment, logs) }()

	addr := waitForListenAddr(t, logs, done)
	base := "http://" + addr

	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz: got %d, want 200", resp.StatusCode)
	}
	// The compose healthcheck: the same command, asked to check instead of
	// serve, with the API key of the environment it shares.
	_, port, _ := net.SplitHostPort(addr)
	if err := run(ctx, []string{"pspsim", "--check-health", "-addr", "0.0.0.0:" + port}, environment, io.Discard); err != nil {
		t.Fatalf("--check-health of a running simulator: %v", err)
	}
	if err := run(ctx, []string{"pspsim", "--check-health", "-addr", "127.0.0.1:" + freePort(t)}, environment, io.Discard); err == nil {
		t.Fatalf("--check-health where nothing listens: nil, want an error")
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/charges",
		strings.NewReader(`{"amount":100,"currency":"EUR","payment_method":"pm_card_ok","metadata":{"reference":"r1"}}`))
	if err != nil {
		t.Fatalf("build request: %v", err)
	}
	req.Header.Set("Idempotency-Key", "k1")
	req.Header.Set("Authorization", "Bearer sk_test")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/charges: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/charges: got %d, want 200: %s", resp.StatusCode, body)
	}
	var ch pspsim.Charge
	if err := json.Unmarshal(body, &ch); err != nil || ch.Status != pspsim.StatusSucceeded {
		t.Fatalf("charge: got %s (%v), want succeeded", body, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: got %v, want nil after cancel", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("run did not return after cancel")
	}
	if !strings.Contains(logs.String(), `"msg":"pspsim stopped"`) {
		t.Fatalf("logs lack the stop line:\n%s", logs.String())
	}
}

// waitForListenAddr polls the JSON logs for the listening line.
func waitForListenAddr(t *testing.T, logs *syncBuffer, done <-chan error) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		for sc.Scan() {
			var line struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "pspsim listening" && line.Addr != "" {
				return line.Addr
			}
		}
		select {
		case err := <-done:
			t.Fatalf("run returned before listening: %v", errors.Join(err, errors.New(logs.String())))
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no listening log line:\n%s", logs.String())
		}
	}
}

// freePort returns a loopback port that was free a moment ago and has
// nobody listening now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}
