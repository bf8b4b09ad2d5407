-- name: TenantInsert :one
INSERT INTO tenants (id, slug, name, created_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT (slug) DO NOTHING
RETURNING *;

-- name: TenantGetBySlug :one
SELECT * FROM tenants WHERE slug = $1;

-- name: TenantGetByAPIKeyHash :one
-- TenantGetByAPIKeyHash returns the tenant owning a live API key.
SELECT t.*
FROM api_keys k
JOIN tenants t ON t.id = k.tenant_id
WHERE k.key_hash = $1 AND k.revoked_at IS NULL;

-- name: APIKeyInsert :exec
INSERT INTO api_keys (key_hash, tenant_id, key_prefix, created_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT (key_hash) DO NOTHING;
