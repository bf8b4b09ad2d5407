package payments

import (
	"testing"
	"time"
)

// Without options a Provider bounds each call by DefaultTimeout, 5 seconds
// (the PSP_TIMEOUT default docs/CONFIGURATION.md names), and sends no API key; the
// options set both.
func TestProviderDefaultsAndOptions(t *testing.T) {
	t.Parallel()
	p := NewProvider("http://127.0.0.1:1/")
	if p.client.Timeout != 5*time.Second || p.apiKey != "" || p.baseURL != "http://127.0.0.1:1" {
		t.Fatalf("NewProvider without options: timeout %v, api key %q, base URL %q; want 5s, none, no trailing slash", p.client.Timeout, p.apiKey, p.baseURL)
	}
	p = NewProvider("http://127.0.0.1:1", WithTimeout(2*time.Second), WithAPIKey("sk_test"))
	if p.client.Timeout != 2*time.Second || p.apiKey != "sk_test" {
		t.Fatalf("NewProvider with options: timeout %v, api key %q; want 2s, sk_test", p.client.Timeout, p.apiKey)
	}
}
