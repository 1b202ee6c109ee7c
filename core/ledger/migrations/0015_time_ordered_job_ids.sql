-- +goose Up
-- Job ids are minted in time order (ledger.NewJobID: the first 16 hex digits
-- are the acceptance time), so the rows of live jobs sit at the right edge of
-- every index keyed by job id however much history the tables hold, instead
-- of touching a random page of each index per write. What makes two submits
-- the same request moves to request_key: the id the gateway used to derive
-- from the tenant and idempotency key (or the canonical command), which is
-- what existing rows have as their job id.
ALTER TABLE requests ADD COLUMN request_key text;
UPDATE requests SET request_key = job_id;
ALTER TABLE requests ALTER COLUMN request_key SET NOT NULL;
CREATE UNIQUE INDEX requests_request_key ON requests (request_key);

-- +goose Down
-- Jobs accepted since keep their minted ids; repeats of them are then
-- found by job id only, which a repeat never has. Reversible in schema, not
-- in meaning: go down only to roll back a release that accepted nothing.
DROP INDEX requests_request_key;
ALTER TABLE requests DROP COLUMN request_key;
