package testkit

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	zlog "github.com/rs/zerolog/log"
)

// FaultProxy is a real TCP fault proxy (toxiproxy v2, used as a library)
// between a test's component and one of its dependencies: the component
// dials Addr, the proxy forwards to the upstream, and the test adds faults
// (toxics) on the way and removes them again with Heal. It listens on a
// free loopback port and stops when the test ends.
type FaultProxy struct {
	// Addr is where the proxy listens (127.0.0.1:port).
	Addr string
	p    *toxiproxy.Proxy
	n    atomic.Int64
}

// StartFaultProxy starts a proxy in front of upstream (host:port).
func StartFaultProxy(t testing.TB, upstream string) *FaultProxy {
	t.Helper()
	// Some toxics (bandwidth) log through zerolog's global logger, not the
	// server's.
	quietToxics.Do(func() { zlog.Logger = zerolog.Nop() })
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, strings.ReplaceAll(t.Name(), "/", "_"), "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("start fault proxy in front of %s: %v", upstream, err)
	}
	t.Cleanup(p.Stop)
	return &FaultProxy{Addr: p.Listen, p: p}
}

// Down stops the proxy: it no longer listens, and the connections through
// it are closed. A dependency that is not up (yet): a dial gets connection
// refused. Up brings it back on the same address.
func (f *FaultProxy) Down() { f.p.Stop() }

// Up listens again on Addr after Down, faults kept.
func (f *FaultProxy) Up(t testing.TB) {
	t.Helper()
	if err := f.p.Start(); err != nil {
		t.Fatalf("restart fault proxy on %s: %v", f.Addr, err)
	}
}

// Through returns rawURL (postgres://, nats://, http://...) with its host
// and port replaced by the proxy's, so that a client of rawURL goes through
// the proxy.
func (f *FaultProxy) Through(t testing.TB, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("parse %q: %v", rawURL, err)
	}
	u.Host = f.Addr
	return u.String()
}

// Upstream returns the host:port of rawURL, for StartFaultProxy.
func Upstream(t testing.TB, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("parse %q: %v", rawURL, err)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		t.Fatalf("%q has no host:port: %v", rawURL, err)
	}
	return u.Host
}

// Both directions of a connection, as toxiproxy names them: upstream is
// from the component to the dependency, downstream the answers.
var bothStreams = []string{"upstream", "downstream"}

// add adds one toxic of kind on each of streams with attrs.
func (f *FaultProxy) add(t testing.TB, kind string, attrs map[string]any, streams ...string) {
	t.Helper()
	for _, stream := range streams {
		body, err := json.Marshal(map[string]any{
			"name":       fmt.Sprintf("%s_%s_%d", kind, stream, f.n.Add(1)),
			"type":       kind,
			"stream":     stream,
			"toxicity":   1,
			"attributes": attrs,
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.p.Toxics.AddToxicJson(strings.NewReader(string(body))); err != nil {
			t.Fatalf("add %s toxic: %v", kind, err)
		}
	}
}

// Latency delays every chunk of data by ms milliseconds, in both
// directions.
func (f *FaultProxy) Latency(t testing.TB, ms int) {
	t.Helper()
	f.add(t, "latency", map[string]any{"latency": ms}, bothStreams...)
}

// Blackhole swallows everything from now on, in both directions, without
// closing a connection, and new connections are accepted and then hear
// nothing: a peer that accepts and never answers (a partition, a frozen
// host). Data swallowed is lost for good, as on a real partition.
func (f *FaultProxy) Blackhole(t testing.TB) {
	t.Helper()
	f.add(t, "timeout", map[string]any{"timeout": 0}, bothStreams...)
}

// ResetPeer resets (TCP RST) every connection as soon as data flows on it:
// a connection cut mid-stream.
func (f *FaultProxy) ResetPeer(t testing.TB) {
	t.Helper()
	f.add(t, "reset_peer", map[string]any{"timeout": 0}, "upstream")
}

// LimitData closes each connection after it carried n more bytes towards
// the component: an answer cut off in the middle.
func (f *FaultProxy) LimitData(t testing.TB, n int) {
	t.Helper()
	f.add(t, "limit_data", map[string]any{"bytes": n}, "downstream")
}

// Bandwidth limits each connection to kbps kilobytes per second in both
// directions.
func (f *FaultProxy) Bandwidth(t testing.TB, kbps int) {
	t.Helper()
	f.add(t, "bandwidth", map[string]any{"rate": kbps}, bothStreams...)
}

// Heal removes every fault. Connections that lost data to a fault stay
// broken (their peers wait for bytes that never come); the component must
// notice that by its own deadlines.
func (f *FaultProxy) Heal() { f.p.Toxics.ResetToxics(context.Background()) }

// quietToxics silences zerolog's global logger once, before any toxic runs
// (setting it while toxics read it would be a data race).
var quietToxics sync.Once
