// Package tenants owns tenants, their API keys and the authentication of
// requests. The tenant a key names is the outermost scope of every
// idempotency key and every resource: nothing is looked up without it.
//
// No other package touches the tenants and api_keys tables: their queries
// are in internal/tenants/internal/dbsqlc.
package tenants

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/tenants/internal/dbsqlc"
)

// ErrUnknownKey is returned for a missing, unknown or revoked API key.
var ErrUnknownKey = errors.New("unknown api key")

// ErrTenantExists is returned when a tenant slug is taken.
var ErrTenantExists = errors.New("tenant exists")

// Tenant is a customer of the service, isolated from all others.
type Tenant struct {
	ID   uuid.UUID
	Slug string
	Name string
}

// Service creates tenants and authenticates API keys.
type Service struct {
	pool     *pgxpool.Pool
	now      func() time.Time
	cacheTTL time.Duration
	// demoKeys accepts the public demo keys (demo mode only).
	demoKeys bool

	mu    sync.Mutex
	cache map[[sha256.Size]byte]cached
}

// maxCachedKeys bounds the key cache. A service has few keys; more than
// this many good ones is a flood, and the cache starts over.
const maxCachedKeys = 10_000

type cached struct {
	tenant  Tenant
	expires time.Time
}

// DefaultCacheTTL is how long a verified API key is cached unless
// WithCacheTTL says otherwise.
const DefaultCacheTTL = 30 * time.Second

// ServiceOption configures a Service.
type ServiceOption func(*Service)

// WithCacheTTL caches successful key lookups for ttl (default
// DefaultCacheTTL, 30s; 0 disables the cache) to keep a database round trip
// off every request; a revoked key therefore stays usable for at most ttl,
// and a key never beyond the end that a rotation gave it.
func WithCacheTTL(ttl time.Duration) ServiceOption {
	return func(s *Service) { s.cacheTTL = ttl }
}

// WithDemoKeys accepts the public keys of DemoTenants when accept is true:
// demo mode (DEMO_MODE=true) only. The default refuses them as unknown
// before any lookup, whatever the database holds: they are in this
// repository, so anyone could send them.
func WithDemoKeys(accept bool) ServiceOption {
	return func(s *Service) { s.demoKeys = accept }
}

// NewService returns a Service. It caches verified keys for
// DefaultCacheTTL unless WithCacheTTL says otherwise.
func NewService(pool *pgxpool.Pool, now func() time.Time, opts ...ServiceOption) *Service {
	s := &Service{pool: pool, now: now, cacheTTL: DefaultCacheTTL, cache: make(map[[sha256.Size]byte]cached)}
	for _, o := range opts {
		o(s)
	}
	return s
}

// HashKey returns the stored form of an API key.
func HashKey(key string) [sha256.Size]byte { return sha256.Sum256([]byte(key)) }

// Authenticate returns the tenant that owns key.
func (s *Service) Authenticate(ctx context.Context, key string) (Tenant, error) {
	if key == "" {
		return Tenant{}, ErrUnknownKey
	}
	h := HashKey(key)
	if !s.demoKeys && isDemoKey(h) {
		return Tenant{}, ErrUnknownKey
	}
	now := s.now()
	s.mu.Lock()
	c, ok := s.cache[h]
	s.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.tenant, nil
	}
	row, err := dbsqlc.New(s.pool).TenantGetByAPIKeyHash(ctx, dbsqlc.TenantGetByAPIKeyHashParams{KeyHash: h[:], Now: now})
	if err != nil {
		return Tenant{}, noRow(err, ErrUnknownKey, "look up api key")
	}
	t := Tenant{ID: row.ID, Slug: row.Slug, Name: row.Name}
	if s.cacheTTL > 0 {
		expires := now.Add(s.cacheTTL)
		if row.RevokedAt != nil && row.RevokedAt.Before(expires) {
			expires = *row.RevokedAt // a rotated key's overlap ends on time
		}
		s.mu.Lock()
		if len(s.cache) >= maxCachedKeys {
			clear(s.cache) // bounded: keys are few, a flood of them is an attack
		}
		s.cache[h] = cached{tenant: t, expires: expires}
		s.mu.Unlock()
	}
	return t, nil
}

// Create makes a tenant with a fresh random API key and returns the key. The
// key is shown once: only its hash is stored.
func (s *Service) Create(ctx context.Context, slug, name string) (Tenant, string, error) {
	key, err := newKey()
	if err != nil {
		return Tenant{}, "", err
	}
	var t Tenant
	err = postgres.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		t, err = insertTenant(ctx, tx, slug, name, s.now())
		if err != nil {
			return err
		}
		_, err = insertKey(ctx, tx, t.ID, key, s.now())
		return err
	})
	if err != nil {
		return Tenant{}, "", err
	}
	return t, key, nil
}

func insertTenant(ctx context.Context, tx pgx.Tx, slug, name string, now time.Time) (Tenant, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return Tenant{}, err
	}
	row, err := dbsqlc.New(tx).TenantInsert(ctx, dbsqlc.TenantInsertParams{ID: id, Slug: slug, Name: name, CreatedAt: now})
	if err != nil {
		return Tenant{}, noRow(err, fmt.Errorf("tenant %q: %w", slug, ErrTenantExists), "insert tenant "+slug)
	}
	return tenantFromRow(row), nil
}

// newKey returns a fresh random API key: sk_live_ and 160 random bits.
func newKey() (string, error) {
	var raw [20]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("generate api key: %w", err)
	}
	return "sk_live_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(raw[:])), nil
}

// keyPrefixLen is how much of a key is stored and shown in the clear: its
// kind (sk_live_) and four characters, enough to tell a tenant's keys apart.
const keyPrefixLen = 12

func insertKey(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID, key string, now time.Time) (Key, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return Key{}, err
	}
	h := HashKey(key)
	k := Key{ID: id, TenantID: tenantID, Prefix: key[:min(len(key), keyPrefixLen)], CreatedAt: now}
	err = dbsqlc.New(tx).APIKeyInsert(ctx, dbsqlc.APIKeyInsertParams{
		ID:        k.ID,
		KeyHash:   h[:],
		TenantID:  k.TenantID,
		KeyPrefix: k.Prefix,
		CreatedAt: k.CreatedAt,
	})
	if err != nil {
		return Key{}, fmt.Errorf("insert api key: %w", err)
	}
	return k, nil
}

func tenantFromRow(r dbsqlc.Tenant) Tenant { return Tenant{ID: r.ID, Slug: r.Slug, Name: r.Name} }

// noRow is the one place where this package's queries' pgx.ErrNoRows
// becomes the package's own error: none, for a query that found no row, is
// what the caller names (ErrUnknownKey for a key lookup, ErrTenantExists for
// an insert that met a taken slug); any other error is wrapped with what.
func noRow(err, none error, what string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return none
	}
	return fmt.Errorf("%s: %w", what, err)
}
