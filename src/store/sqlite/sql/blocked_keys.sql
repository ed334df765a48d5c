-- The keys of a lane that a dead letter holds, a page at a time: a key is held when its
-- earliest dead letter comes before its head (its earliest pending or claimed row).
-- Binds: ?1 lane, ?2 target, ?3 after (seq, or NULL), ?4 limit. Answers each held key's
-- earliest dead letter (seq, id) and its head's id, in enqueue order of the dead letter.
--
-- Driven by the lane's keyed dead letters alone (outbox_dead_keys, ordered by key, then
-- seq: a key's first entry is its earliest dead letter), the keys whose earliest dead letter
-- comes after the cursor. Each probes its key's first pending and first claimed row in
-- outbox_key_live (by status, so the claimed probe never steps over a long pending queue),
-- once (materialized: the head is read twice below); the held keys are sorted by the seq of
-- their dead letter, and the ids are read by seq for the page's rows only. Neither the
-- lane's delivered history nor its unkeyed dead letters are read.
WITH heads AS MATERIALIZED (
    SELECT MIN(d.seq) AS seq, d.ordering_key FROM outbox d INDEXED BY outbox_dead_keys
    WHERE d.lane = ?1 AND d.target = ?2 AND d.status = 'dead_letter'
      AND d.ordering_key IS NOT NULL
    GROUP BY d.ordering_key
    HAVING MIN(d.seq) > coalesce(?3, 0)
), probed AS MATERIALIZED (
    SELECT h.seq,
        (SELECT l.seq FROM outbox l INDEXED BY outbox_key_live
         WHERE l.lane = ?1 AND l.target = ?2 AND l.ordering_key = h.ordering_key
           AND l.status = 'pending' AND l.status IN ('pending', 'claimed')
         ORDER BY l.seq LIMIT 1) AS pending,
        (SELECT l.seq FROM outbox l INDEXED BY outbox_key_live
         WHERE l.lane = ?1 AND l.target = ?2 AND l.ordering_key = h.ordering_key
           AND l.status = 'claimed' AND l.status IN ('pending', 'claimed')
         ORDER BY l.seq LIMIT 1) AS claimed
    FROM heads h
), held AS (
    -- The head: the earlier of the two probes (NULL when the key has no live row).
    SELECT seq, min(coalesce(pending, claimed), coalesce(claimed, pending)) AS head FROM probed
)
SELECT k.seq,
    (SELECT m.outbox_id FROM outbox m WHERE m.seq = k.seq) AS dead_id,
    (SELECT m.outbox_id FROM outbox m WHERE m.seq = k.head) AS held_id
FROM held k
WHERE k.head > k.seq
ORDER BY k.seq LIMIT ?4
