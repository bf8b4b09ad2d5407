// Package logging writes the service's JSON log without a write system call
// per line: request logging is one line per request, and on a busy API the
// write of each line was a measurable part of a request's CPU
// (docs/BENCHMARKS.md).
//
// Buffered collects lines and writes them out together, at most its flush
// interval after the first of them; FlushAbove makes a warning or an error
// go out at once, with everything before it. What a crash can lose is the
// info and debug lines of the last interval: a SIGKILL, or a fatal runtime
// error, which Go prints itself. A process that exits cleanly flushes
// (Close).
package logging

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// DefaultFlushInterval is how long a line may wait in a Buffered unless
// NewBuffered is told otherwise (app.Tuning.LogFlushInterval).
const DefaultFlushInterval = 100 * time.Millisecond

// maxBuffered is how many bytes a Buffered holds before it writes them out
// without waiting for its interval.
const maxBuffered = 64 << 10

// Buffered is an io.Writer for a log handler that writes whole lines. It is
// safe for concurrent use.
type Buffered struct {
	every time.Duration

	mu     sync.Mutex
	w      io.Writer
	buf    []byte
	timer  *time.Timer // armed while buf holds lines
	closed bool
}

// NewBuffered returns a Buffered writing to w at most every after the
// first line it holds. An interval of 0 or less writes every line at once
// (no buffer).
func NewBuffered(w io.Writer, every time.Duration) *Buffered {
	return &Buffered{w: w, every: every}
}

// Write takes one or more whole lines. It reports the error of the write
// that made room, if it had to write.
func (b *Buffered) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.every <= 0 || b.closed {
		return b.w.Write(p)
	}
	b.buf = append(b.buf, p...)
	if len(b.buf) >= maxBuffered {
		return len(p), b.flushLocked()
	}
	if b.timer == nil {
		b.timer = time.AfterFunc(b.every, func() { _ = b.Flush() })
	} else if len(b.buf) == len(p) {
		b.timer.Reset(b.every)
	}
	return len(p), nil
}

// Flush writes out the lines it holds.
func (b *Buffered) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flushLocked()
}

func (b *Buffered) flushLocked() error {
	if len(b.buf) == 0 {
		return nil
	}
	if b.timer != nil {
		b.timer.Stop()
	}
	_, err := b.w.Write(b.buf)
	b.buf = b.buf[:0]
	return err
}

// Close writes out what it holds; later lines are written at once.
func (b *Buffered) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return b.flushLocked()
}

// FlushAbove returns h with one change: after a record at level or above,
// w is flushed, so that a warning or an error, and every line before it,
// is on its way when Handle returns.
func FlushAbove(h slog.Handler, w *Buffered, level slog.Level) slog.Handler {
	return &flushing{Handler: h, w: w, level: level}
}

type flushing struct {
	slog.Handler
	w     *Buffered
	level slog.Level
}

func (f *flushing) Handle(ctx context.Context, r slog.Record) error {
	err := f.Handler.Handle(ctx, r)
	if r.Level >= f.level {
		if ferr := f.w.Flush(); err == nil {
			err = ferr
		}
	}
	return err
}

func (f *flushing) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &flushing{Handler: f.Handler.WithAttrs(attrs), w: f.w, level: f.level}
}

func (f *flushing) WithGroup(name string) slog.Handler {
	return &flushing{Handler: f.Handler.WithGroup(name), w: f.w, level: f.level}
}
