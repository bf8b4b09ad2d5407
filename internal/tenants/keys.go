package tenants

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/tenants/internal/dbsqlc"
)

// ErrUnknownTenant is returned for a slug no tenant has.
var ErrUnknownTenant = errors.New("no such tenant")

// ErrNoSuchKey is returned when a reference names no API key.
var ErrNoSuchKey = errors.New("no such api key")

// ErrAmbiguousKey is returned when a key prefix names more than one key:
// name the key by its id instead.
var ErrAmbiguousKey = errors.New("the prefix names more than one api key")

// Key is what is known of an API key after it was shown: never the key
// itself, which only its owner holds (the database keeps its SHA-256).
type Key struct {
	ID       uuid.UUID
	TenantID uuid.UUID
	// Prefix is the key's first 12 characters (sk_live_ and four more),
	// stored in the clear so that an operator can tell keys apart.
	Prefix    string
	CreatedAt time.Time
	// RevokedAt is when the key stops working: nil, never; in the future,
	// the end of a rotation's overlap.
	RevokedAt *time.Time
}

// WorksAt reports whether the key authenticates at t (before any cache).
func (k Key) WorksAt(t time.Time) bool { return k.RevokedAt == nil || k.RevokedAt.After(t) }

func keyFromRow(id, tenantID uuid.UUID, prefix string, created time.Time, revoked *time.Time) Key {
	return Key{ID: id, TenantID: tenantID, Prefix: prefix, CreatedAt: created, RevokedAt: revoked}
}

// tenantBySlug finds the tenant a slug names, or ErrUnknownTenant.
func tenantBySlug(ctx context.Context, q *dbsqlc.Queries, slug string) (Tenant, error) {
	row, err := q.TenantGetBySlug(ctx, slug)
	if err != nil {
		return Tenant{}, noRow(err, fmt.Errorf("%w: %q", ErrUnknownTenant, slug), "load tenant "+slug)
	}
	return tenantFromRow(row), nil
}

// CreateKey gives the tenant named slug one more API key and returns it; the
// key is shown once, like Create's. Its other keys keep working.
func (s *Service) CreateKey(ctx context.Context, slug string) (Key, string, error) {
	raw, err := newKey()
	if err != nil {
		return Key{}, "", err
	}
	var k Key
	err = postgres.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		t, err := tenantBySlug(ctx, dbsqlc.New(tx), slug)
		if err != nil {
			return err
		}
		k, err = insertKey(ctx, tx, t.ID, raw, s.now())
		return err
	})
	if err != nil {
		return Key{}, "", err
	}
	return k, raw, nil
}

// Keys returns every API key the tenant named slug ever had, oldest first,
// revoked ones included.
func (s *Service) Keys(ctx context.Context, slug string) ([]Key, error) {
	q := dbsqlc.New(s.pool)
	t, err := tenantBySlug(ctx, q, slug)
	if err != nil {
		return nil, err
	}
	rows, err := q.APIKeyListByTenant(ctx, t.ID)
	if err != nil {
		return nil, fmt.Errorf("list api keys of %s: %w", slug, err)
	}
	keys := make([]Key, len(rows))
	for i, r := range rows {
		keys[i] = keyFromRow(r.ID, r.TenantID, r.KeyPrefix, r.CreatedAt, r.RevokedAt)
	}
	return keys, nil
}

// RevokeKey makes the key that ref names stop working now. ref is the key's
// id, the key itself, or its prefix as Keys shows it (ErrAmbiguousKey when
// two keys share it). It returns the key as it now is; revoking a revoked
// key changes nothing, and a key still in a rotation's overlap stops now.
// A process that cached the key accepts it for at most its cache TTL more
// (WithCacheTTL, app.Tuning.AuthCacheTTL).
func (s *Service) RevokeKey(ctx context.Context, ref string) (Key, error) {
	ref = strings.TrimSpace(ref)
	var p dbsqlc.APIKeyFindParams
	if id, err := uuid.Parse(ref); err == nil {
		p.ID = &id
	} else if len(ref) > keyPrefixLen {
		h := HashKey(ref)
		p.KeyHash = h[:]
	} else {
		p.KeyPrefix = &ref
	}
	var k Key
	err := postgres.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		q := dbsqlc.New(tx)
		found, err := q.APIKeyFind(ctx, p)
		if err != nil {
			return fmt.Errorf("find api key: %w", err)
		}
		switch {
		case len(found) == 0:
			return fmt.Errorf("%w: %q", ErrNoSuchKey, ref)
		case len(found) > 1:
			ids := make([]string, len(found))
			for i, f := range found {
				ids[i] = f.ID.String()
			}
			return fmt.Errorf("%w: %q names %s", ErrAmbiguousKey, ref, strings.Join(ids, ", "))
		}
		f := found[0]
		k = keyFromRow(f.ID, f.TenantID, f.KeyPrefix, f.CreatedAt, f.RevokedAt)
		revoked, err := q.APIKeyRevokeBy(ctx, dbsqlc.APIKeyRevokeByParams{RevokeAt: s.now(), TenantID: k.TenantID, ID: &k.ID})
		if err != nil {
			return fmt.Errorf("revoke api key: %w", err)
		}
		for _, r := range revoked {
			k.RevokedAt = r.RevokedAt
		}
		return nil
	})
	if err != nil {
		return Key{}, err
	}
	return k, nil
}

// RotateKey gives the tenant named slug a new API key, shown once, and makes
// every key it had stop working after overlap (at once for 0): the time its
// clients need to switch. A key that already stops sooner keeps its end; a
// revocation never extends a key. It returns the new key, its raw form, and
// the old keys whose end it set.
func (s *Service) RotateKey(ctx context.Context, slug string, overlap time.Duration) (Key, string, []Key, error) {
	if overlap < 0 {
		return Key{}, "", nil, fmt.Errorf("rotate api key: negative overlap %s", overlap)
	}
	raw, err := newKey()
	if err != nil {
		return Key{}, "", nil, err
	}
	var (
		k   Key
		old []Key
	)
	err = postgres.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		q := dbsqlc.New(tx)
		t, err := tenantBySlug(ctx, q, slug)
		if err != nil {
			return err
		}
		now := s.now()
		rows, err := q.APIKeyRevokeBy(ctx, dbsqlc.APIKeyRevokeByParams{RevokeAt: now.Add(overlap), TenantID: t.ID})
		if err != nil {
			return fmt.Errorf("end the old api keys: %w", err)
		}
		for _, r := range rows {
			old = append(old, keyFromRow(r.ID, r.TenantID, r.KeyPrefix, r.CreatedAt, r.RevokedAt))
		}
		k, err = insertKey(ctx, tx, t.ID, raw, now)
		return err
	})
	if err != nil {
		return Key{}, "", nil, err
	}
	return k, raw, old, nil
}

// IDs lists every tenant's id, for the work that visits the tenants one by
// one (the retention sweeper: on Citus each of its deletes stays on one
// tenant's shard).
func IDs(ctx context.Context, db *pgxpool.Pool) ([]uuid.UUID, error) {
	ids, err := dbsqlc.New(db).TenantListIDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return ids, nil
}
