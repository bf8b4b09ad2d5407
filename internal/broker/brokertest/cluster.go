package brokertest

import (
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/oncepay/oncepay/internal/testkit"
)

// ClusterSize is how many servers StartCluster starts: the smallest
// cluster in which an R3 stream keeps its quorum with one server down.
const ClusterSize = 3

// Cluster is a real NATS JetStream cluster of ClusterSize servers running in
// the test's process: each with its own store directory under t.TempDir(),
// a client port and a cluster port on 127.0.0.1, routes to the others, and
// JetStream on. Clients need its token (URL carries it), and so do routes
// (a user and password of the cluster's own), as the embedded server does:
// loopback is shared by everyone on the machine. A test can stop any server
// and start it again on the same ports and store directory (Stop, Start).
// Everything is shut down when the test ends.
type Cluster struct {
	// Name is the cluster's name; the servers are Name-0, Name-1, Name-2.
	Name string
	// Token is what the servers ask of clients.
	Token string

	logger    *slog.Logger
	routeUser string
	routePass string

	mu    sync.Mutex
	nodes [ClusterSize]*node
}

// node is one server of the cluster. Its ports and directory stay the same
// across Stop and Start; srv is nil while it is stopped.
type node struct {
	name        string
	base        string // under t.TempDir(); dir is in it
	dir         string
	clientPort  int
	clusterPort int
	srv         *server.Server
}

// StartCluster starts the cluster and returns once its JetStream meta
// group has a leader and every server is current (WaitReady), within 30
// seconds.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	c := &Cluster{
		Name:      "oncepay-test",
		Token:     strings.ToLower(rand.Text()),
		logger:    testkit.Logger(t),
		routeUser: "route",
		routePass: strings.ToLower(rand.Text()),
	}
	for i := range c.nodes {
		c.nodes[i] = &node{name: fmt.Sprintf("%s-%d", c.Name, i), base: t.TempDir()}
	}
	// After t.TempDir: cleanups run last first, so the servers stop before
	// their directories are removed.
	t.Cleanup(c.shutdown)
	// The cluster ports must be known before any server starts, since
	// each server's routes name all of them. A port found free can be
	// taken before the server binds it: then pick others, a few times.
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = c.startAll(attempt); err == nil {
			break
		}
		c.shutdown()
	}
	if err != nil {
		t.Fatalf("start nats cluster: %v", err)
	}
	c.WaitReady(t, 30*time.Second)
	return c
}

// startAll picks the cluster ports and starts every server, each on a store
// directory of this attempt's (nothing of a failed attempt is reused).
func (c *Cluster) startAll(attempt int) error {
	ports, err := freePorts(ClusterSize)
	if err != nil {
		return err
	}
	c.mu.Lock()
	for i, n := range c.nodes {
		n.clientPort, n.clusterPort = server.RANDOM_PORT, ports[i]
		n.dir = filepath.Join(n.base, fmt.Sprintf("store-%d", attempt))
	}
	c.mu.Unlock()
	for i := range c.nodes {
		if err := c.start(i); err != nil {
			return err
		}
	}
	return nil
}

// freePorts returns n distinct ports that were free on 127.0.0.1 a moment ago.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		// Held open until all are picked, so the kernel gives distinct ones.
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// options are server i's options: its own ports and store, routes to every
// server of the cluster (nats-server skips the route to itself).
func (c *Cluster) options(i int) *server.Options {
	n := c.nodes[i]
	routes := make([]*url.URL, 0, ClusterSize)
	for _, m := range c.nodes {
		routes = append(routes, &url.URL{
			Scheme: "nats-route",
			User:   url.UserPassword(c.routeUser, c.routePass),
			Host:   fmt.Sprintf("127.0.0.1:%d", m.clusterPort),
		})
	}
	return &server.Options{
		ServerName:    n.name,
		Host:          "127.0.0.1",
		Port:          n.clientPort,
		Authorization: c.Token,
		JetStream:     true,
		StoreDir:      n.dir,
		// As the embedded server and deploy/nats.conf: a PubAck means the
		// message is on disk on every replica that acknowledged it.
		SyncAlways: true,
		Cluster: server.ClusterOpts{
			Name:     c.Name,
			Host:     "127.0.0.1",
			Port:     n.clusterPort,
			Username: c.routeUser,
			Password: c.routePass,
			// A server that starts before the others keeps trying them.
			ConnectRetries: -1,
		},
		Routes: routes,
		NoSigs: true,
		// No monitoring, gateway, leaf node or websocket port.
	}
}

