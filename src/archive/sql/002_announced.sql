-- rankflow archive, version 2: when a period's copy was announced on
-- [archive] closed_topic. NULL until the period-closed message was
-- delivered; the announcer sets it in the transaction that read the top
-- entries, under the period's advisory lock, so a period is announced at
-- least once and, unless an archiver dies between delivery and commit,
-- exactly once. Lookups are by primary key, so no index is needed.

ALTER TABLE rankflow_archived_periods ADD COLUMN announced_at timestamptz;
