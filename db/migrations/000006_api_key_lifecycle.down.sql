COMMENT ON COLUMN api_keys.revoked_at IS NULL;
DROP INDEX api_keys_id;
ALTER TABLE api_keys DROP COLUMN id;
