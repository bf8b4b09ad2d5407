package main

import (
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

	"github.com/oncepay/oncepay/client"
)

// orderBody is the request body of every POST /v1/orders: one line of a
// demo catalog SKU (internal/tenants/demo.go).
const orderBody = `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":1}]}`

// apiClient posts orders to the API with the project's Go client, over one
// shared transport, so connections are kept alive and reused like a real
// client's. Retries are off: the bench counts every failed attempt as an
// error instead of hiding it in a latency.
type apiClient struct {
	http *http.Client
	api  *client.Client
}

// newAPIClient returns a client for the API at base. idle is the number of
// keep-alive connections to keep per host; it must be at least the number of
// concurrent clients or connections are churned.
func newAPIClient(base, apiKey string, idle int) (*apiClient, error) {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        idle,
		MaxIdleConnsPerHost: idle,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	api, err := client.New(base, apiKey, client.WithHTTPClient(hc), client.WithMaxAttempts(1))
	if err != nil {
		return nil, err
	}
	return &apiClient{http: hc, api: api}, nil
}

// close drops the idle connections.
func (c *apiClient) close() { c.http.CloseIdleConnections() }

// order is the body of every POST /v1/orders (orderBody).
var order = client.CreateOrderRequest{Currency: "EUR", Items: []client.LineItem{{SKU: "travel-mug", Quantity: 1}}}

// createOrder posts the order under key. wantReplay says whether the answer
// must be a replay (Idempotent-Replayed: true) or a first execution; the
// other one, like any non-2xx status, is an error.
func (c *apiClient) createOrder(ctx context.Context, key string, wantReplay bool) error {
	_, meta, err := c.api.CreateOrder(ctx, order, client.WithIdempotencyKey(key))
	if err != nil {
		return err
	}
	if meta.Replayed != wantReplay {
		return fmt.Errorf("status %d with Idempotent-Replayed=%t, want %t", meta.Status, meta.Replayed, wantReplay)
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
