package main

import (
	"encoding/json"
	"testing"
)

// The HTTP scenarios send order; the SQL-equivalent stores the fingerprint
// of orderBody. They must be the same request.
func TestOrderIsOrderBody(t *testing.T) {
	b, err := json.Marshal(order)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != orderBody {
		t.Fatalf("order encodes as %s, want %s", b, orderBody)
	}
}
