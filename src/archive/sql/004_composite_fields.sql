-- rankflow archive, version 4: composite boards (docs/score-encoding.md) keep every
-- field of every member, exactly.
--
-- rankflow_archived_periods.fields names the board's fields in rank order
-- as they were when the period was copied (NULL for boards with one
-- score), once per period rather than once per row; rankflow_archive.fields
-- holds a row's values in that order, NULL for a field without a value.
-- bigint, not numeric or jsonb: every field value is an integer in
-- [-2^53, 2^53] (the encoding's range, enforced when events are applied),
-- which bigint holds exactly in a fixed 8 bytes; an array keeps the field
-- order, which jsonb objects lose, and takes up to 4 fields without a
-- column per field.
--
-- score stays the first field, so plain SQL over score keeps working; a
-- member whose first field has no value keeps the score the board showed:
-- -Infinity on a desc board, +Infinity on an asc one (numeric infinities,
-- PostgreSQL 14 or later), which list last in the board's order.
-- rank_competition and rank_dense count members tied on every field.

ALTER TABLE rankflow_archived_periods ADD COLUMN fields text[];
ALTER TABLE rankflow_archive ADD COLUMN fields bigint[];
