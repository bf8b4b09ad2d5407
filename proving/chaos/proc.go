package chaos

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// proc is one child process of the run, in a process group of its own so
// that a kill reaches everything it started. Its stdout and stderr go, line
// by line, to its log file and to an optional watcher.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // valid after done
	// races counts "WARNING: DATA RACE" lines.
	races *atomic.Int64
}

// startProc starts bin with args and env in dir, logging to dir/name.log
// (appended, so a restarted process continues the same log). watch, if not
// nil, sees every line of stdout and stderr.
func startProc(name, bin string, args, env []string, dir string, races *atomic.Int64, watch func(line string)) (*proc, error) {
	return spawn(procSpec{name: name, bin: bin, args: args, env: env, logDir: dir, runDir: dir, attr: procAttr(), races: races, watch: watch})
}

// procSpec describes a child to spawn.
type procSpec struct {
	name, bin string
	args, env []string
	// logDir holds name.log; runDir is the child's working folder (they
	// differ for a child that runs as another user).
	logDir, runDir string
	attr           *syscall.SysProcAttr
	races          *atomic.Int64
	watch          func(line string)
}

func spawn(s procSpec) (*proc, error) {
	name, races, watch := s.name, s.races, s.watch
	logf, err := os.OpenFile(filepath.Join(s.logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Env = s.env
	cmd.Dir = s.runDir
	cmd.SysProcAttr = s.attr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), races: races}
	var mu sync.Mutex // serializes writes to the log file
	var wg sync.WaitGroup
	scan := func(r io.Reader) {
		defer wg.Done()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			_, _ = logf.WriteString(line + "\n")
			mu.Unlock()
			if strings.Contains(line, "WARNING: DATA RACE") {
				races.Add(1)
			}
			if watch != nil {
				watch(line)
			}
		}
	}
	wg.Add(2)
	go scan(stdout)
	go scan(stderr)
	go func() {
		wg.Wait() // the pipes must be drained before Wait
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// alive reports whether the process has not exited.
func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL to the process group and waits for the exit.
func (p *proc) kill() {
	if p.alive() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-p.done
}

// stop asks the process group to terminate (SIGTERM) and kills it when it
// has not exited within grace.
func (p *proc) stop(grace time.Duration) {
	if !p.alive() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.kill()
	}
}

// exitErr describes how the process ended, for error messages.
func (p *proc) exitErr() error {
	if p.alive() {
		return nil
	}
	if p.err == nil {
		return fmt.Errorf("%s exited", p.name)
	}
	return fmt.Errorf("%s exited: %w", p.name, p.err)
}

// waitReady waits until ready is closed, the process exits, or timeout.
func (p *proc) waitReady(ctx context.Context, ready <-chan struct{}, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ready:
		return nil
	case <-p.done:
		return fmt.Errorf("%w before it was ready (see %s.log)", p.exitErr(), p.name)
	case <-t.C:
		return fmt.Errorf("%s not ready within %v (see %s.log)", p.name, timeout, p.name)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// signalOnce returns a channel and a function that closes it once.
func signalOnce() (chan struct{}, func()) {
	ch := make(chan struct{})
	var once sync.Once
	return ch, func() { once.Do(func() { close(ch) }) }
}
