package testkit

import (
	"context"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/proving/faultproxy"
)

// FaultProxy is a real TCP fault proxy (proving/faultproxy: toxiproxy v2,
// used as a library) between a test's component and one of its
// dependencies: the component dials Addr, the proxy forwards to the
// upstream, and the test adds faults (toxics) on the way and removes them
// again with Heal. It listens on a free loopback port and stops when the
// test ends.
type FaultProxy struct {
	// Addr is where the proxy listens (127.0.0.1:port).
	Addr string
	p    *faultproxy.Proxy
}

// StartFaultProxy starts a proxy in front of upstream (host:port).
func StartFaultProxy(t testing.TB, upstream string) *FaultProxy {
	t.Helper()
	p, err := faultproxy.Start(strings.ReplaceAll(t.Name(), "/", "_"), upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return &FaultProxy{Addr: p.Addr, p: p}
}

// Down stops the proxy: it no longer listens, and the connections through
// it are closed. A dependency that is not up (yet): a dial gets connection
// refused. Up brings it back on the same address.
func (f *FaultProxy) Down() { f.p.Stop() }

// Up listens again on Addr after Down, faults kept.
func (f *FaultProxy) Up(t testing.TB) {
	t.Helper()
	if err := f.p.Restart(); err != nil {
		t.Fatal(err)
	}
}

// Through returns rawURL (postgres://, nats://, http://...) with its host
// and port replaced by the proxy's, so that a client of rawURL goes through
// the proxy.
func (f *FaultProxy) Through(t testing.TB, rawURL string) string {
	t.Helper()
	u, err := f.p.Through(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return u
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

// add adds one toxic of kind on each of streams with attrs.
func (f *FaultProxy) add(t testing.TB, kind string, attrs map[string]any, streams ...string) {
	t.Helper()
	if _, err := f.p.Add(kind, attrs, streams...); err != nil {
		t.Fatal(err)
	}
}

// Latency delays every chunk of data by ms milliseconds, in both
// directions.
func (f *FaultProxy) Latency(t testing.TB, ms int) {
	t.Helper()
	f.add(t, "latency", map[string]any{"latency": ms}, faultproxy.Both...)
}

// Blackhole swallows everything from now on, in both directions, without
// closing a connection, and new connections are accepted and then hear
// nothing: a peer that accepts and never answers (a partition, a frozen
// host). Data swallowed is lost for good, as on a real partition.
func (f *FaultProxy) Blackhole(t testing.TB) {
	t.Helper()
	f.add(t, "timeout", map[string]any{"timeout": 0}, faultproxy.Both...)
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
	f.add(t, "bandwidth", map[string]any{"rate": kbps}, faultproxy.Both...)
}

// Heal removes every fault. Connections that lost data to a fault stay
// broken (their peers wait for bytes that never come); the component must
// notice that by its own deadlines.
func (f *FaultProxy) Heal() { f.p.Heal(context.Background()) }
