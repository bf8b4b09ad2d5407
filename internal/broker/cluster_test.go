package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncepay/oncepay/internal/broker"
	"github.com/oncepay/oncepay/internal/broker/brokertest"
	"github.com/oncepay/oncepay/internal/testkit"
)

// streamInfo reads the event stream's info, failing the test on an error.
func streamInfo(ctx context.Context, t *testing.T, js jetstream.JetStream) *jetstream.StreamInfo {
	t.Helper()
	s, err := js.Stream(ctx, broker.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// replicated reports whether the stream runs with n replicas, every one of
// them online and caught up with the leader.
func replicated(info *jetstream.StreamInfo, n int) bool {
	if info.Config.Replicas != n || info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != n-1 {
		return false
	}
	for _, p := range info.Cluster.Replicas {
		if !p.Current || p.Offline {
			return false
		}
	}
	return true
}

func describe(info *jetstream.StreamInfo) string {
	if info.Cluster == nil {
		return fmt.Sprintf("%d replicas configured, no cluster info", info.Config.Replicas)
	}
	peers := make([]string, 0, len(info.Cluster.Replicas))
	for _, p := range info.Cluster.Replicas {
		peers = append(peers, fmt.Sprintf("%s current=%t offline=%t", p.Name, p.Current, p.Offline))
	}
	return fmt.Sprintf("%d replicas configured, leader %q, others [%s]", info.Config.Replicas, info.Cluster.Leader, strings.Join(peers, ", "))
}

// On a three-server cluster the stream gets the replica count it is
// declared with. A stream that exists with one replica (the default, as
// before NATS_STREAM_REPLICAS) is raised to three by the next start, its
// messages copied to the new replicas and its consumers following it;
// another process declaring it with
// three leaves it so; one started with the default is refused rather than
// lowering it. With one server (the stream's leader) down, the other two
// still acknowledge publishes.
func TestStreamOnAClusterHasTheReplicasItIsGiven(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t)
	logger := testkit.Logger(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A stream from before: one replica, with a message in it.
	_, js := brokertest.Connect(t, c.URL(), logger)
	if err := broker.EnsureStreams(ctx, js, broker.StreamsConfig{}); err != nil {
		t.Fatalf("EnsureStreams(default): %v", err)
	}
	if _, err := js.Publish(ctx, broker.Subject("test.event"), []byte(`{}`), jetstream.WithMsgID("before")); err != nil {
		t.Fatal(err)
	}
	if info := streamInfo(ctx, t, js); info.Config.Replicas != 1 {
		t.Fatalf("stream declared with the default: %s, want 1 replica", describe(info))
	}
	// A durable consumer of that stream, declared as the fulfillment
	// consumer is: without replicas of its own.
	cons, err := js.CreateOrUpdateConsumer(ctx, broker.StreamEvents, jetstream.ConsumerConfig{Durable: "test", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}

	// The next start, configured with three.
	if err := broker.EnsureStreams(ctx, js, broker.StreamsConfig{Replicas: 3}); err != nil {
		t.Fatalf("EnsureStreams(3 replicas): %v", err)
	}
	var info *jetstream.StreamInfo
	testkit.WaitFor(t, 30*time.Second, "the stream on three current replicas", func() bool {
		info = streamInfo(ctx, t, js)
		return replicated(info, 3)
	})
	if info.State.Msgs != 1 {
		t.Fatalf("the raised stream holds %d messages, want the 1 from before", info.State.Msgs)
	}
	testkit.WaitFor(t, 30*time.Second, "the consumer to follow the stream to three replicas", func() bool {
		ci, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ci.Cluster != nil && len(ci.Cluster.Replicas) == 2
	})

	// Another process, configured alike, and one started with the default.
	_, other := brokertest.Connect(t, c.URL(), logger)
	if err := broker.EnsureStreams(ctx, other, broker.StreamsConfig{Replicas: 3}); err != nil {
		t.Fatalf("EnsureStreams(3 replicas) from another process: %v", err)
	}
	err = broker.EnsureStreams(ctx, other, broker.StreamsConfig{})
	if !errors.Is(err, broker.ErrFewerReplicas) || !strings.Contains(err.Error(), "NATS_STREAM_REPLICAS=3") {
		t.Fatalf("EnsureStreams(default) on an R3 stream: %v, want ErrFewerReplicas naming NATS_STREAM_REPLICAS=3", err)
	}
	if info := streamInfo(ctx, t, other); info.Config.Replicas != 3 {
		t.Fatalf("after a process with the default started: %s, want 3 replicas", describe(info))
	}

	// The stream's leader goes: the other two elect a leader among
	// themselves and acknowledge the next publish (the client, connected
	// to any of the three, reconnects if it must).
	leader := c.Index(info.Cluster.Leader)
	if leader < 0 {
		t.Fatalf("stream leader %q is not a server of the cluster", info.Cluster.Leader)
	}
	c.Stop(leader)
	var ack *jetstream.PubAck
	testkit.WaitFor(t, 30*time.Second, "a publish acknowledged with the stream's leader down", func() bool {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		ack, err = js.Publish(pctx, broker.Subject("test.event"), []byte(`{}`), jetstream.WithMsgID("during"))
		return err == nil
	})
	if ack.Duplicate {
		t.Fatal("the first publish with the leader down was a duplicate")
	}
	c.Start(t, leader)
	c.WaitReady(t, 30*time.Second)
	testkit.WaitFor(t, 30*time.Second, "the restarted server to catch up", func() bool {
		info = streamInfo(ctx, t, js)
		return replicated(info, 3)
	})
	if info.State.Msgs != 2 {
		t.Fatalf("the stream holds %d messages, want 2", info.State.Msgs)
	}
}

// NATS_URL may list a cluster's servers with the credentials written on the
// first only: they apply to the others. Here the first server is down, so
// the client can only reach a server written without them.
func TestConnectToAClusterWithCredentialsWrittenOnce(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t)
	if !strings.HasPrefix(c.URL(), c.ClientURL(0)+",") || strings.Count(c.URL(), c.Token) != 1 {
		t.Fatalf("the cluster's URL does not carry the token on its first server only")
	}
	c.Stop(0)
	nc, _, err := broker.Connect(c.URL(), t.Name(), testkit.Logger(t), broker.WithConnectTimeout(2*time.Second))
	if err != nil {
		t.Fatalf("connect with the first server down: %v", err)
	}
	defer nc.Close()
	if got := nc.ConnectedServerName(); got == c.ServerName(0) || got == "" {
		t.Fatalf("connected to %q", got)
	}
}
