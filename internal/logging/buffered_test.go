package logging_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/logging"
)

// sink counts the writes it gets and keeps what they wrote.
type sink struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
}

func (s *sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.buf.Write(p)
}

func (s *sink) read() (string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String(), s.writes
}

func newLogger(w *logging.Buffered) *slog.Logger {
	return slog.New(logging.FlushAbove(slog.NewJSONHandler(w, nil), w, slog.LevelWarn))
}

// Many lines logged at once cost a few writes, not one each, and every
// line arrives whole and in order once the interval has passed, without a
// flush.
func TestLinesGoOutTogetherWithinTheInterval(t *testing.T) {
	t.Parallel()
	s := &sink{}
	w := logging.NewBuffered(s, 20*time.Millisecond)
	logger := newLogger(w)
	const lines = 1000
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range lines / 4 {
				logger.Info("request", "g", g, "i", i)
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, writes := s.read()
		if n := strings.Count(out, "\n"); n == lines {
			if writes > lines/10 {
				t.Fatalf("%d lines took %d writes, want at most %d", lines, writes, lines/10)
			}
			for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
				if !strings.HasPrefix(l, "{") || !strings.HasSuffix(l, "}") {
					t.Fatalf("a line came out torn: %q", l)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d lines written 10s after the last one", strings.Count(out, "\n"), lines)
		}
		time.Sleep(5 * time.Millisecond) // polling, with the deadline above
	}
}

// A warning goes out at once, with the lines before it; so does whatever is
// held when the writer is closed.
func TestWarningsAndCloseFlush(t *testing.T) {
	t.Parallel()
	s := &sink{}
	w := logging.NewBuffered(s, time.Hour)
	logger := newLogger(w)
	logger.Info("first")
	if out, _ := s.read(); out != "" {
		t.Fatalf("an info line went out before its interval: %q", out)
	}
	logger.With("k", "v").Warn("second")
	if out, _ := s.read(); !strings.Contains(out, `"msg":"first"`) || !strings.Contains(out, `"msg":"second"`) {
		t.Fatalf("after a warning, written = %q; want both lines", out)
	}
	logger.Info("third")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if out, _ := s.read(); !strings.Contains(out, `"msg":"third"`) {
		t.Fatalf("after Close, written = %q; want the third line", out)
	}
	logger.Info("fourth")
	if out, _ := s.read(); !strings.Contains(out, `"msg":"fourth"`) {
		t.Fatalf("after Close a line waits: %q", out)
	}
}

// An interval of 0 is no buffer: each line is written when it is logged.
func TestNoIntervalWritesEachLine(t *testing.T) {
	t.Parallel()
	s := &sink{}
	logger := newLogger(logging.NewBuffered(s, 0))
	logger.Info("one")
	logger.Info("two")
	if out, writes := s.read(); writes != 2 || strings.Count(out, "\n") != 2 {
		t.Fatalf("%d writes of %q, want two lines in two writes", writes, out)
	}
}
