package chaos

import (
	"strings"
	"testing"
)

// everyFault is the report of a single-server run with every option on
// that injected every kind of fault once, answered no request 500, and
// found nothing wrong.
func everyFault() *Report {
	rep := &Report{Features: Features{Dispatcher: true, Fulfillment: true}, DBFaults: true, NetFaults: true, Faults: map[FaultKind]int{}}
	for _, k := range FaultKinds {
		if !needsCluster(k) {
			rep.Faults[k] = 1
		}
	}
	return rep
}

// A short run (make test) passes when a fault could not be placed in time
// on a busy machine, and reports it; a long run fails on every kind never
// injected. A kind missing without a step that tried to place it fails
// both, and a request answered 500 fails the short run.
func TestRunFailures(t *testing.T) {
	t.Parallel()
	if f := everyFault().RunFailures(true); len(f) != 0 {
		t.Fatalf("a clean run fails: %q", f)
	}

	unplaced := everyFault()
	unplaced.Faults[DispatcherKilled] = 0
	unplaced.Faults[MarkBlocked] = 0
	unplaced.Unplaced = map[FaultKind]string{DispatcherKilled: "no dispatcher batch caught between publish and mark within 15s"}
	if f := unplaced.RunFailures(true); len(f) != 0 {
		t.Errorf("short run: a fault not placed in time fails it: %q", f)
	}
	if f := unplaced.RunFailures(false); len(f) != 1 || !strings.Contains(f[0], "dispatcher_killed_between_publish_and_mark") ||
		!strings.Contains(f[0], "within 15s") {
		t.Errorf("long run: %q, want one failure naming the kind and why it was not placed", f)
	}
	var b strings.Builder
	unplaced.Print(&b)
	if line := lineWith(b.String(), string(DispatcherKilled)); !strings.HasSuffix(line, " 0 NOT PLACED: no dispatcher batch caught between publish and mark within 15s") {
		t.Errorf("the report does not say which kind was not placed:\n%s", b.String())
	}

	missing := everyFault()
	missing.Faults[BrokerKilled] = 0
	for _, short := range []bool{true, false} {
		if f := missing.RunFailures(short); len(f) != 1 || !strings.Contains(f[0], "fault kinds never injected: [broker_killed]") {
			t.Errorf("short %v: a kind never tried: %q", short, f)
		}
	}

	internal := everyFault()
	internal.InternalErrors = 3
	if f := internal.RunFailures(true); len(f) != 1 || !strings.Contains(f[0], "3 requests answered 500") {
		t.Errorf("short run with 500s: %q", f)
	}
	b.Reset()
	internal.Print(&b)
	if !strings.Contains(b.String(), "answered 500 internal_error: 3") {
		t.Errorf("the report does not count the 500s:\n%s", b.String())
	}
}

// lineWith returns the first line of s that contains sub.
func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// The APIs' request lines answered 500 are counted and the first few kept;
// other answers, and other lines that mention a 500, are not.
func TestAPILogCountsInternalErrors(t *testing.T) {
	t.Parallel()
	var l apiLog
	for _, line := range []string{
		`{"level":"ERROR","msg":"request","method":"GET","path":"/v1/orders/x","status":500,"duration":1,"code":"internal_error","error":"unclassified: boom"}`,
		`{"level":"INFO","msg":"request","method":"GET","path":"/v1/orders/x","status":503,"duration":1}`,
		`{"level":"INFO","msg":"request","method":"GET","path":"/v1/orders/x","status":5000,"duration":1}`,
		`{"level":"WARN","msg":"provider answered","status":500,"attempt":2}`,
	} {
		l.watch(line)
	}
	n, lines := l.internalErrors()
	if n != 1 || len(lines) != 1 || !strings.Contains(lines[0], "unclassified: boom") {
		t.Fatalf("internalErrors = %d, %q; want the one request answered 500", n, lines)
	}
}
