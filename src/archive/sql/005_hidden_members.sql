-- rankflow archive, version 5: members hidden by an admin (docs/moderation.md).
--
-- A hidden member's rows stay, marked `hidden`, so a restore gives them
-- back exactly; reads skip them and close the others' ranks up, in every
-- style. The stored ranks never change: a read subtracts the hidden rows
-- ranked above a row, found through the partial index below (a period
-- holds few hidden members, so that is a few index entries whatever the
-- period's size).
--
-- `hides_group` marks, among the hidden rows of a tie group (equal on
-- every field) with no visible row left, the first one: a dense rank
-- below such a group is one less. It is set whenever the period's hidden
-- rows change, in the same transaction.
--
-- An erasure deletes the member's rows, found through the member index;
-- the other rows keep their ranks (docs/moderation.md).

ALTER TABLE rankflow_archive
    ADD COLUMN hidden      boolean NOT NULL DEFAULT false,
    ADD COLUMN hides_group boolean NOT NULL DEFAULT false;

CREATE INDEX rankflow_archive_hidden
    ON rankflow_archive (board, scope, view, period, rank) WHERE hidden;

CREATE INDEX rankflow_archive_by_member
    ON rankflow_archive (member, board);
