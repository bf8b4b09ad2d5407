package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsClusterSize is the number of nats-servers of a cluster run: the
// smallest JetStream cluster in which an R3 stream keeps its quorum with
// one server down.
const natsClusterSize = 3

// natsNode is one nats-server of the run. Its ports and store stay the
// same across kills, so a restarted server comes back as itself: the
// clients and the other servers reconnect to it, and it catches up from
// its own store and its peers.
type natsNode struct {
	// name is the server's name (server_name; the stream's leader is
	// reported by it) and log is its log's name in the work folder.
	name, log string
	port      int
	// clusterPort and httpPort (monitoring, for /healthz) are 0 on a
	// single server.
	clusterPort, httpPort int
	store                 string
	// conf is the configuration file of a cluster server.
	conf string
	proc *proc // guarded by stack.mu
}

// startBroker starts the broker: one nats-server -js, or, in a cluster
// run, natsClusterSize servers with routes to each other, each with its
// own store and configuration in the work folder, all on free 127.0.0.1
// ports, JetStream fsyncing every message before it acknowledges it
// (sync_interval: always, as deploy/nats.conf). It returns once every server
// is ready: on a cluster, once each reports itself healthy, which needs a
// JetStream meta leader.
func (s *stack) startBroker(ctx context.Context) error {
	if !s.cluster {
		port, err := freePort()
		if err != nil {
			return err
		}
		s.nats = []*natsNode{{name: "oncepay-chaos", log: "nats-server", port: port, store: filepath.Join(s.dir, "nats")}}
		s.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", port)
		return s.startNATS(ctx, 0)
	}
	ports, err := freePorts(3 * natsClusterSize)
	if err != nil {
		return err
	}
	var urls, routes []string
	for i := range natsClusterSize {
		n := &natsNode{name: fmt.Sprintf("oncepay-chaos-%d", i), log: fmt.Sprintf("nats-server-%d", i),
			port: ports[3*i], clusterPort: ports[3*i+1], httpPort: ports[3*i+2],
			store: filepath.Join(s.dir, fmt.Sprintf("nats-%d", i)), conf: filepath.Join(s.dir, fmt.Sprintf("nats-%d.conf", i))}
		s.nats = append(s.nats, n)
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", n.port))
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", n.clusterPort))
	}
	s.natsURL = strings.Join(urls, ",")
	for _, n := range s.nats {
		conf := fmt.Sprintf(`# Server of the chaos run's JetStream cluster.
server_name: %q
listen: "127.0.0.1:%d"
http: "127.0.0.1:%d"
jetstream {
  store_dir: %q
  sync_interval: always
}
cluster {
  name: "oncepay-chaos"
  listen: "127.0.0.1:%d"
  routes: [%s]
  connect_retries: -1
}
`, n.name, n.port, n.httpPort, n.store, n.clusterPort, strings.Join(routes, ", "))
		if err := os.WriteFile(n.conf, []byte(conf), 0o644); err != nil {
			return err
		}
	}
	// All three first: none is healthy before the others are there.
	for i := range s.nats {
		if err := s.spawnNATS(i); err != nil {
			return err
		}
	}
	for i := range s.nats {
		if err := s.waitNATS(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var out []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close() // held until all are picked: distinct ports
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// natsProc returns the current process of server i (nil before its start).
func (s *stack) natsProc(i int) *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nats[i].proc
}

// startNATS starts server i on its ports and store and waits until it is
// ready.
func (s *stack) startNATS(ctx context.Context, i int) error {
	if err := s.spawnNATS(i); err != nil {
		return err
	}
	return s.waitNATS(ctx, i)
}

func (s *stack) spawnNATS(i int) error {
	n := s.nats[i]
	args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(n.port), "-js", "-sd", n.store, "-n", n.name}
	if n.conf != "" {
		args = []string{"-c", n.conf}
	}
	p, err := startProc(n.log, s.bin.NATS, args, baseEnv(), s.dir, &s.races, nil)
	if err != nil {
		return err
	}
	s.mu.Lock()
	n.proc = p
	s.mu.Unlock()
	return nil
}

// waitNATS polls server i until it is ready, at most readyTimeout: a
// single server once it accepts connections, a cluster server once its
// /healthz answers 200 (JetStream up, a meta leader known, its streams
// current: a restarted server has caught up).
func (s *stack) waitNATS(ctx context.Context, i int) error {
	n := s.nats[i]
	p := s.natsProc(i)
	ready, fire := signalOnce()
	hc := &http.Client{Timeout: time.Second}
	go func() {
		deadline := time.Now().Add(readyTimeout)
		for p.alive() && ctx.Err() == nil && time.Now().Before(deadline) {
			if n.httpPort == 0 {
				c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", n.port), 200*time.Millisecond)
				if err == nil {
					c.Close()
					fire()
					return
				}
			} else if res, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", n.httpPort)); err == nil {
				_ = res.Body.Close()
				if res.StatusCode == http.StatusOK {
					fire()
					return
				}
			}
			t := time.NewTimer(50 * time.Millisecond)
			select {
			case <-t.C:
			case <-p.done:
				t.Stop()
			}
		}
	}()
	return p.waitReady(ctx, ready, readyTimeout)
}

// killNATS SIGKILLs server i; restartNATS brings it back on its ports and
// store after down.
func (s *stack) killNATS(i int) { s.natsProc(i).kill() }

func (s *stack) restartNATS(ctx context.Context, i int, down time.Duration) error {
	if err := pause(ctx, down); err != nil {
		return err
	}
	return s.startNATS(ctx, i)
}

// streamLeader returns the index of the server that leads the event
// stream now.
func (s *stack) streamLeader(ctx context.Context) (int, error) {
	nc, err := nats.Connect(s.natsURL, nats.Name("oncepay-chaos"), nats.Timeout(2*time.Second))
	if err != nil {
		return -1, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return -1, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, streamEvents)
	if err != nil {
		return -1, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return -1, err
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return -1, errors.New("the stream has no leader")
	}
	for i, n := range s.nats {
		if n.name == info.Cluster.Leader {
			return i, nil
		}
	}
	return -1, fmt.Errorf("the stream's leader %q is none of the run's servers", info.Cluster.Leader)
}
