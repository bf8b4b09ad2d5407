-- API keys get an id an operator can name (api keys revoke ID): the key
-- itself is never shown again, and two keys may share the 12-character
-- prefix that api keys list shows. Rows of earlier versions get a random id.
ALTER TABLE api_keys ADD COLUMN id uuid NOT NULL DEFAULT gen_random_uuid();
CREATE UNIQUE INDEX api_keys_id ON api_keys (id);

COMMENT ON COLUMN api_keys.revoked_at IS
    'The key works before this instant and never from it on; NULL: no end. '
    'A rotation sets it in the future: the old key keeps working for the overlap.';
