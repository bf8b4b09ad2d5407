// Package broker owns the connection to NATS JetStream, the embedded server
// the API runs when no NATS_URL is configured, and the declaration of the
// event stream.
//
// A broker's "exactly once" never replaces idempotent side effects:
// JetStream deduplicates by message id (the Nats-Msg-Id header, which the
// outbox sets to the event id) inside a duplicate window, and that is an
// optimisation, never the guarantee. A
// message published again after the window, a redelivery after a lost ack,
// or an operator's replay all reach consumers again; their inbox makes them
// harmless.
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The event stream. Every outbox event is published on
// SubjectPrefix + "." + its type, e.g. oncepay.events.payment.succeeded.
const (
	// StreamEvents is the name of the stream that stores every event.
	StreamEvents = "ONCEPAY_EVENTS"
	// SubjectPrefix is the first part of every event subject.
	SubjectPrefix = "oncepay.events"
)

// Headers of an event message besides Nats-Msg-Id (jetstream.MsgIDHeader),
// which carries the event id. The body is the event's JSON payload as the
// producer wrote it to the outbox.
const (
	HeaderTenantID       = "Oncepay-Tenant-Id"
	HeaderEventType      = "Oncepay-Event-Type"
	HeaderAggregateType  = "Oncepay-Aggregate-Type"
	HeaderAggregateID    = "Oncepay-Aggregate-Id"
	HeaderIdempotencyKey = "Oncepay-Idempotency-Key"
	HeaderOccurredAt     = "Oncepay-Occurred-At"
)

// Subject returns the subject an event of eventType is published on.
func Subject(eventType string) string { return SubjectPrefix + "." + eventType }

// Defaults of StreamsConfig.
const (
	// DefaultDuplicateWindow is JetStream's own default: two minutes in
	// which a second message with the same Nats-Msg-Id is acknowledged
	// (PubAck.Duplicate) but not stored again.
	DefaultDuplicateWindow = 2 * time.Minute
	// DefaultMaxAge keeps events in the stream for a week, so a consumer
	// that was down, or a new one, can catch up.
	DefaultMaxAge = 7 * 24 * time.Hour
)

// StreamsConfig tunes the stream. Zero values take the defaults above.
type StreamsConfig struct {
	// DuplicateWindow is the stream's deduplication window (default
	// DefaultDuplicateWindow). Tests shorten it to watch a duplicate get
	// through.
	DuplicateWindow time.Duration
	// MaxAge is how long the stream keeps a message (default
	// DefaultMaxAge). It bounds how late the broker can deliver a message
	// again, and so how long consumers must keep their inbox rows.
	MaxAge time.Duration
	// Replicas is the stream's replication factor (default 1: the embedded
	// server is a single node; use 3 on a cluster, NATS_STREAM_REPLICAS).
	// EnsureStreams raises it on an existing stream and refuses to lower it.
	Replicas int
}

// StreamConfig returns the JetStream configuration of the event stream:
// file storage, limits retention (messages stay for MaxAge whoever consumed
// them, so several consumers can read the same events), the duplicate window.
func StreamConfig(cfg StreamsConfig) jetstream.StreamConfig {
	if cfg.DuplicateWindow == 0 {
		cfg.DuplicateWindow = DefaultDuplicateWindow
	}
	if cfg.MaxAge == 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	return jetstream.StreamConfig{
		Name:        StreamEvents,
		Description: "oncepay outbox events, published at least once with the event id as Nats-Msg-Id",
		Subjects:    []string{SubjectPrefix + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardOld,
		MaxAge:      cfg.MaxAge,
		Duplicates:  cfg.DuplicateWindow,
		Replicas:    cfg.Replicas,
		// The dispatcher publishes each claimed batch as one atomic batch
		// (outbox.Dispatcher.publish): stored at once, with one sync.
		AllowAtomicPublish: true,
	}
}

// EnsureStreams declares the event stream, creating it or updating it to
// cfg. It is idempotent: every process calls it at start.
//
// The replica count may rise (R1 to R3 once NATS_URL names a cluster:
// JetStream copies the stored messages to the new replicas) but never
// fall. A stream that has more replicas than cfg asks for is refused
// with ErrFewerReplicas and left as it is: every process declares the
// stream at start, so one started without NATS_STREAM_REPLICAS (default
// 1) would otherwise set an R3 stream back to R1, where one server down
// stops the event flow and one lost disk loses acknowledged events. Lowering it is
// an operator's deliberate act (nats stream edit), before the processes
// are configured with the lower count. The check reads the stream before
// the update, so two processes started at the same moment with different
// counts can still race; a deployment changes the count on every process.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, cfg StreamsConfig) error {
	sc := StreamConfig(cfg)
	if sc.Duplicates > sc.MaxAge {
		return fmt.Errorf("stream %s: duplicate window %v exceeds max age %v", sc.Name, sc.Duplicates, sc.MaxAge)
	}
	// Twice at most: a stream that another process created between the
	// lookup and the create is looked up again and checked.
	for range 2 {
		s, err := js.Stream(ctx, sc.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			_, err = js.CreateStream(ctx, sc)
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				continue
			}
			if err != nil {
				return fmt.Errorf("declare stream %s: %w", sc.Name, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("declare stream %s: %w", sc.Name, err)
		}
		if have := s.CachedInfo().Config.Replicas; have > sc.Replicas {
			return fmt.Errorf("declare stream %s: %w: it has %d, this process is configured with %d (set NATS_STREAM_REPLICAS=%d; to lower it on purpose, edit the stream first: nats stream edit %s --replicas %d)",
				sc.Name, ErrFewerReplicas, have, sc.Replicas, have, sc.Name, sc.Replicas)
		}
		if _, err := js.UpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("declare stream %s: %w", sc.Name, err)
		}
		return nil
	}
	return fmt.Errorf("declare stream %s: created and gone again meanwhile", sc.Name)
}

