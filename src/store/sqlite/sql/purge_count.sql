-- What purge_batch would delete, all batches together (a dry run), per lane.
-- Binds: ?1 updated before, ?2 status, ?3 and ?4 as purge_batch's ?4 and ?5.
SELECT lane, target, count(*) AS n FROM outbox
    WHERE status IN ('delivered', 'dead_letter') AND status = ?2
      AND updated_at < ?1
      AND (?3 IS NULL OR (lane, target) IN (SELECT json_extract(value, '$[0]'),
              json_extract(value, '$[1]') FROM json_each(?3)))
      AND (?4 = 0 OR ordering_key IS NULL)
    GROUP BY lane, target
