-- A service's own table, migrated by bootstrap.Open after the control plane's.
-- +goose Up
CREATE TABLE bootstrap_test_rows (id bigint PRIMARY KEY);

-- +goose Down
DROP TABLE bootstrap_test_rows;
