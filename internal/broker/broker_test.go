package broker_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/broker/brokertest"
	"github.com/oncepay/oncepay/internal/testkit"
)

func TestEmbeddedBindsLoopbackOnARandomPort(t *testing.T) {
	t.Parallel()
	a := brokertest.Start(t, broker.StreamsConfig{})
	b := brokertest.Start(t, broker.StreamsConfig{})
	for _, e := range []*broker.Embedded{a.Server(), b.Server()} {
		u, err := url.Parse(e.ClientURL())
		if err != nil || u.Scheme != "nats" || u.Hostname() != "127.0.0.1" || e.Port() == 0 || u.Port() != strconv.Itoa(e.Port()) {
			t.Fatalf("client URL = %q, port %d; want 127.0.0.1 and a real port", redacted(e), e.Port())
		}
	}
	if a.Server().Port() == b.Server().Port() {
		t.Fatalf("two servers share port %d", a.Server().Port())
	}
	// Another process finds the server by its store directory.
	found, err := broker.EmbeddedURL(a.Dir)
	if err != nil || found != a.Server().ClientURL() {
		t.Fatalf("EmbeddedURL = %v; want the server's client URL", err)
	}
	a.Stop()
	if _, err := broker.EmbeddedURL(a.Dir); err == nil {
		t.Fatal("EmbeddedURL found a server that was shut down")
	}
}

// redacted is e's client URL without its token, for failure messages.
func redacted(e *broker.Embedded) string {
	return strings.Replace(e.ClientURL(), e.Token(), "***", 1)
}

// The embedded server accepts only clients that present its token, which is
// random per server: another user or process on the machine that finds the
// loopback port can neither publish events the consumers would act on nor
// read any tenant's. The URL file that hands the token to the operator
// commands is readable by its owner only, even where an older file allowed
// more.
func TestEmbeddedAcceptsOnlyClientsWithItsToken(t *testing.T) {
	t.Parallel()
	a := brokertest.Start(t, broker.StreamsConfig{})
	b := brokertest.Start(t, broker.StreamsConfig{})
	if a.Server().Token() == "" || a.Server().Token() == b.Server().Token() {
		t.Fatalf("tokens %q and %q: want one of its own per server", a.Server().Token(), b.Server().Token())
	}
	if len(a.Server().Token()) < 26 {
		t.Fatalf("token of %d characters, want at least 26 (130 bits)", len(a.Server().Token()))
	}
	addr := fmt.Sprintf("127.0.0.1:%d", a.Server().Port())
	for _, u := range []string{
		"nats://" + addr, // no credentials
		"nats://" + b.Server().Token() + "@" + addr,  // another server's token
		"nats://" + a.Server().Token() + "x@" + addr, // almost
		"nats://oncepay:" + a.Server().Token() + "@" + addr,
	} {
		nc, err := nats.Connect(u, nats.Timeout(5*time.Second))
		if err == nil {
			nc.Close()
			t.Fatalf("connected to the embedded server with %q", strings.ReplaceAll(u, a.Server().Token(), "<token>"))
		}
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Fatalf("connect with %q: %v, want an authorization violation", strings.ReplaceAll(u, a.Server().Token(), "<token>"), err)
		}
	}
	// The bundle's own connection used ClientURL, which carries the token.
	if !a.Conn.IsConnected() {
		t.Fatal("a client with the server's URL is not connected")
	}

	info, err := os.Stat(filepath.Join(a.Dir, "client-url"))
	if err != nil {
		t.Fatal(err)
	}
	if mode := info.Mode().Perm(); mode != 0o600 {
		t.Fatalf("URL file mode %v, want 0600", mode)
	}
	// A URL file an older server left behind with a looser mode is replaced,
	// not rewritten in place.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "client-url"), []byte("nats://127.0.0.1:1\n"), 0o644); err != nil { // #nosec G306 -- the loose mode is the point
		t.Fatal(err)
	}
	e, err := broker.StartEmbedded(dir, testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	info, err = os.Stat(filepath.Join(dir, "client-url"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := broker.EmbeddedURL(dir)
	if info.Mode().Perm() != 0o600 || err != nil || got != e.ClientURL() {
		t.Fatalf("after a stale file: mode %v, EmbeddedURL %v; want 0600 and the running server's URL", info.Mode().Perm(), err)
	}
}

func TestEnsureStreamsIsIdempotentAndAppliesTheWindow(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, broker.StreamsConfig{})
	ctx := context.Background()
	for _, window := range []time.Duration{0, 3 * time.Second, 3 * time.Second} {
		if err := broker.EnsureStreams(ctx, b.JS, broker.StreamsConfig{DuplicateWindow: window}); err != nil {
			t.Fatalf("EnsureStreams(window %v): %v", window, err)
		}
	}
	s, err := b.JS.Stream(ctx, broker.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := info.Config
	if c.Duplicates != 3*time.Second || c.MaxAge != broker.DefaultMaxAge || c.Storage != jetstream.FileStorage ||
		c.Retention != jetstream.LimitsPolicy || len(c.Subjects) != 1 || c.Subjects[0] != "oncepay.events.>" {
		t.Fatalf("stream config = %+v", c)
	}
	if err := broker.EnsureStreams(ctx, b.JS, broker.StreamsConfig{DuplicateWindow: time.Hour, MaxAge: time.Minute}); err == nil {
		t.Fatal("a duplicate window longer than the max age was accepted")
	}
}

// The store survives a restart on the same directory, and JetStream
// deduplicates by Nats-Msg-Id within the window.
func TestEmbeddedRestartKeepsTheStream(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, broker.StreamsConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, want := range []bool{false, true} {
		ack, err := b.JS.Publish(ctx, broker.Subject("test.event"), []byte(`{}`), jetstream.WithMsgID("event-1"))
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if ack.Duplicate != want {
			t.Fatalf("publish %d: duplicate = %t, want %t", i, ack.Duplicate, want)
		}
	}
	port := b.Server().Port()
	b.Restart(t)
	if b.Server().Port() != port {
		t.Fatalf("restarted on port %d, want %d", b.Server().Port(), port)
	}
	// The client reconnects by itself; poll until it has.
	s, err := b.JS.Stream(ctx, broker.StreamEvents)
	for tick := time.NewTicker(20 * time.Millisecond); err != nil && ctx.Err() == nil; <-tick.C {
		s, err = b.JS.Stream(ctx, broker.StreamEvents)
	}
	if err != nil {
		t.Fatalf("stream after restart: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream holds %d messages after restart, want 1", info.State.Msgs)
	}
}

func TestStartEmbeddedNeedsAStoreDirectory(t *testing.T) {
	t.Parallel()
	if _, err := broker.StartEmbedded("", testkit.Logger(t)); err == nil {
		t.Fatal("an embedded server without a store directory was started")
	}
}

func TestSubject(t *testing.T) {
	t.Parallel()
	if got, want := broker.Subject("payment.succeeded"), "oncepay.events.payment.succeeded"; got != want {
		t.Fatalf("Subject = %q, want %q", got, want)
	}
}
