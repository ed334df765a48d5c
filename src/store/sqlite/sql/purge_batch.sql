-- Deletes a batch of finished rows. The literal IN repeats what ?3 can be, so the planner
-- may use the partial index outbox_finished (it cannot prove a bound status matches the
-- index's WHERE).
-- Binds: ?1 updated before, ?2 batch size, ?3 status, ?4/?5 lane and target or NULL for
-- every lane, ?6 whether rows with an ordering key are kept (dead letters of a Block lane).
DELETE FROM outbox WHERE seq IN (
    SELECT seq FROM outbox
    WHERE status IN ('delivered', 'dead_letter') AND status = ?3
      AND updated_at < ?1
      AND (?4 IS NULL OR (lane = ?4 AND target = ?5))
      AND (?6 = 0 OR ordering_key IS NULL)
    LIMIT ?2)
