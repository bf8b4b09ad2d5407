package webhooks

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/proving/pspsim"
)

// FuzzCheck feeds arbitrary deliveries to the receiver's verification and
// envelope parsing: nothing panics, every refusal is a 4xx problem, and a
// correctly signed, recent delivery is never refused as unauthorized.
func FuzzCheck(f *testing.F) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("fuzz-0123456789abcdef"))
	key, err := pspsim.ParseWebhookSecret(secret)
	if err != nil {
		f.Fatal(err)
	}
	v, err := NewVerifier([]string{secret}, func() time.Time { return now })
	if err != nil {
		f.Fatal(err)
	}
	r := &Receiver{verifier: v}

	ts := now.Unix()
	for _, body := range []string{
		`{"id":"evt_1","type":"charge.succeeded","created":1,"data":{"object":{"id":"ch_1","status":"succeeded","metadata":{"reference":"x"}}}}`,
		`{"id":"evt_2","type":"charge.failed","created":1,"data":{"object":{"id":"ch_1","status":"failed","failure_code":"card_declined"}}}`,
		`{"id":"evt_3","type":"charge.refunded","created":1,"data":{"object":{"id":"ch_1","status":"succeeded"},"refund":{"id":"re_1","amount":5}}}`,
		`{"id":"evt_4","type":"charge.refunded","data":{"object":{"id":"ch_1"},"refund":null}}`,
		`{"id":1}`, `[]`, `null`, `{`, ``, `{"data":{"object":{"amount":1e400}}}`,
		`{"id":"evt_5","TYPE":"charge.succeeded","type":"charge.failed","data":{"object":{"id":"ch_1","status":"failed"}}}`,
		`{"id":"evt_6","type":"charge.failed","type":"charge.succeeded","data":{"object":{"id":"ch_1","status":"succeeded"}}}`,
	} {
		f.Add("msg_1", ts, []byte(body), "", true)
		f.Add("msg_1", ts, []byte(body), "v1,AAAA", false)
	}
	f.Add("", ts-301, []byte(`{}`), "v1,x v2,y", true)
	f.Add("msg_1", int64(1)<<62, []byte(`{}`), "", true)

	f.Fuzz(func(t *testing.T, id string, stamp int64, body []byte, sig string, signIt bool) {
		if signIt {
			sig = pspsim.SignWebhook(key, id, stamp, body)
		}
		h := http.Header{}
		h.Set(HeaderID, id)
		h.Set(HeaderTimestamp, strconv.FormatInt(stamp, 10))
		h.Set(HeaderSignature, sig)
		gotID, _, err := r.check(h, body)
		if err == nil {
			if gotID != h.Get(HeaderID) || gotID == "" {
				t.Fatalf("check accepted delivery id %q for header %q", gotID, h.Get(HeaderID))
			}
			return
		}
		var pe *problem.Error
		if !errors.As(err, &pe) {
			t.Fatalf("check error %v is not a problem", err)
		}
		if s := problem.Status(pe.Code); s < 400 || s > 499 {
			t.Fatalf("check error %v has status %d, want 4xx", err, s)
		}
		recent := stamp >= now.Unix()-int64(DefaultTolerance/time.Second) && stamp <= now.Unix()+int64(DefaultTolerance/time.Second)
		if signIt && recent && h.Get(HeaderID) != "" && pe.Code == problem.Unauthorized {
			t.Fatalf("a correctly signed, recent delivery was refused: %v", err)
		}
	})
}
