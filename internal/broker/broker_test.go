package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

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
		if !strings.HasPrefix(e.ClientURL(), "nats://127.0.0.1:") || e.Port() == 0 {
			t.Fatalf("client URL = %q, port %d; want 127.0.0.1 and a real port", e.ClientURL(), e.Port())
		}
	}
	if a.Server().Port() == b.Server().Port() {
		t.Fatalf("two servers share port %d", a.Server().Port())
	}
	// Another process finds the server by its store directory.
	url, err := broker.EmbeddedURL(a.Dir)
	if err != nil || url != a.Server().ClientURL() {
		t.Fatalf("EmbeddedURL = %q, %v; want %q", url, err, a.Server().ClientURL())
	}
	a.Stop()
	if _, err := broker.EmbeddedURL(a.Dir); err == nil {
		t.Fatal("EmbeddedURL found a server that was shut down")
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
