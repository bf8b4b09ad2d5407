package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// keyStatus is the answer of GET /v1/idempotency-keys/{operation}/{key}.
type keyStatus struct {
	State    string `json:"state"`
	Response *struct {
		Status   int    `json:"status"`
		Location string `json:"location"`
	} `json:"response"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// lookUp asks the target what became of key of op, as apiKey's tenant.
func (k *kit) lookUp(ctx context.Context, apiKey, op, key string) (keyStatus, error) {
	x, err := k.get(ctx, apiKey, "/v1/idempotency-keys/"+op+"/"+url.PathEscape(key))
	if err != nil {
		return keyStatus{}, err
	}
	if err := want(x, http.StatusOK); err != nil {
		return keyStatus{}, err
	}
	if cc := x.header.Get("Cache-Control"); cc != "no-store" {
		return keyStatus{}, fmt.Errorf("%v: Cache-Control %q, want no-store", x, cc)
	}
	var st keyStatus
	if err := json.Unmarshal(x.body, &st); err != nil {
		return keyStatus{}, fmt.Errorf("%v: not a key's state: %w", x, err)
	}
	return st, nil
}

// keyLookup: a finished key is completed with the stored answer's status,
// Location and Idempotency-Expires; the same key of another tenant, and a
// key never used, are unknown. The key holds a "/" and a "%", URL-encoded.
func keyLookup(ctx context.Context, k *kit) error {
	a := k.keys[0]
	key := k.key("lookup") + "/%"
	first, err := k.post(ctx, a, "/v1/orders", key, k.orderBody(1))
	if err != nil {
		return err
	}
	if err := want(first, http.StatusCreated); err != nil {
		return err
	}
	st, err := k.lookUp(ctx, a, "orders.create", key)
	if err != nil {
		return err
	}
	expires, _ := http.ParseTime(first.header.Get("Idempotency-Expires"))
	switch {
	case st.State != "completed":
		return fmt.Errorf("a finished key's state is %q, want completed", st.State)
	case st.Response == nil || st.Response.Status != first.status || st.Response.Location != first.header.Get("Location"):
		return fmt.Errorf("a finished key's response is %+v, want status %d at %q", st.Response, first.status, first.header.Get("Location"))
	case st.ExpiresAt == nil || !st.ExpiresAt.Truncate(time.Second).Equal(expires):
		return fmt.Errorf("a finished key's expires_at is %v, want the answer's Idempotency-Expires %v", st.ExpiresAt, expires)
	}
	for _, c := range []struct{ who, apiKey, key string }{
		{"another tenant's key", k.keys[1], key},
		{"a key never used", a, k.key("lookup-unused")},
	} {
		st, err := k.lookUp(ctx, c.apiKey, "orders.create", c.key)
		if err != nil {
			return err
		}
		if st.State != "unknown" || st.Response != nil || st.ExpiresAt != nil {
			return fmt.Errorf("%s reads %+v, want unknown and nothing else", c.who, st)
		}
	}
	return nil
}
