package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
)

// Bad input is one line on stderr and exit status 2, never a run: no base
// URL, a base that is no URL, stray arguments, one key where two tenants'
// are needed, a target that does not answer.
func TestBadInputIsOneLine(t *testing.T) {
	t.Parallel()
	// A loopback port nothing listens on: taken, then given back.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--base is required"},
		{[]string{"--base", "localhost:8080"}, "is not an http:// or https:// URL"},
		{[]string{"--base", closed, "extra"}, "unexpected arguments"},
		{[]string{"--base", closed, "--keys", "sk_one"}, "two API keys of two different tenants, got 1"},
		{[]string{"--base", closed}, "does not answer"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		line := strings.TrimSuffix(stderr.String(), "\n")
		if code != 2 || !strings.Contains(line, tc.want) || strings.Contains(line, "\n") {
			t.Errorf("conform %v: exit %d, stderr %q; want exit 2 and one line with %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}
