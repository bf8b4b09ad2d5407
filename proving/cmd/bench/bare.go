package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/oncepay/oncepay/client"
)

// bareCommand is the first argument that makes the bench binary serve the
// http scenario's bare exchange instead of benchmarking (serveBare); the
// bench starts that process itself.
const bareCommand = "serve-bare-http"

// bareOrder is the bare server's answer to every request: an order of the
// shape and size the API answers a create with, so that the client does the
// same work as in the create scenario (it decodes the body into
// client.Order).
var bareOrder = client.Order{
	ID: "3f0c8c47-2f43-4f4e-9a3e-7c1b2f1f6a10", Status: client.OrderAwaitingPayment, Currency: "EUR", AmountTotal: 1800,
	Items:     []client.OrderItem{{SKU: "travel-mug", Name: "Travel mug", Quantity: 1, UnitAmount: 1800, Amount: 1800}},
	CreatedAt: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC),
}

// serveBare is the bare server: on a free port of 127.0.0.1 it answers
// every request by reading its body and sending bareOrder with 201, and
// nothing else, the least any HTTP service does for a create. It writes its
// base URL as the first line of stdout and serves until stdin ends (its
// parent closed it, or exited).
func serveBare(stdin io.Reader, stdout io.Writer) error {
	body, err := json.Marshal(bareOrder)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("bare server: %w", err)
	}
	srv := &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(body)
		}),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "http://%s\n", ln.Addr())
	_, _ = io.Copy(io.Discard, stdin)
	_ = srv.Close()
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// bareServer is a running bare server process.
type bareServer struct {
	url   string
	pid   int
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startBare starts this binary as a bare server (bareCommand) in a process
// of its own, as the API is one: the exchange then crosses processes the
// way a create does. cpus, when not empty, pins it with taskset, as make
// bench pins the API.
func startBare(ctx context.Context, cpus string) (*bareServer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bare server: %w", err)
	}
	cmd := exec.Command(exe, bareCommand)
	if cpus != "" {
		cmd = exec.Command("taskset", "-c", cpus, exe, bareCommand)
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bare server: %w", err)
	}
	b := &bareServer{pid: cmd.Process.Pid, cmd: cmd, stdin: stdin}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case b.url = <-line:
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
	}
	if !strings.HasPrefix(b.url, "http://") {
		b.stop()
		return nil, fmt.Errorf("bare server (pid %d) did not say where it listens", b.pid)
	}
	return b, nil
}

// stop ends the bare server (closing its stdin) and waits for it; it kills
// it if it does not end within a few seconds.
func (b *bareServer) stop() {
	_ = b.stdin.Close()
	t := time.AfterFunc(5*time.Second, func() { _ = b.cmd.Process.Kill() })
	_ = b.cmd.Wait()
	t.Stop()
}

// ceiling is the most a service that did the floor's work and one bare HTTP
// exchange per request could reach, as a share of the floor's throughput:
// their times per request add (at 1 client, latencies in series; with the
// cores saturated, CPU per request), so it is http/(floor+http) of the
// throughputs. NaN when either is unknown.
func ceiling(floor, http float64) float64 {
	if floor <= 0 || http <= 0 {
		return math.NaN()
	}
	return http / (floor + http)
}
