-- What purge_batch would delete, all batches together (a dry run).
-- Binds: ?1 updated before, ?2 status, ?3/?4 lane and target or NULL, ?5 as
-- purge_batch's ?6.
SELECT count(*) FROM outbox
    WHERE status IN ('delivered', 'dead_letter') AND status = ?2
      AND updated_at < ?1
      AND (?3 IS NULL OR (lane = ?3 AND target = ?4))
      AND (?5 = 0 OR ordering_key IS NULL)