// ErrFewerReplicas is EnsureStreams' refusal to lower the stream's replica
// count.
var ErrFewerReplicas = errors.New("refusing to lower the replica count of the stream")

// Defaults of the connection (ConnectOption).
const (
	// DefaultConnectTimeout bounds dialling the server and the protocol's
	// opening exchange, on the first connect and on every reconnect.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultPingInterval is how often the client pings the server. Two
	// pings without their answer mark the connection stale and the client
	// reconnects, so a server that accepts and never answers (a
	// partition, a frozen host) is noticed within two to three intervals.
	// NATS's own default is two minutes.
	DefaultPingInterval = 10 * time.Second
)

// maxPingsOut is how many pings may be unanswered before the connection is
// stale (NATS's default).
const maxPingsOut = 2

// connectConfig is what the ConnectOptions tune.
type connectConfig struct {
	connectTimeout time.Duration
	pingInterval   time.Duration
}

// ConnectOption configures Connect. An option given a value that is not
// positive keeps its default.
type ConnectOption func(*connectConfig)

// WithConnectTimeout bounds dialling the server and the opening exchange
// (default DefaultConnectTimeout, 5s).
func WithConnectTimeout(d time.Duration) ConnectOption {
	return func(c *connectConfig) {
		if d > 0 {
			c.connectTimeout = d
		}
	}
}

// WithPingInterval is how often the client pings the server (default
// DefaultPingInterval, 10s; app.Tuning.NATSPingInterval): it bounds how long a
// server that stopped answering goes unnoticed.
func WithPingInterval(d time.Duration) ConnectOption {
	return func(c *connectConfig) {
		if d > 0 {
			c.pingInterval = d
		}
	}
}

// Connect connects to the NATS server at url and returns the connection and
// its JetStream context. The connection reconnects forever: while the broker
// is away, the outbox keeps the events (the dispatcher records failed
// attempts and backs off) and consumers simply receive nothing, so there is
// no point at which giving up would help. A broker that accepts and never
// answers is noticed by the pings (WithPingInterval) and treated the same
// way. name shows in the server's connection list.
//
// url may list the servers of a cluster, comma-separated
// ("nats://token@a:4222,nats://b:4222,nats://c:4222"): the client connects
// to one of them, learns the others from the cluster, and reconnects to
// another when its server goes. Credentials written on one server of the
// list apply to the others that have none.
func Connect(url, name string, logger *slog.Logger, opts ...ConnectOption) (*nats.Conn, jetstream.JetStream, error) {
	cfg := connectConfig{connectTimeout: DefaultConnectTimeout, pingInterval: DefaultPingInterval}
	for _, o := range opts {
		o(&cfg)
	}
	nc, err := nats.Connect(serverList(url),
		nats.Name(name),
		nats.Timeout(cfg.connectTimeout),
		nats.PingInterval(cfg.pingInterval),
		nats.MaxPingsOutstanding(maxPingsOut),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logger.Warn("nats disconnected", "error", err.Error())
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			logger.Info("nats reconnected", "url", c.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			logger.Warn("nats async error", "subject", subject, "error", err.Error())
		}),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to nats at %s: %w", redact(url), err)
	}
	// An async publish whose PubAck never comes (the server went away
	// mid-flight) fails after this long instead of waiting forever; the
	// dispatcher bounds its own wait more tightly.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream context: %w", err)
	}
	return nc, js, nil
}

// serverList splits a NATS URL that lists several servers
// ("nats://a:4222,nats://b:4222", as nats.Connect takes it) and gives every
// server without credentials those of the first one that has them, so a
// cluster's token or user and password need to be written once. nats.go
// uses each URL's own credentials: without this, a client whose first
// choice (the list is shuffled) or later reconnect is a server written
// without them would be refused. A server's own credentials are kept.
func serverList(url string) string {
	servers := strings.Split(url, ",")
	creds := ""
	for i, s := range servers {
		servers[i] = strings.TrimSpace(s)
		if c := userinfo(servers[i]); creds == "" && c != "" {
			creds = c
		}
	}
	if creds == "" || len(servers) == 1 {
		return url
	}
	for i, s := range servers {
		if userinfo(s) != "" {
			continue
		}
		if scheme, rest, ok := strings.Cut(s, "://"); ok {
			servers[i] = scheme + "://" + creds + "@" + rest
		} else {
			servers[i] = creds + "@" + s
		}
	}
	return strings.Join(servers, ",")
}

// userinfo returns the credentials of one server URL ("" for none): what
// comes between the scheme and an "@" before the host's end.
func userinfo(server string) string {
	_, rest, ok := strings.Cut(server, "://")
	if !ok {
		rest = server
	}
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		rest = rest[:end]
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		return rest[:at]
	}
	return ""
}

// redact drops credentials from a NATS URL, or from every server of a
// list, for logs and error messages.
func redact(url string) string {
	servers := strings.Split(url, ",")
	for i, s := range servers {
		if c := userinfo(s); c != "" {
			servers[i] = strings.Replace(s, c+"@", "***@", 1)
		}
	}
	return strings.Join(servers, ",")
}
