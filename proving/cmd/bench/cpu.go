package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100 on
// every Linux architecture Go supports).
const userHZ = 100

// cpuProbe reads the CPU time used so far by the three processes a request
// runs through: this benchmark, the API and PostgreSQL (the postmaster and
// all its children: backends, WAL writer, checkpointer). A pid of 0 means
// unknown; on a 2-core machine shared by all three, CPU per request is what
// decides throughput under load.
type cpuProbe struct {
	apiPID, pgPID int
}

// cpuSample is CPU time used, per process; a negative value is unknown.
type cpuSample struct {
	bench, api, pg time.Duration
}

// sample reads the current CPU times.
func (p cpuProbe) sample() cpuSample {
	s := cpuSample{bench: -1, api: -1, pg: -1}
	if st, err := readStat("self"); err == nil {
		s.bench = st.own
	}
	if p.apiPID > 0 {
		if st, err := readStat(strconv.Itoa(p.apiPID)); err == nil {
			s.api = st.own
		}
	}
	if p.pgPID > 0 {
		if d, err := treeCPU(p.pgPID); err == nil {
			s.pg = d
		}
	}
	return s
}

// sub returns the CPU time used between o and s.
func (s cpuSample) sub(o cpuSample) cpuSample {
	d := func(a, b time.Duration) time.Duration {
		if a < 0 || b < 0 {
			return -1
		}
		return a - b
	}
	return cpuSample{bench: d(s.bench, o.bench), api: d(s.api, o.api), pg: d(s.pg, o.pg)}
}

// add returns the CPU time of s and o together.
func (s cpuSample) add(o cpuSample) cpuSample {
	d := func(a, b time.Duration) time.Duration {
		if a < 0 || b < 0 {
			return -1
		}
		return a + b
	}
	return cpuSample{bench: d(s.bench, o.bench), api: d(s.api, o.api), pg: d(s.pg, o.pg)}
}

// procStat is what bench needs of /proc/PID/stat.
type procStat struct {
	// state is R, S, D, Z (zombie), X (dead) and so on.
	state byte
	ppid  int
	// own is user+system time of the process; children is that of its
	// exited children it has waited for.
	own, children time.Duration
}

// readStat reads /proc/PID/stat; pid may be "self".
func readStat(pid string) (procStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return procStat{}, err
	}
	return parseStat(b)
}

// parseStat parses the contents of /proc/PID/stat.
func parseStat(b []byte) (procStat, error) {
	// The command name, in parentheses, may hold spaces and parentheses:
	// the fields start after the last ')'. fields[0] is the state (field 3
	// of proc(5)), so field n is fields[n-3].
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
		v, err := strconv.ParseInt(string(fields[f-3]), 10, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("stat field %d: %w", f, err)
		}
		n[j] = v
	}
	tick := func(t int64) time.Duration { return time.Duration(t) * time.Second / userHZ }
	return procStat{state: fields[0][0], ppid: int(n[0]), own: tick(n[1] + n[2]), children: tick(n[3] + n[4])}, nil
}

// treeCPU returns the CPU time of process pid, of its live children and of
// its exited children: for PostgreSQL's postmaster, the whole server.
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
		st, err := readStat(e.Name())
		if err != nil || st.ppid != pid {
			continue // gone, or not a child
		}
		total += st.own
	}
	return total, nil
}

// alive reports whether process pid exists and has not exited (a zombie
// waiting for its parent counts as exited).
func alive(pid int) bool {
	st, err := readStat(strconv.Itoa(pid))
	return err == nil && st.state != 'Z' && st.state != 'X'
}

// seconds formats a CPU time in seconds; "-" when unknown.
func seconds(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// rss is the peak resident set size of the API process.
type rss struct {
	kib   int64
	known bool
	// why says why it is not known.
	why string
	// atReady is the peak before the first scenario, once the API
	// answered ready (with --wait): its start, the embedded broker's
	// recovery of the stream included.
	atReady *rss
}

// peakRSS reads VmHWM, the peak resident set size, of process pid.
func peakRSS(pid int) rss {
	if pid <= 0 {
		return rss{why: "no --api-pid"}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return rss{why: err.Error()}
	}
	kib, err := statusKiB(string(b), "VmHWM")
	if err != nil {
		return rss{why: err.Error()}
	}
	return rss{kib: kib, known: true}
}

// statusKiB returns the value of a "Name:   123 kB" line of /proc/PID/status.
func statusKiB(status, field string) (int64, error) {
	for line := range strings.SplitSeq(status, "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || name != field {
			continue
		}
		num, unit, _ := strings.Cut(strings.TrimSpace(value), " ")
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || unit != "kB" {
			return 0, fmt.Errorf("%s: cannot parse %q", field, value)
		}
		return n, nil
	}
	return 0, fmt.Errorf("%s not found", field)
}
