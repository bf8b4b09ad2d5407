package chaos

import (
	"net"
	"strconv"
	"testing"
)

// The ports of the processes a run restarts on the same port (the APIs,
// PostgreSQL, the nats-servers) are free and below the kernel's ephemeral
// range, from which the machine's other listeners on port 0 and outgoing
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
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatalf("freePort's %d is not free: %v", port, err)
		}
		ln.Close()
	}
}