// start starts server i on its ports and store directory and waits until
// it accepts clients. A first start learns the client port the kernel gave.
func (c *Cluster) start(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[i]
	if n.srv != nil {
		return fmt.Errorf("server %s runs already", n.name)
	}
	srv, err := server.NewServer(c.options(i))
	if err != nil {
		return fmt.Errorf("server %s: %w", n.name, err)
	}
	srv.SetLoggerV2(serverLogger{c.logger.With("server", n.name)}, false, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return fmt.Errorf("server %s did not accept clients within 10s (client port %d, cluster port %d)", n.name, n.clientPort, n.clusterPort)
	}
	n.clientPort = srv.Addr().(*net.TCPAddr).Port
	n.srv = srv
	return nil
}

// Start starts server i again, on the ports and the store directory it had,
// so that its clients and the other servers reconnect to it. It does not
// wait for the server to catch up; WaitReady does.
func (c *Cluster) Start(t testing.TB, i int) {
	t.Helper()
	if err := c.start(i); err != nil {
		t.Fatalf("start nats server again: %v", err)
	}
}

// Stop shuts server i down and waits until it has closed its store: its
// clients see a disconnect and reconnect to another server.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	srv := c.nodes[i].srv
	c.nodes[i].srv = nil
	c.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

func (c *Cluster) shutdown() {
	for i := range c.nodes {
		c.Stop(i)
	}
}

// Server returns server i, nil while it is stopped.
func (c *Cluster) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].srv
}

// ServerName is the name of server i, as stream and consumer infos name
// their leader and replicas.
func (c *Cluster) ServerName(i int) string { return c.nodes[i].name }

// ClientURL is the client URL of server i, with the token.
func (c *Cluster) ClientURL(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("nats://%s@127.0.0.1:%d", c.Token, c.nodes[i].clientPort)
}

// URL lists every server's client URL, comma-separated, as NATS_URL takes
// a cluster; the token is written on the first only, as an operator may
// write it (broker.Connect applies it to the others).
func (c *Cluster) URL() string {
	urls := make([]string, ClusterSize)
	for i := range urls {
		urls[i] = c.ClientURL(i)
		if i > 0 {
			urls[i] = strings.Replace(urls[i], c.Token+"@", "", 1)
		}
	}
	return strings.Join(urls, ",")
}

// Index returns the index of the server named name, -1 for none.
func (c *Cluster) Index(name string) int {
	for i, n := range c.nodes {
		if n.name == name {
			return i
		}
	}
	return -1
}

// WaitReady waits until the running servers form a healthy JetStream
// cluster: one of them leads the meta group and sees every running server
// as an online peer, and each reports itself healthy (nats-server's
// /healthz: JetStream current, and every stream and consumer replica it
// holds caught up). It fails the test after timeout.
func (c *Cluster) WaitReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		why := c.notReady()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats cluster not ready after %v: %s", timeout, why)
		}
		<-tick.C
	}
}

// notReady says why the cluster is not ready, "" when it is.
func (c *Cluster) notReady() string {
	var running []*server.Server
	for i := range c.nodes {
		if s := c.Server(i); s != nil {
			running = append(running, s)
		}
	}
	leaders := 0
	for _, s := range running {
		if h := s.Healthz(&server.HealthzOptions{}); h.Status != "ok" {
			return fmt.Sprintf("%s: %s %s", s.Name(), h.Status, h.Error)
		}
		if s.JetStreamIsLeader() {
			leaders++
			if peers := s.JetStreamClusterPeers(); len(peers) != len(running) {
				return fmt.Sprintf("the meta leader %s sees %d peers online (%v), %d servers run", s.Name(), len(peers), peers, len(running))
			}
		}
	}
	if leaders != 1 {
		return fmt.Sprintf("%d meta leaders", leaders)
	}
	return ""
}

// serverLogger routes nats-server's warnings and errors to slog (the test
// log: many while a server is down, routes refused and elections).
type serverLogger struct{ l *slog.Logger }

func (a serverLogger) Noticef(string, ...any) {}
func (a serverLogger) Debugf(string, ...any)  {}
func (a serverLogger) Tracef(string, ...any)  {}
func (a serverLogger) Warnf(format string, v ...any) {
	a.l.Warn(fmt.Sprintf(format, v...), "component", "nats-server")
}
func (a serverLogger) Errorf(format string, v ...any) {
	a.l.Error(fmt.Sprintf(format, v...), "component", "nats-server")
}
func (a serverLogger) Fatalf(format string, v ...any) {
	a.l.Error(fmt.Sprintf(format, v...), "component", "nats-server", "fatal", true)
}
