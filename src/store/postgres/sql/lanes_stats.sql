-- $1 now, $2 lanes, $3 targets (one element each per lane): the stats of each lane, each
-- figure from one partial index (index-only counts, one descent per lane), none from a
-- scan of the table: a relay samples all its lanes with one statement.
--
-- Blocked keys: a key is blocked when a dead letter has a live row after it and none
-- before it (then its first dead letter comes before its head); four probes per dead
-- letter, two per key index. OFFSET 0 keeps each a probe even before ANALYZE, when the
-- planner once read the whole live index instead: it stops PostgreSQL from making an
-- EXISTS an anti-join or a hashed subplan.
--
-- The oldest pending age counts only due rows (a message delayed by an hour is not old):
-- read in created_at order, stopping at the first due one. `created_at IS NOT NULL`
-- (always true) names `pending_idx`'s predicate, which no key probe names (migration 4,
-- schema/heads.rs). The delivered count reads `list_idx`'s delivered range (`seq > 0`,
-- always true, names its predicate): migration 10 dropped `delivered_idx`, which every ack
-- wrote an entry into beside list_idx's.
SELECT q.lane, q.target,
    (SELECT count(*) FROM "public"."outbox_messages" m WHERE m.lane = q.lane AND m.target = q.target
       AND m.status = 'pending' AND m.created_at IS NOT NULL) AS pending,
    (SELECT count(*) FROM "public"."outbox_messages" m WHERE m.lane = q.lane AND m.target = q.target
       AND m.status = 'claimed') AS claimed,
    (SELECT count(*) FROM "public"."outbox_messages" m WHERE m.lane = q.lane AND m.target = q.target
       AND m.status = 'delivered' AND m.seq > 0) AS delivered,
    (SELECT count(*) FROM "public"."outbox_messages" m WHERE m.lane = q.lane AND m.target = q.target
       AND m.status = 'dead_letter') AS dead_letter,
    (SELECT floor(extract(epoch FROM (COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
                                      - m.created_at)) * 1000)::int8
     FROM "public"."outbox_messages" m WHERE m.lane = q.lane AND m.target = q.target
       AND m.status = 'pending' AND m.created_at IS NOT NULL
       AND m.available_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
     ORDER BY m.created_at LIMIT 1) AS oldest_pending_ms,
    (SELECT count(DISTINCT d.ordering_key) FROM "public"."outbox_messages" d
     WHERE d.lane = q.lane AND d.target = q.target AND d.status = 'dead_letter'
       AND d.ordering_key IS NOT NULL
       -- a live row after the dead letter
       AND (EXISTS (SELECT 1 FROM "public"."outbox_messages" l
                    WHERE l.lane = d.lane AND l.target = d.target
                      AND l.ordering_key = d.ordering_key AND l.status = 'pending'
                      AND l.seq > d.seq OFFSET 0)
            OR EXISTS (SELECT 1 FROM "public"."outbox_messages" l
                       WHERE l.lane = d.lane AND l.target = d.target
                         AND l.ordering_key = d.ordering_key AND l.status = 'claimed'
                         AND l.seq > d.seq OFFSET 0))
       -- and none before it
       AND NOT (EXISTS (SELECT 1 FROM "public"."outbox_messages" f
                        WHERE f.lane = d.lane AND f.target = d.target
                          AND f.ordering_key = d.ordering_key AND f.status = 'pending'
                          AND f.seq < d.seq OFFSET 0)
                OR EXISTS (SELECT 1 FROM "public"."outbox_messages" f
                           WHERE f.lane = d.lane AND f.target = d.target
                             AND f.ordering_key = d.ordering_key AND f.status = 'claimed'
                             AND f.seq < d.seq OFFSET 0)))
    AS blocked_keys
FROM unnest($2::text[], $3::text[]) AS q(lane, target)
