package chaos

import (
	"net"
	"strconv"
	"testing"
)

// The ports of the processes a run restarts on the same port (the APIs,
// PostgreSQL, the nats-servers) are below the kernel's ephemeral range,
// from which the machine's other listeners on port 0 and outgoing
// connections take theirs: none of those can take such a port while its
// process is down.
func TestFixedPortsAreBelowTheEphemeralRange(t *testing.T) {
	t.Parallel()
	lo := ephemeralLow()
	for range 50 {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		if port < minFixedPort || port >= lo {
			t.Fatalf("freePort = %d, want one in [%d, %d)", port, minFixedPort, lo)
		}
	}
}

// A port somebody listens on is never handed out. (Whether a port handed
// out is still free a moment later is not freePort's to promise: another
// process of a busy machine may take it first, and the run's start then
// says so.)
func TestFreePortSkipsTakenPorts(t *testing.T) {
	t.Parallel()
	// Twenty ports in a row, all but one held by this test (or by somebody
	// else already).
	base, err := freePortIn(minFixedPort, ephemeralLow()-20)
	if err != nil {
		t.Fatal(err)
	}
	held := map[int]bool{}
	for p := base; p < base+20; p++ {
		if p == base+7 {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			held[p] = true // taken by somebody else: just as good
			continue
		}
		defer ln.Close()
		held[p] = true
	}
	for range 50 {
		port, err := freePortIn(base, base+20)
		if err != nil {
			continue // base+7 was taken meanwhile too: nothing handed out, which is right
		}
		if held[port] {
			t.Fatalf("freePortIn handed out %d, which is being listened on", port)
		}
	}
}
