package webhooks_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/webhooks"
)

func header(m map[string]string) http.Header {
	h := http.Header{}
	for k, v := range m {
		h.Set(k, v)
	}
	return h
}

// WithTolerance replaces the default five minutes, both ways.
func TestVerifierTolerance(t *testing.T) {
	t.Parallel()
	clk := newClock()
	cur, key := secret(t, "current")
	v, err := webhooks.NewVerifier([]string{cur}, clk.Now, webhooks.WithTolerance(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"id":"evt_1"}`)
	now := clk.Now().Unix()
	for _, c := range []struct {
		stamp int64
		ok    bool
	}{{now - 60, true}, {now + 60, true}, {now - 61, false}, {now + 61, false}} {
		ts := strconv.FormatInt(c.stamp, 10)
		err := v.Verify(header(map[string]string{"webhook-id": "msg_1", "webhook-timestamp": ts, "webhook-signature": sign(key, "msg_1", ts, body)}), body)
		if c.ok != (err == nil) {
			t.Errorf("stamped %+ds with a 1 minute tolerance: Verify = %v, want ok %v", c.stamp-now, err, c.ok)
		}
	}
}

func TestNewVerifierRefusesBadConfiguration(t *testing.T) {
	t.Parallel()
	good, _ := secret(t, "good")
	for _, tc := range []struct {
		name      string
		secrets   []string
		tolerance time.Duration
	}{
		{"no secrets", nil, time.Minute},
		{"no prefix", []string{"c2VjcmV0"}, time.Minute},
		{"bad base64", []string{good, "whsec_!!"}, time.Minute},
		{"empty key", []string{"whsec_"}, time.Minute},
		{"negative tolerance", []string{good}, -time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v, err := webhooks.NewVerifier(tc.secrets, time.Now, webhooks.WithTolerance(tc.tolerance))
			if err == nil || v != nil {
				t.Fatalf("NewVerifier = %v, %v; want an error", v, err)
			}
		})
	}
}

// sign computes the signature independently of pspsim, straight from the
// Standard Webhooks specification.
func sign(key []byte, id, ts string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + string(body)))
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

func TestVerify(t *testing.T) {
	t.Parallel()
	clk := newClock()
	cur, curKey := secret(t, "current")
	old, oldKey := secret(t, "old")
	_, unknownKey := secret(t, "unknown")
	v, err := webhooks.NewVerifier([]string{cur, old}, clk.Now) // the default tolerance, 5 minutes
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"id":"evt_1"}`)
	now := clk.Now().Unix()
	ts := strconv.FormatInt(now, 10)
	at := func(sec int64) string { return strconv.FormatInt(sec, 10) }
	for _, tc := range []struct {
		name string
		h    map[string]string
		ok   bool
	}{
		{"current secret", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": ts, "webhook-signature": sign(curKey, "msg_1", ts, body)}, true},
		{"old secret during rotation", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": ts, "webhook-signature": sign(oldKey, "msg_1", ts, body)}, true},
		{"any of several signatures", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": ts,
			"webhook-signature": "v2,abc v1,!!! v1," + base64.StdEncoding.EncodeToString([]byte("short")) + " " + sign(unknownKey, "msg_1", ts, body) + " " + sign(oldKey, "msg_1", ts, body)}, true},
		{"exactly 5 minutes old", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": at(now - 300), "webhook-signature": sign(curKey, "msg_1", at(now-300), body)}, true},
		{"exactly 5 minutes ahead", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": at(now + 300), "webhook-signature": sign(curKey, "msg_1", at(now+300), body)}, true},
		{"unknown secret", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": ts, "webhook-signature": sign(unknownKey, "msg_1", ts, body)}, false},
		{"stale", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": at(now - 301), "webhook-signature": sign(curKey, "msg_1", at(now-301), body)}, false},
		{"future", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": at(now + 301), "webhook-signature": sign(curKey, "msg_1", at(now+301), body)}, false},
		{"signed for another id", map[string]string{"webhook-id": "msg_2", "webhook-timestamp": ts, "webhook-signature": sign(curKey, "msg_1", ts, body)}, false},
		{"signed for another timestamp", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": at(now - 1), "webhook-signature": sign(curKey, "msg_1", ts, body)}, false},
		{"timestamp not seconds", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": ts + ".5", "webhook-signature": sign(curKey, "msg_1", ts+".5", body)}, false},
		{"v2 scheme only", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": ts, "webhook-signature": "v2," + sign(curKey, "msg_1", ts, body)[3:]}, false},
		{"no id", map[string]string{"webhook-timestamp": ts, "webhook-signature": sign(curKey, "", ts, body)}, false},
		{"no timestamp", map[string]string{"webhook-id": "msg_1", "webhook-signature": sign(curKey, "msg_1", "", body)}, false},
		{"no signature", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": ts}, false},
	} {
		t.Run(tc.name, func(t *testing.T) { // not parallel: the clock moves below
			err := v.Verify(header(tc.h), body)
			if tc.ok && err != nil {
				t.Fatalf("Verify = %v, want nil", err)
			}
			if !tc.ok && !errors.Is(err, webhooks.ErrUnverified) {
				t.Fatalf("Verify = %v, want ErrUnverified", err)
			}
		})
	}
	// The body is signed too.
	h := header(map[string]string{"webhook-id": "msg_1", "webhook-timestamp": ts, "webhook-signature": sign(curKey, "msg_1", ts, body)})
	if err := v.Verify(h, []byte(`{"id":"evt_2"}`)); !errors.Is(err, webhooks.ErrUnverified) {
		t.Fatalf("Verify of a changed body = %v, want ErrUnverified", err)
	}
	// The clock is the verifier's: the same delivery goes stale as it ages.
	clk.Advance(5*time.Minute + time.Second)
	if err := v.Verify(h, body); !errors.Is(err, webhooks.ErrUnverified) {
		t.Fatalf("Verify after 5m1s = %v, want ErrUnverified", err)
	}
}
