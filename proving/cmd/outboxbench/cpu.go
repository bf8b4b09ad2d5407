package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// userHZ is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100 on
// every Linux architecture Go supports).
const userHZ = 100

// cpuProbe reads the CPU time used so far by this process (the dispatcher,
// the consumer, the producer and the embedded NATS server) and by
// PostgreSQL (the postmaster and all its children). CPU per event does not
// depend on what else runs on the machine; latency does.
type cpuProbe struct{ pgPID int }

type cpuSample struct{ self, pg time.Duration }

func (s cpuSample) sub(o cpuSample) cpuSample {
	return cpuSample{self: s.self - o.self, pg: s.pg - o.pg}
}

// newCPUProbe finds the postmaster: the parent of a backend of pool, when
// the server runs on this machine. pgPID stays 0 otherwise.
func newCPUProbe(ctx context.Context, pool *pgxpool.Pool) cpuProbe {
	var backend int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return cpuProbe{}
	}
	st, err := readStat(strconv.Itoa(backend))
	if err != nil {
		return cpuProbe{}
	}
	return cpuProbe{pgPID: st.ppid}
}

func (p cpuProbe) sample() cpuSample {
	var s cpuSample
	if st, err := readStat("self"); err == nil {
		s.self = st.own
	}
	if p.pgPID > 0 {
		if d, err := treeCPU(p.pgPID); err == nil {
			s.pg = d
		}
	}
	return s
}

// perEvent renders the CPU used for n events.
func (p cpuProbe) perEvent(d cpuSample, n int) string {
	per := func(t time.Duration) string { return fmt.Sprintf("%.3f ms", float64(t.Microseconds())/1000/float64(n)) }
	pg := "unknown (server not on this machine)"
	if p.pgPID > 0 {
		pg = per(d.pg)
	}
	return fmt.Sprintf("CPU per event: this process (incl. embedded NATS) %s, PostgreSQL %s", per(d.self), pg)
}

type procStat struct {
	ppid          int
	own, children time.Duration
}

// readStat reads /proc/PID/stat; pid may be "self".
func readStat(pid string) (procStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return procStat{}, err
	}
	// The command name, in parentheses, may hold anything: the fields start
	// after the last ')'. fields[0] is field 3 of proc(5).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("stat: no command name")
	}
	fields := bytes.Fields(b[i+1:])
	if len(fields) < 15 {
		return procStat{}, fmt.Errorf("stat: %d fields", len(fields))
	}
	var n [5]int64
	for j, f := range []int{4, 14, 15, 16, 17} {
		if n[j], err = strconv.ParseInt(string(fields[f-3]), 10, 64); err != nil {
			return procStat{}, fmt.Errorf("stat field %d: %w", f, err)
		}
	}
	tick := func(t int64) time.Duration { return time.Duration(t) * time.Second / userHZ }
	return procStat{ppid: int(n[0]), own: tick(n[1] + n[2]), children: tick(n[3] + n[4])}, nil
}

// treeCPU is the CPU time of pid, its live children and its exited ones.
func treeCPU(pid int) (time.Duration, error) {
	root, err := readStat(strconv.Itoa(pid))
	if err != nil {
		return 0, err
	}
	total := root.own + root.children
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if st, err := readStat(e.Name()); err == nil && st.ppid == pid {
			total += st.own
		}
	}
	return total, nil
}

// resetPeakRSS resets VmHWM to the current RSS (Linux: "5" into
// /proc/self/clear_refs), so the next reading is the peak of what follows.
func resetPeakRSS() error {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return fmt.Errorf("reset peak RSS: %w", err)
	}
	return nil
}

// peakRSSMiB reads VmHWM, this process's peak resident set size.
func peakRSSMiB() (float64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("read /proc/self/status: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			if err != nil {
				return 0, fmt.Errorf("parse VmHWM %q: %w", rest, err)
			}
			return kib / 1024, nil
		}
	}
	return 0, errors.New("no VmHWM in /proc/self/status")
}
