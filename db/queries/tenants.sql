-- name: TenantInsert :one
INSERT INTO tenants (id, slug, name, created_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT (slug) DO NOTHING
RETURNING *;

-- name: TenantListIDs :many
-- TenantListIDs lists every tenant, for the work that visits them one by
-- one (the retention sweeper).
SELECT id FROM tenants ORDER BY id;

-- name: TenantGetBySlug :one
SELECT * FROM tenants WHERE slug = $1;

-- name: TenantGetByAPIKeyHash :one
-- TenantGetByAPIKeyHash returns the tenant owning an API key that works at
-- now, and when the key stops working (NULL: never).
SELECT t.id, t.slug, t.name, k.revoked_at
FROM api_keys k
JOIN tenants t ON t.id = k.tenant_id
WHERE k.key_hash = $1 AND (k.revoked_at IS NULL OR k.revoked_at > sqlc.arg(now)::timestamptz);

-- name: APIKeyInsert :exec
INSERT INTO api_keys (id, key_hash, tenant_id, key_prefix, created_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (key_hash) DO NOTHING;

-- name: APIKeyRenew :exec
-- APIKeyRenew makes a key work again, from now on and without end: demo
-- mode's public keys, whatever an earlier production run did to them.
UPDATE api_keys SET revoked_at = NULL WHERE key_hash = $1;

-- name: APIKeyListByTenant :many
SELECT id, tenant_id, key_prefix, created_at, revoked_at
FROM api_keys
WHERE tenant_id = $1
ORDER BY created_at, id;

-- name: APIKeyFind :many
-- APIKeyFind returns the keys an operator's reference names: the key's id,
-- the key itself (by its hash), or the prefix that api keys list shows.
SELECT id, tenant_id, key_prefix, created_at, revoked_at
FROM api_keys
WHERE id = sqlc.narg(id) OR key_hash = sqlc.narg(key_hash) OR key_prefix = sqlc.narg(key_prefix)
ORDER BY created_at, id
FOR UPDATE;

-- name: APIKeyRevokeBy :many
-- APIKeyRevokeBy makes the keys it names stop working at revoke_at, or
-- earlier when they already stop earlier: a revocation never extends a key.
-- With id NULL it names every key of the tenant (a rotation).
UPDATE api_keys
SET revoked_at = sqlc.arg(revoke_at)::timestamptz
WHERE tenant_id = sqlc.arg(tenant_id)
  AND (id = sqlc.narg(id) OR sqlc.narg(id)::uuid IS NULL)
  AND (revoked_at IS NULL OR revoked_at > sqlc.arg(revoke_at)::timestamptz)
RETURNING id, tenant_id, key_prefix, created_at, revoked_at;

-- name: APIKeyLiveByHashes :many
-- APIKeyLiveByHashes returns the prefixes of those of the given keys that
-- work at now.
SELECT key_prefix
FROM api_keys
WHERE key_hash = ANY(sqlc.arg(key_hashes)::bytea[]) AND (revoked_at IS NULL OR revoked_at > sqlc.arg(now)::timestamptz)
ORDER BY key_prefix;
