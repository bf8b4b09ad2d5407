package broker

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// Acknowledged is durable: the embedded server fsyncs every message before
// its PubAck unless a test or benchmark says WithSyncAlways(false). The
// setting is read back from the running server's JetStream configuration.
func TestEmbeddedSyncsAlwaysByDefault(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opts []EmbeddedOption
		want bool
	}{{nil, true}, {[]EmbeddedOption{WithSyncAlways(false)}, false}} {
		e, err := StartEmbedded(t.TempDir(), slog.New(slog.DiscardHandler), c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		got := e.srv.JetStreamConfig().SyncAlways
		e.Shutdown()
		if got != c.want {
			t.Errorf("SyncAlways = %v, want %v", got, c.want)
		}
	}
}

// The compose demo's nats-server, and the configuration docs/CONFIGURATION.md
// and docs/RELIABILITY.md give for a NATS_URL server, sync always too: the file
// is read as nats-server reads it.
func TestComposeNATSConfigSyncsAlways(t *testing.T) {
	t.Parallel()
	opts, err := server.ProcessConfigFile(filepath.Join("..", "..", "deploy", "nats.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if !opts.JetStream || !opts.SyncAlways {
		t.Fatalf("deploy/nats.conf: jetstream %v, sync always %v; want both", opts.JetStream, opts.SyncAlways)
	}
}
