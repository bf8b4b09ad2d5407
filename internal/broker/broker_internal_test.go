package broker

import "testing"

// A NATS_URL that lists a cluster's servers: credentials written once apply
// to every server written without them, and none leaks into a log line or
// an error.
func TestServerListAndRedact(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, list, redacted string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://tok@a:4222", "nats://tok@a:4222", "nats://***@a:4222"},
		{"nats://tok@a:4222,nats://b:4222, nats://c:4222",
			"nats://tok@a:4222,nats://tok@b:4222,nats://tok@c:4222",
			"nats://***@a:4222,nats://b:4222, nats://c:4222"},
		{"nats://a:4222,tls://u:p%40ss@b:4222,c:4222",
			"nats://u:p%40ss@a:4222,tls://u:p%40ss@b:4222,u:p%40ss@c:4222",
			"nats://a:4222,tls://***@b:4222,c:4222"},
		{"nats://one@a:4222,nats://two@b:4222", "nats://one@a:4222,nats://two@b:4222", "nats://***@a:4222,nats://***@b:4222"},
		{"nats://a:4222,nats://b:4222", "nats://a:4222,nats://b:4222", "nats://a:4222,nats://b:4222"},
	} {
		if got := serverList(c.in); got != c.list {
			t.Errorf("serverList(%q) = %q, want %q", c.in, got, c.list)
		}
		if got := redact(c.in); got != c.redacted {
			t.Errorf("redact(%q) = %q, want %q", c.in, got, c.redacted)
		}
		if got := redact(serverList(c.in)); got != redact(c.list) {
			t.Errorf("redact(serverList(%q)) = %q", c.in, got)
		}
	}
}
