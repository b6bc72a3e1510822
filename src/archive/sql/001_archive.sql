-- rankflow archive, version 1: one row per completed copy of a closed
-- period, and one row per member of it. Rows of a period are written in the
-- same transaction as its rankflow_archived_periods row, so a period whose
-- row is missing has no member rows either (never a partial copy).

CREATE TABLE rankflow_archived_periods (
    board        text        NOT NULL,
    scope        text        NOT NULL,  -- '' for unscoped boards
    view         text        NOT NULL,  -- hour, day, week, month or year
    period       text        NOT NULL,  -- 2026-W47, 2026-11-21, 2026-11-21T14 ...
    period_start timestamptz NOT NULL,
    period_end   timestamptz NOT NULL,
    members      bigint      NOT NULL,
    archived_at  timestamptz NOT NULL DEFAULT now(),
    -- Period ids sort in time order, so this key also lists a board
    -- view's periods newest first.
    PRIMARY KEY (board, scope, view, period)
);

CREATE TABLE rankflow_archive (
    board  text    NOT NULL,
    scope  text    NOT NULL,
    view   text    NOT NULL,
    period text    NOT NULL,
    rank   bigint  NOT NULL,  -- 1-based, in the board's order incl. its tie-break
    member text    NOT NULL,
    score  numeric NOT NULL,  -- exact: the value the board showed
    -- Pages and "around" are rank ranges of one period.
    PRIMARY KEY (board, scope, view, period, rank)
);

-- A member's entry in a period.
CREATE UNIQUE INDEX rankflow_archive_member
    ON rankflow_archive (board, scope, view, period, member);
