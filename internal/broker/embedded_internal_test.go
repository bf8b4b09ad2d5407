package broker

import (
	"log/slog"
	"testing"
)

// JetStream fsyncs every message only with WithSyncAlways(true); the
// default is JetStream's own, off.
func TestEmbeddedSyncAlwaysIsAnOption(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opts []EmbeddedOption
		want bool
	}{{nil, false}, {[]EmbeddedOption{WithSyncAlways(true)}, true}} {
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
