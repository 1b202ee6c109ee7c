-- +goose Up
-- Checks a transaction makes on its own writes, raised as errors inside the
-- statement, so that a transaction can send its last writes and COMMIT in one
-- round trip: a failed check aborts the transaction before the COMMIT runs.

-- lucius_expect_row fails with no_data_found unless a write touched exactly
-- one row.
-- +goose StatementBegin
CREATE FUNCTION lucius_expect_row(touched bigint, what text) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
  IF touched <> 1 THEN
    RAISE EXCEPTION '%: touched % rows, want 1', what, touched USING ERRCODE = 'no_data_found';
  END IF;
  RETURN touched;
END $$;
-- +goose StatementEnd

-- lucius_admission_refused fails with LUC01: admitting the request would
-- exceed the limit of a scope (tenant, lane or global).
-- +goose StatementBegin
CREATE FUNCTION lucius_admission_refused(scope text, key text, lim int) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'the % "%" limit of % active jobs is reached', scope, key, lim USING ERRCODE = 'LUC01';
END $$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION lucius_admission_refused(text, text, int);
DROP FUNCTION lucius_expect_row(bigint, text);
