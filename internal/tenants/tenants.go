// Package tenants owns tenants, their API keys and the authentication of
// requests. The tenant a key names is the outermost scope of every
// idempotency key and every resource (rule 2): nothing is looked up without it.
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
// off every request; a revoked key therefore stays usable for at most ttl.
func WithCacheTTL(ttl time.Duration) ServiceOption {
	return func(s *Service) { s.cacheTTL = ttl }
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
	now := s.now()
	s.mu.Lock()
	c, ok := s.cache[h]
	s.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.tenant, nil
	}
	row, err := dbsqlc.New(s.pool).TenantGetByAPIKeyHash(ctx, h[:])
	if err != nil {
		return Tenant{}, noRow(err, ErrUnknownKey, "look up api key")
	}
	t := tenantFromRow(row)
	if s.cacheTTL > 0 {
		s.mu.Lock()
		if len(s.cache) >= maxCachedKeys {
			clear(s.cache) // bounded: keys are few, a flood of them is an attack
		}
		s.cache[h] = cached{tenant: t, expires: now.Add(s.cacheTTL)}
		s.mu.Unlock()
	}
	return t, nil
}

// Create makes a tenant with a fresh random API key and returns the key. The
// key is shown once: only its hash is stored.
func (s *Service) Create(ctx context.Context, slug, name string) (Tenant, string, error) {
	var raw [20]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return Tenant{}, "", fmt.Errorf("generate api key: %w", err)
	}
	key := "sk_live_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(raw[:]))
	var t Tenant
	err := postgres.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		t, err = insertTenant(ctx, tx, slug, name, s.now())
		if err != nil {
			return err
		}
		return insertKey(ctx, tx, t.ID, key, s.now())
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

func insertKey(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID, key string, now time.Time) error {
	h := HashKey(key)
	err := dbsqlc.New(tx).APIKeyInsert(ctx, dbsqlc.APIKeyInsertParams{
		KeyHash:   h[:],
		TenantID:  tenantID,
		KeyPrefix: key[:min(len(key), 12)],
		CreatedAt: now,
	})
	if err != nil {
		return fmt.Errorf("insert api key: %w", err)
	}
	return nil
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
