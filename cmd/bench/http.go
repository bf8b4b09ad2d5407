package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// orderBody is the request body of every POST /v1/orders: one line of a
// demo catalog SKU (internal/tenants/demo.go).
const orderBody = `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":1}]}`

// apiClient posts orders to the API over one shared transport, so
// connections are kept alive and reused like a real client's.
type apiClient struct {
	http   *http.Client
	url    string
	apiKey string
}

// newAPIClient returns a client for the API at base. idle is the number of
// keep-alive connections to keep per host; it must be at least the number of
// concurrent clients or connections are churned.
func newAPIClient(base, apiKey string, idle int) *apiClient {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        idle,
		MaxIdleConnsPerHost: idle,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &apiClient{
		http:   &http.Client{Transport: tr, Timeout: 30 * time.Second},
		url:    strings.TrimRight(base, "/") + "/v1/orders",
		apiKey: apiKey,
	}
}

// close drops the idle connections.
func (c *apiClient) close() { c.http.CloseIdleConnections() }

// createOrder posts the order under key. wantReplay says whether the answer
// must be a replay (Idempotent-Replayed: true) or a first execution; the
// other one, like any non-2xx status, is an error.
func (c *apiClient) createOrder(ctx context.Context, key string, wantReplay bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(orderBody))
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.apiKey)
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read response: %w", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(body[:min(len(body), 300)]))
	}
	if replayed := resp.Header.Get("Idempotent-Replayed") == "true"; replayed != wantReplay {
		return fmt.Errorf("status %d with Idempotent-Replayed=%t, want %t", resp.StatusCode, replayed, wantReplay)
	}
	return nil
}

// newKey returns a fresh idempotency key: random, like a real client's, so
// index inserts land anywhere in the key's B-tree, not only at its end.
func newKey() string { return "bench-" + uuid.NewString() }

// createOp posts every request under a fresh key.
func (c *apiClient) createOp() op {
	return func(ctx context.Context) error { return c.createOrder(ctx, newKey(), false) }
}

// replayOp posts every request under one of keys, in turn; keys must have
// been created already.
func (c *apiClient) replayOp(keys []string) op {
	var next atomic.Uint64
	return func(ctx context.Context) error {
		i := next.Add(1) % uint64(len(keys))
		return c.createOrder(ctx, keys[i], true)
	}
}

// prepareReplayKeys creates n orders with fresh keys, from clients
// goroutines, and returns the keys for the replay scenarios.
func (c *apiClient) prepareReplayKeys(ctx context.Context, n, clients int) ([]string, error) {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = newKey()
	}
	var next atomic.Int64
	errc := make(chan error, clients)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || ctx.Err() != nil {
					return
				}
				if err := c.createOrder(ctx, keys[i], false); err != nil {
					errc <- fmt.Errorf("create order for replay key %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	if err := errors.Join(ctx.Err(), <-errc); err != nil {
		return nil, err
	}
	return keys, nil
}

// waitReady polls the API's /readyz until it answers 200, the timeout runs
// out, or the API process (when pid is known) is gone.
func waitReady(ctx context.Context, base string, pid int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	url := strings.TrimRight(base, "/") + "/readyz"
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("build readiness request: %w", err)
		}
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		last = err
		if pid > 0 && !alive(pid) {
			return fmt.Errorf("API process %d exited before it was ready: %w", pid, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("API at %s not ready after %s: %w", base, timeout, last)
		case <-tick.C:
		}
	}
}
