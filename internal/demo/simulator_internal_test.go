package demo

import (
	"testing"
	"time"
)

// Without options the demo's Simulator client bounds each call by 5 seconds,
// like the provider client, and sends no API key; the options set both.
func TestSimulatorDefaultsAndOptions(t *testing.T) {
	t.Parallel()
	s := NewSimulator("http://127.0.0.1:1/")
	if s.client.Timeout != 5*time.Second || s.apiKey != "" || s.baseURL != "http://127.0.0.1:1" {
		t.Fatalf("NewSimulator without options: timeout %v, api key %q, base URL %q; want 5s, none, no trailing slash", s.client.Timeout, s.apiKey, s.baseURL)
	}
	s = NewSimulator("http://127.0.0.1:1", WithTimeout(2*time.Second), WithAPIKey("sk_sim_test"))
	if s.client.Timeout != 2*time.Second || s.apiKey != "sk_sim_test" {
		t.Fatalf("NewSimulator with options: timeout %v, api key %q; want 2s, sk_sim_test", s.client.Timeout, s.apiKey)
	}
}
