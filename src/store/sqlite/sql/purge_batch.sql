-- Deletes a batch of finished rows, answering the (lane, target) of each. The literal IN
-- repeats what ?3 can be, so the planner may use the partial index outbox_finished (it
-- cannot prove a bound status matches the index's WHERE); the lanes are a filter on what
-- that index yields, so one statement serves any number of lanes.
-- Binds: ?1 updated before, ?2 batch size, ?3 status, ?4 the lanes as a JSON array of
-- [lane, target] pairs or NULL for every lane, ?5 whether rows with an ordering key are
-- kept (dead letters of a Block lane).
DELETE FROM outbox WHERE seq IN (
    SELECT seq FROM outbox
    WHERE status IN ('delivered', 'dead_letter') AND status = ?3
      AND updated_at < ?1
      AND (?4 IS NULL OR (lane, target) IN (SELECT json_extract(value, '$[0]'),
              json_extract(value, '$[1]') FROM json_each(?4)))
      AND (?5 = 0 OR ordering_key IS NULL)
    LIMIT ?2)
RETURNING lane, target
