// Package faultproxy is a real TCP fault proxy (toxiproxy v2, used as a
// library) between a component and one of its dependencies: the component
// dials the proxy, the proxy forwards to the dependency, and faults
// (toxics) are added on the way and removed again. The tests use it through
// internal/testkit (FaultProxy), the chaos run for the links between its
// APIs and their dependencies.
package faultproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/collectors"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	zlog "github.com/rs/zerolog/log"
)

// Both directions of a connection, as toxiproxy names them: upstream is
// from the component to the dependency, downstream the answers.
var Both = []string{"upstream", "downstream"}

// Proxy is one fault proxy, listening on a free loopback port (Addr).
type Proxy struct {
	// Addr is where the proxy listens (127.0.0.1:port).
	Addr    string
	p       *toxiproxy.Proxy
	carried *collectors.ProxyMetricCollectors
	n       atomic.Int64
}

// quiet silences zerolog's global logger once, before any toxic runs: some
// toxics (bandwidth) log through it, not through the server's logger, a
// line per interrupted copy (and setting it while toxics read it would be a
// data race).
var quiet sync.Once

// Start starts a proxy named name in front of upstream (host:port).
func Start(name, upstream string) (*Proxy, error) {
	quiet.Do(func() { zlog.Logger = zerolog.Nop() })
	metrics := toxiproxy.NewMetricsContainer(prometheus.NewRegistry())
	metrics.ProxyMetrics = collectors.NewProxyMetricCollectors()
	p := toxiproxy.NewProxy(toxiproxy.NewServer(metrics, zerolog.Nop()), name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("start fault proxy in front of %s: %w", upstream, err)
	}
	return &Proxy{Addr: p.Listen, p: p, carried: metrics.ProxyMetrics}, nil
}

// Stop closes the proxy's listener and every connection through it.
func (f *Proxy) Stop() { f.p.Stop() }

// Restart listens again on Addr after Stop, faults kept.
func (f *Proxy) Restart() error {
	if err := f.p.Start(); err != nil {
		return fmt.Errorf("restart fault proxy on %s: %w", f.Addr, err)
	}
	return nil
}

// Through returns rawURL (postgres://, nats://, http://...) with its host
// and port replaced by the proxy's, so that a client of rawURL goes through
// it.
func (f *Proxy) Through(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("parse %q: %w", rawURL, err)
	}
	u.Host = f.Addr
	return u.String(), nil
}

// Add puts a toxic of kind with attrs on each of streams (Both, or one of
// them), connections already open included, and returns the toxics' names
// for Remove.
func (f *Proxy) Add(kind string, attrs map[string]any, streams ...string) ([]string, error) {
	var names []string
	for _, stream := range streams {
		name := fmt.Sprintf("%s_%s_%d", kind, stream, f.n.Add(1))
		body, err := json.Marshal(map[string]any{"name": name, "type": kind, "stream": stream, "toxicity": 1, "attributes": attrs})
		if err != nil {
			return names, err
		}
		if _, err := f.p.Toxics.AddToxicJson(strings.NewReader(string(body))); err != nil {
			return names, fmt.Errorf("add %s toxic: %w", kind, err)
		}
		names = append(names, name)
	}
	return names, nil
}

// Remove takes the named toxics off again.
func (f *Proxy) Remove(ctx context.Context, names []string) error {
	for _, name := range names {
		if err := f.p.Toxics.RemoveToxic(ctx, name); err != nil {
			return fmt.Errorf("remove toxic %s: %w", name, err)
		}
	}
	return nil
}

// Heal removes every toxic. Connections that lost data to a fault stay
// broken (their peers wait for bytes that never come); the component must
// notice that by its own deadlines.
func (f *Proxy) Heal(ctx context.Context) { f.p.Toxics.ResetToxics(ctx) }

// Carried is the number of bytes the proxy passed on so far, both ways:
// proof that the component really goes through it.
func (f *Proxy) Carried() int64 {
	ch := make(chan prometheus.Metric, 16)
	go func() {
		f.carried.ReceivedBytesTotal.Collect(ch)
		close(ch)
	}()
	var n int64
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) == nil && d.Counter != nil {
			n += int64(d.Counter.GetValue())
		}
	}
	return n
}
