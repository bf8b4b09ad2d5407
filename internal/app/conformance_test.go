package app_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/proving/conformance"
	"github.com/oncepay/oncepay/proving/pspsim"
)

// The conformance kit, the black-box suite of docs/CONTRACT.md a fork
// points at its own service, passes against the service: every case but
// the one no keyed request can reach. The kit holds a payment in flight
// through the provider simulator's faults (as a URL target in demo mode
// offers through PUT /demo/faults, which a starter does not serve) and
// makes the records expire through the service's clock and sweeper, which
// only a test owns. Every exchange
// is checked against the OpenAPI description too (the bundle's client).
func TestConformanceKitPasses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rep, err := conformance.Run(context.Background(), conformance.Target{
		BaseURL: b.baseURL,
		APIKeys: []string{acme, globex},
		Client:  b.client,
		Hold:    b.hold,
		Expire: func(ctx context.Context) error {
			// Past the longest retention (45 days), then the sweep
			// that deletes what expired.
			b.clock.Advance(46 * 24 * time.Hour)
			_, err := b.app.Sweeper().SweepOnce(ctx)
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := rep.Write(&out); err != nil {
		t.Fatal(err)
	}
	t.Logf("the kit against the service:\n%s", out.String())
	if rep.Failed() > 0 {
		t.Fatalf("%d cases failed:\n%s", rep.Failed(), out.String())
	}
	var na []string
	for _, r := range rep.Results {
		if r.Outcome == conformance.NotApplicable {
			na = append(na, r.Case.Name)
		}
	}
	if want := []string{"rate-limited-is-not-stored"}; !slices.Equal(na, want) {
		t.Fatalf("not applicable: %v, want only %v: a case the service offers the means for must run", na, want)
	}
}

// The kit fails a service that breaks the contract, each break in the cases
// that check it: a proxy in front of the service (1) drops the replay
// header, (2) is the naive idempotency layer that stores every answer by
// its key alone, failures and all, whatever the tenant and the operation.
func TestConformanceKitFailsABrokenService(t *testing.T) {
	t.Parallel()
	b := setup(t)
	breaks := []struct {
		name     string
		proxy    func(upstream *url.URL) http.Handler
		mustFail []string
	}{
		{"the replay header dropped", func(u *url.URL) http.Handler {
			p := httputil.NewSingleHostReverseProxy(u)
			p.ModifyResponse = func(res *http.Response) error {
				res.Header.Del("Idempotent-Replayed")
				return nil
			}
			return p
		}, []string{"replay-is-byte-identical", "fingerprint-is-canonical-json", "key-structured-field-form", "business-failures-are-stored"}},
		{"every answer stored", storeEverything, []string{
			"tenant-scope", "operation-scope", "validation-errors-are-not-stored", "unauthorized-is-not-stored",
			"not-found-is-not-stored", "unknown-outcome-is-not-stored",
		}},
	}
	for _, br := range breaks {
		t.Run(br.name, func(t *testing.T) {
			t.Parallel()
			u, err := url.Parse(b.baseURL)
			if err != nil {
				t.Fatal(err)
			}
			proxy := httptest.NewServer(br.proxy(u))
			t.Cleanup(proxy.Close)
			rep, err := conformance.Run(context.Background(), conformance.Target{BaseURL: proxy.URL, APIKeys: []string{acme, globex}, Hold: b.hold})
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			if err := rep.Write(&out); err != nil {
				t.Fatal(err)
			}
			for _, name := range br.mustFail {
				if r, ok := rep.Result(name); !ok || r.Outcome != conformance.Failed {
					t.Errorf("%s: the case %s did not fail:\n%s", br.name, name, out.String())
				}
			}
		})
	}
}

// hold is the kit's Target.Hold: the simulator's next charge is made and
// then hangs until the service gives up on it (PSP_TIMEOUT), an unknown
// outcome. The simulator is the bundle's own, so its faults are the test's.
func (b *testBundle) hold(context.Context, string) error {
	return b.psp.SetFaults(pspsim.Faults{TimeoutNext: 1})
}

// storeEverything is a wrong idempotency layer in front of the service: it
// keeps the first answer to each Idempotency-Key and replays it to every
// later request with that key, whatever its tenant, status, path or body.
func storeEverything(u *url.URL) http.Handler {
	p := httputil.NewSingleHostReverseProxy(u)
	type stored struct {
		status int
		header http.Header
		body   []byte
	}
	var mu sync.Mutex
	seen := map[string]stored{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if r.Method != http.MethodPost || key == "" {
			p.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		s, ok := seen[key]
		mu.Unlock()
		if !ok {
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, r)
			res := rec.Result()
			body, _ := io.ReadAll(res.Body)
			s = stored{res.StatusCode, res.Header.Clone(), body}
			mu.Lock()
			if first, taken := seen[key]; taken {
				s = first
			} else {
				seen[key] = s
			}
			mu.Unlock()
		} else {
			s.header = s.header.Clone()
			s.header.Set("Idempotent-Replayed", "true")
		}
		for name, v := range s.header {
			w.Header()[name] = v
		}
		w.WriteHeader(s.status)
		_, _ = io.Copy(w, bytes.NewReader(s.body))
	})
}
