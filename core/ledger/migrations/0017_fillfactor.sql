-- +goose Up
-- Room on each page for the updates a live row takes (a job row changes about
-- seven times in its life, a request once): the new
-- version stays on its page, an update that changes no indexed column is HOT
-- (writes no index), and a row inserted into an old page's leftover space no
-- longer moves to yet another old page at its next update. Over a long
-- history that second move cost a full-page image (8 KiB of WAL) per touched
-- page after each checkpoint, and 8 index inserts per job update (lucius-bench
-- -history 1000000 -wal: jobs' updates 39% → 75% HOT, WAL per job 132 → 98
-- KiB). Attempts are left as they are: their ACK and RESULT change columns
-- of partial indexes, so their updates cannot be HOT, and the reserve only
-- sent more new attempts into old pages. Only rows written from now on are
-- laid out this way; nothing is rewritten.
ALTER TABLE jobs SET (fillfactor = 75);
ALTER TABLE requests SET (fillfactor = 90);

-- +goose Down
ALTER TABLE jobs RESET (fillfactor);
ALTER TABLE requests RESET (fillfactor);
