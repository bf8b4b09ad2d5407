package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/oncepay/oncepay/proving/faultproxy"
)

// The dependencies whose network the schedule breaks: both APIs reach each
// one through a fault proxy of its own (toxiproxy v2, as a library, in this
// process). The run's own reads (the invariants, the provider's ledger, its
// fault settings) go around them.
const (
	DepPostgres = "postgres"
	DepNATS     = "nats"
	DepProvider = "provider"
)

// Dependencies lists the dependencies behind fault proxies, in the order a
// plan draws them.
var Dependencies = []string{DepPostgres, DepNATS, DepProvider}

// links are the fault proxies between the APIs and their dependencies.
type links struct {
	mu      sync.Mutex
	proxies map[string]*faultproxy.Proxy
}

func newLinks() *links { return &links{proxies: map[string]*faultproxy.Proxy{}} }

// start puts a proxy in front of rawURL's host for dep and returns rawURL
// with its host replaced by the proxy's.
func (l *links) start(dep, rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("%s link: parse %q: %w", dep, rawURL, err)
	}
	p, err := faultproxy.Start(dep, u.Host)
	if err != nil {
		return "", fmt.Errorf("%s link: %w", dep, err)
	}
	l.mu.Lock()
	l.proxies[dep] = p
	l.mu.Unlock()
	return p.Through(rawURL)
}

func (l *links) proxy(dep string) (*faultproxy.Proxy, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.proxies[dep]
	if !ok {
		return nil, fmt.Errorf("no fault proxy in front of %s", dep)
	}
	return p, nil
}

// add puts one toxic of kind with attrs on both directions of dep's link,
// existing connections included, and returns the toxics' names.
func (l *links) add(dep, kind string, attrs map[string]any) ([]string, error) {
	p, err := l.proxy(dep)
	if err != nil {
		return nil, err
	}
	names, err := p.Add(kind, attrs, faultproxy.Both...)
	if err != nil {
		err = fmt.Errorf("%s link: %w", dep, err)
	}
	return names, err
}

// remove takes the named toxics off dep's link again.
func (l *links) remove(ctx context.Context, dep string, names []string) error {
	p, err := l.proxy(dep)
	if err != nil {
		return err
	}
	if err := p.Remove(ctx, names); err != nil {
		return fmt.Errorf("%s link: %w", dep, err)
	}
	return nil
}

// bytes returns the bytes each link carried so far, both ways.
func (l *links) bytes() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int64{}
	for dep, p := range l.proxies {
		out[dep] = p.Carried()
	}
	return out
}

// heal removes every toxic of every link (the settle phase).
func (l *links) heal(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.proxies {
		p.Heal(ctx)
	}
}

// stop closes every proxy and its connections.
func (l *links) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.proxies {
		p.Stop()
	}
}

// toxic is what a network step does to its link: the toxiproxy type and
// attributes.
func (st Step) toxic() (kind string, attrs map[string]any, fault FaultKind) {
	switch st.Kind {
	case StepNetLatency:
		// Every chunk of data late by N ms, with a tenth of it as jitter.
		return "latency", map[string]any{"latency": st.N, "jitter": st.N / 10}, NetworkLatency
	case StepNetCut:
		// Every connection reset, the ones in the middle of an exchange
		// included, and every new one as soon as it sends.
		return "reset_peer", map[string]any{"timeout": 0}, NetworkCut
	case StepNetBlackhole:
		// A peer that accepts and never answers: the data goes nowhere and
		// nothing is closed.
		return "timeout", map[string]any{"timeout": 0}, NetworkBlackhole
	case StepNetBandwidth:
		// A link of N KB/s.
		return "bandwidth", map[string]any{"rate": st.N}, NetworkBandwidth
	}
	return "", nil, ""
}

// netFault breaks st.Dep's link for st.Down and heals it again.
func (e *executor) netFault(ctx context.Context, st Step) error {
	kind, attrs, fault := st.toxic()
	if kind == "" {
		return fmt.Errorf("step %s is not a network fault", st.Kind)
	}
	began := time.Now()
	names, err := e.stack.links.add(st.Dep, kind, attrs)
	if len(names) > 0 {
		e.faults.add(fault, 1)
		e.faults.addLink(st.Dep)
		e.logf("chaos: %s on the link to %s for %v", fault, st.Dep, st.Down)
	}
	if err == nil {
		err = pause(ctx, st.Down)
	}
	// Healed even when the run is being stopped: the settle phase and the
	// stack's stop must not meet a broken link.
	err = errors.Join(err, e.stack.links.remove(context.WithoutCancel(ctx), st.Dep, names))
	if len(names) > 0 {
		e.linkFaults.add(LinkFault{Kind: fault, Dep: st.Dep, Began: began, Ended: time.Now()})
	}
	return err
}
