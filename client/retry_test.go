package client

import (
	"testing"
	"time"
)

func TestClientBackoff(t *testing.T) {
	t.Parallel()
	const base, ceiling = 100 * time.Millisecond, time.Second
	for _, tc := range []struct {
		attempt    int
		retryAfter time.Duration
		r          float64
		want       time.Duration
	}{
		{1, 0, 0, 50 * time.Millisecond},
		{1, 0, 0.999999, 100 * time.Millisecond},
		{2, 0, 0, 100 * time.Millisecond},
		{3, 0, 0.5, 300 * time.Millisecond},
		{4, 0, 0, 400 * time.Millisecond},
		{5, 0, 0, 500 * time.Millisecond}, // capped: 1.6s becomes 1s
		{1000, 0, 0.999999, ceiling},      // no overflow
		{1, 2 * time.Second, 0, 2 * time.Second},
		{7, 2 * time.Second, 0.5, 2*time.Second + 50*time.Millisecond},
	} {
		got := backoff(tc.attempt, base, ceiling, tc.retryAfter, tc.r)
		if got.Round(time.Millisecond) != tc.want {
			t.Fatalf("backoff(%d, ra %v, r %v) = %v, want %v", tc.attempt, tc.retryAfter, tc.r, got, tc.want)
		}
	}
}

func TestClientParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 6, 21, 24, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"2", 2 * time.Second},
		{" 1 ", time.Second},
		{"0", 0},
		{"-5", 0},
		{"soon", 0},
		{"Sun, 06 Dec 2026 21:24:18 GMT", 18 * time.Second},
		{"Sun, 06 Dec 2026 21:23:00 GMT", 0},
		{"3600", time.Hour}, // past maxRetryAfter: reported as the server said
		{"9223372036", 9223372036 * time.Second},
		{"99999999999999999", 9223372036 * time.Second}, // the longest Duration in seconds
	} {
		if got := parseRetryAfter(tc.in, now); got != tc.want {
			t.Fatalf("parseRetryAfter(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestClientValidKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key  string
		want bool
	}{
		{"a", true},
		{`"quoted"`, true},
		{string(make([]byte, 255)), false},
		{"", false},
		{"tab\there", false},
		{"ü", false},
	} {
		if got := validKey(tc.key); got != tc.want {
			t.Fatalf("validKey(%q) = %v, want %v", tc.key, got, tc.want)
		}
	}
	long := make([]byte, MaxKeyLen)
	for i := range long {
		long[i] = 'k'
	}
	if !validKey(string(long)) || validKey(string(long)+"k") {
		t.Fatal("the length bound is not 255")
	}
}
