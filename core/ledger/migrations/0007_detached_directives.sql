-- +goose Up
-- The whole directive of an attempt whose bus message could not carry it
-- (larger than a Service Bus Standard message): the message then carries
-- the directive without payload and upstream artifacts, and the worker
-- fetches this with CallbackService.GetDirective. NULL for every other attempt.
ALTER TABLE attempts ADD COLUMN directive bytea;

-- +goose Down
ALTER TABLE attempts DROP COLUMN directive;
