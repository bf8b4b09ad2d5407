package broker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Embedded is a nats-server with JetStream running inside this process,
// listening on a loopback port. It is the default for `make run` and the
// tests; production points NATS_URL at a real cluster.
//
// It accepts only clients that present its token, a random one per server
// unless WithToken says otherwise: loopback is shared by every user and
// process of the machine, and a client of the broker can publish events the
// consumers act on (a payment.succeeded fulfils an order) and read every
// tenant's events. ClientURL carries the token; the URL file in the store
// directory, readable by its owner only, hands it to the operator commands
// of other processes (EmbeddedURL).
type Embedded struct {
	srv *server.Server
	dir string
	// port is the port asked for (WithPort) until the server listens, then
	// the port it listens on.
	port       int
	token      string
	syncAlways bool
	once       sync.Once
}

// EmbeddedOption configures an Embedded server.
type EmbeddedOption func(*Embedded)

// WithPort binds the server to port on 127.0.0.1. The default, 0, lets the
// kernel pick a free one; a fixed port is only for restarting a server on
// the port its clients already know (see Embedded.Port).
func WithPort(port int) EmbeddedOption { return func(e *Embedded) { e.port = port } }

// WithToken makes the server accept only clients that present token. The
// default is a token of 130 random bits (crypto/rand) made for this server;
// a token of your own is only for restarting a server whose clients know it
// already (see Embedded.Token).
func WithToken(token string) EmbeddedOption { return func(e *Embedded) { e.token = token } }

// WithSyncAlways(false) turns off what the embedded server does by
// default: fsync every message before it sends the PubAck
// (sync_interval: always). The outbox marks an event published on that
// PubAck, so only a synced message may be acknowledged: off, as in
// JetStream's own default, messages reach the file store at once and are
// fsynced every two minutes, and a power loss can lose the last of them
// after the outbox forgot them. Turn it off only where a test or a
// benchmark measures something other than the disk (outboxbench's
// --sync-always=false); api serve never does.
func WithSyncAlways(on bool) EmbeddedOption { return func(e *Embedded) { e.syncAlways = on } }

// StartEmbedded starts a nats-server with JetStream storing its files under
// dir (created if needed; the same dir keeps the streams across restarts),
// bound to 127.0.0.1 on a port the kernel picks unless WithPort says
// otherwise. It returns once the server accepts connections, and fails
// without dir or when the server does not start.
func StartEmbedded(dir string, logger *slog.Logger, opts ...EmbeddedOption) (*Embedded, error) {
	if dir == "" {
		// nats-server would fall back to a directory under os.TempDir()
		// that every embedded server of the machine shares.
		return nil, errors.New("embedded nats-server: a store directory is required")
	}
	e := &Embedded{dir: dir, syncAlways: true}
	for _, o := range opts {
		o(e)
	}
	port := e.port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	if e.token == "" {
		e.token = strings.ToLower(rand.Text())
	}
	so := &server.Options{
		ServerName: "oncepay-embedded",
		Host:       "127.0.0.1",
		Port:       port,
		// Only clients with the token connect: anyone else on the machine
		// is refused before they can publish or subscribe.
		Authorization: e.token,
		JetStream:     true,
		StoreDir:      dir,
		SyncAlways:    e.syncAlways,
		// The embedding process owns the signals. No monitoring, cluster,
		// gateway or leaf node port is configured, so nothing else listens.
		NoSigs: true,
	}
	srv, err := server.NewServer(so)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	srv.SetLoggerV2(slogAdapter{logger}, false, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("embedded nats-server did not start within 10s (store %s)", dir)
	}
	addr, ok := srv.Addr().(*net.TCPAddr)
	if !ok {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("embedded nats-server: unexpected listen address %v", srv.Addr())
	}
	e.srv, e.port = srv, addr.Port
	// Operator commands of other processes (`api outbox replay`) find the
	// server through this file; the port is random, and so is the token.
	if err := writePrivate(filepath.Join(dir, urlFile), []byte(e.ClientURL()+"\n")); err != nil {
		e.Shutdown()
		return nil, fmt.Errorf("embedded nats-server: write %s: %w", urlFile, err)
	}
	logger.Info("embedded nats-server started", "url", redact(e.ClientURL()), "store_dir", dir)
	return e, nil
}

// urlFile, in the store directory, holds the client URL of the embedded
// server, its token included, while it runs. Only its owner may read it.
const urlFile = "client-url"

// writePrivate writes data to path readable and writable by its owner only,
// whatever a file left there before allowed: it writes a new file and renames
// it over the old one, so no reader ever sees a partial URL or a looser mode.
func writePrivate(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*") // created with mode 0600
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // gone after the rename; left behind only on failure
	if _, err := f.Write(data); err != nil {
		_ = f.Close() // the write error is the one to report
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// EmbeddedURL returns the client URL, with its token, of the embedded server
// that runs (in another process) on the store directory dir. Never start a
// second embedded server on a directory in use: connect to the running one.
func EmbeddedURL(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, urlFile)) // #nosec G304 -- dir is NATS_STORE_DIR, chosen by the operator
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("no embedded nats-server runs on %s (start `api serve`, or set NATS_URL)", dir)
	}
	if err != nil {
		return "", fmt.Errorf("read embedded nats-server URL: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// ClientURL is the nats:// URL clients connect to, with the server's token
// as its user information (nats://<token>@127.0.0.1:<port>), as NATS URLs
// carry tokens. It is a credential: log it redacted.
func (e *Embedded) ClientURL() string {
	return fmt.Sprintf("nats://%s@127.0.0.1:%d", e.token, e.port)
}

// Token is the token the server accepts. Passing it to StartEmbedded
// (WithToken), with the same port and dir, brings back a server its clients
// reconnect to.
func (e *Embedded) Token() string { return e.token }

// Port is the port the server listens on. Passing it to StartEmbedded
// (WithPort) with the same dir brings the same server back, and clients
// reconnect to it.
func (e *Embedded) Port() int { return e.port }

// Dir is the store directory.
func (e *Embedded) Dir() string { return e.dir }

// Shutdown stops the server and waits until it has closed its store. Call it
// after the connections that use it are drained: clients see a disconnect.
// It is safe to call more than once.
func (e *Embedded) Shutdown() {
	e.once.Do(func() {
		_ = os.Remove(filepath.Join(e.dir, urlFile))
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
	})
}

// slogAdapter routes nats-server's log lines to slog. Its notices (startup
// banners, limits) are debug lines here; warnings and errors stay what they are.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Noticef(format string, v ...any) {
	if !a.l.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	a.l.Debug(fmt.Sprintf(format, v...), "component", "nats-server")
}

func (a slogAdapter) Warnf(format string, v ...any) {
	a.l.Warn(fmt.Sprintf(format, v...), "component", "nats-server")
}

// Fatalf is logged as an error: the server shuts itself down after a fatal
// condition, and the process decides what that means.
func (a slogAdapter) Fatalf(format string, v ...any) {
	a.l.Error(fmt.Sprintf(format, v...), "component", "nats-server", "fatal", true)
}

func (a slogAdapter) Errorf(format string, v ...any) {
	a.l.Error(fmt.Sprintf(format, v...), "component", "nats-server")
}

func (a slogAdapter) Debugf(format string, v ...any) {
	if !a.l.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	a.l.Debug(fmt.Sprintf(format, v...), "component", "nats-server")
}

func (a slogAdapter) Tracef(string, ...any) {}
