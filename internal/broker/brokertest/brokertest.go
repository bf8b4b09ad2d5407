// Package brokertest starts a real, embedded NATS JetStream server for a
// test: its store in t.TempDir(), a loopback port the kernel picks, the
// event stream declared, everything shut down when the test ends. Tests can
// stop the server and bring it back on the same port and store, to watch the
// outbox wait and then flow. StartCluster (cluster.go) starts three such
// servers as one JetStream cluster, for replicated streams and the loss of
// one server.
package brokertest

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/testkit"
)

// Bundle is one embedded server and a client connection to it.
type Bundle struct {
	Dir    string
	Conn   *nats.Conn
	JS     jetstream.JetStream
	Logger *slog.Logger

	mu     sync.Mutex
	server *broker.Embedded
}

// Start starts the server, connects, and declares the streams with cfg.
func Start(t testing.TB, cfg broker.StreamsConfig) *Bundle {
	t.Helper()
	logger := testkit.Logger(t)
	dir := t.TempDir()
	srv, err := broker.StartEmbedded(dir, logger)
	if err != nil {
		t.Fatalf("start embedded nats: %v", err)
	}
	b := &Bundle{Dir: dir, Logger: logger, server: srv}
	// Cleanups run last-in first-out: the connection closes before the
	// server goes.
	t.Cleanup(func() { b.Server().Shutdown() })
	b.Conn, b.JS = Connect(t, srv.ClientURL(), logger)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := broker.EnsureStreams(ctx, b.JS, cfg); err != nil {
		t.Fatalf("ensure streams: %v", err)
	}
	return b
}

// Connect opens another connection (a second "process"), closed when t ends.
func Connect(t testing.TB, url string, logger *slog.Logger) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, js, err := broker.Connect(url, t.Name(), logger)
	if err != nil {
		t.Fatalf("connect to nats: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc, js
}

// Server returns the running server.
func (b *Bundle) Server() *broker.Embedded {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.server
}

// URL is the server's client URL; it survives Restart.
func (b *Bundle) URL() string { return b.Server().ClientURL() }

// Stop shuts the server down; clients see a disconnect and keep trying.
func (b *Bundle) Stop() { b.Server().Shutdown() }

// Restart starts the server again on the same port and store directory, with
// the same token, so the clients reconnect to it and find their streams and
// consumers.
func (b *Bundle) Restart(t testing.TB) {
	t.Helper()
	old := b.Server()
	old.Shutdown()
	srv, err := broker.StartEmbedded(b.Dir, b.Logger, broker.WithPort(old.Port()), broker.WithToken(old.Token()))
	if err != nil {
		t.Fatalf("restart embedded nats on port %d: %v", old.Port(), err)
	}
	b.mu.Lock()
	b.server = srv
	b.mu.Unlock()
}
