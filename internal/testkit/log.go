package testkit

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Logger returns a logger that writes warnings and errors to the test log,
// where `go test` shows them when the test fails (or with -v). It goes quiet
// once the test has ended: the code under test and client libraries log from
// their own goroutines, which may outlive the test by a moment, and the
// testing package refuses a log line after the end.
func Logger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	// Cleanups run last-in first-out: this one runs after those of the
	// parts the test starts once it has the logger.
	t.Cleanup(w.close)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct {
	mu     sync.Mutex
	t      testing.TB
	closed bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
}

// Buffer collects log lines written from several goroutines, for a test
// that reads them while the code under test still writes.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Contains reports whether what was written so far contains sub.
func (s *Buffer) Contains(sub string) bool { return strings.Contains(s.String(), sub) }
