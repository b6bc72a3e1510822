-- rankflow archive, version 3: each row's rank in the other styles of
-- docs/http-api.md, computed while the rows are copied in rank order, so archived
-- reads of every style are index lookups. Equal scores share a rank:
-- rank_competition is the first rank holding the score (1, 1, 3),
-- rank_dense counts the distinct scores down to it (1, 1, 2).
-- NULL for rows archived before this version: reads then compute the same
-- figures over the period (slower, never wrong); `rankflow archive
-- --period` fills them by copying the period again.

ALTER TABLE rankflow_archive
    ADD COLUMN rank_competition bigint,
    ADD COLUMN rank_dense       bigint;
