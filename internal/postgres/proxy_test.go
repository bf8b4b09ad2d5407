package postgres_test

import (
	"context"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// testProxy is a real TCP fault proxy (toxiproxy) between a test and its
// database.
type testProxy struct {
	p   *toxiproxy.Proxy
	url string
}

// newProxy starts a proxy on a free loopback port in front of the server of
// dbURL and returns it with dbURL rewritten to go through it.
func newProxy(t *testing.T, dbURL string) *testProxy {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, t.Name(), "127.0.0.1:0", u.Host)
	if err := p.Start(); err != nil {
		t.Fatalf("start proxy: %v", err)
	}
	t.Cleanup(p.Stop)
	_, port, err := net.SplitHostPort(p.Listen)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = net.JoinHostPort("127.0.0.1", port)
	return &testProxy{p: p, url: u.String()}
}

// blackhole makes the proxy swallow everything from now on, in both
// directions, without closing a connection: a peer that accepts and never
// answers.
func (p *testProxy) blackhole(t *testing.T) {
	t.Helper()
	for _, stream := range []string{"upstream", "downstream"} {
		if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(
			`{"name":"blackhole_` + stream + `","type":"timeout","stream":"` + stream + `","toxicity":1,"attributes":{"timeout":0}}`)); err != nil {
			t.Fatalf("add toxic: %v", err)
		}
	}
}

// heal removes every fault.
func (p *testProxy) heal() { p.p.Toxics.ResetToxics(context.Background()) }
