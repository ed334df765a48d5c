-- $1 now, $2..$8 filter (lane, target, ordering key, ids or empty for any, enqueued at or
-- after and before in Unix ms, error text; `admin.rs`' `bind_filter`): the stats of every
-- (lane, target) the filter selects, for admin tools (a relay's lanes: `lanes_stats.sql`).
--
-- A blocked key: a live row with a dead-lettered earlier row of its key that no live row
-- comes before (so before the key's head), all among the rows the filter selects.
SELECT m.lane, m.target,
    count(*) FILTER (WHERE m.status = 'pending') AS pending,
    count(*) FILTER (WHERE m.status = 'claimed') AS claimed,
    count(*) FILTER (WHERE m.status = 'delivered') AS delivered,
    count(*) FILTER (WHERE m.status = 'dead_letter') AS dead_letter,
    floor(extract(epoch FROM (
        COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
        - min(m.created_at) FILTER (
            WHERE m.status = 'pending'
              AND m.available_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()))
    )) * 1000)::int8 AS oldest_pending_ms,
    (SELECT count(DISTINCT l.ordering_key) FROM "public"."outbox_messages" l
     WHERE l.lane = m.lane AND l.target = m.target
       AND ($2::text IS NULL OR l.lane = $2)
       AND ($3::text IS NULL OR l.target = $3)
       AND ($4::text IS NULL OR l.ordering_key = $4)
       AND (cardinality($5::uuid[]) = 0 OR l.outbox_id = ANY($5))
       AND ($6::int8 IS NULL OR l.created_at >= (timestamptz 'epoch' + $6::int8 * interval '1 millisecond'))
       AND ($7::int8 IS NULL OR l.created_at < (timestamptz 'epoch' + $7::int8 * interval '1 millisecond'))
       AND ($8::text IS NULL OR strpos(l.last_error, $8) > 0)
       AND l.ordering_key IS NOT NULL AND l.status IN ('pending', 'claimed')
       AND EXISTS (
         SELECT 1 FROM "public"."outbox_messages" d
         WHERE d.lane = l.lane AND d.target = l.target
           AND d.ordering_key = l.ordering_key AND d.status = 'dead_letter'
           AND d.seq < l.seq
           AND ($2::text IS NULL OR d.lane = $2)
           AND ($3::text IS NULL OR d.target = $3)
           AND ($4::text IS NULL OR d.ordering_key = $4)
           AND (cardinality($5::uuid[]) = 0 OR d.outbox_id = ANY($5))
           AND ($6::int8 IS NULL OR d.created_at >= (timestamptz 'epoch' + $6::int8 * interval '1 millisecond'))
           AND ($7::int8 IS NULL OR d.created_at < (timestamptz 'epoch' + $7::int8 * interval '1 millisecond'))
           AND ($8::text IS NULL OR strpos(d.last_error, $8) > 0)
           -- no live row of the key, among the selected, before the dead letter
           AND NOT (
             EXISTS (SELECT 1 FROM "public"."outbox_messages" f
                     WHERE f.lane = d.lane AND f.target = d.target
                       AND f.ordering_key = d.ordering_key AND f.status = 'pending'
                       AND f.seq < d.seq
                       AND ($2::text IS NULL OR f.lane = $2)
                       AND ($3::text IS NULL OR f.target = $3)
                       AND ($4::text IS NULL OR f.ordering_key = $4)
                       AND (cardinality($5::uuid[]) = 0 OR f.outbox_id = ANY($5))
                       AND ($6::int8 IS NULL OR f.created_at >= (timestamptz 'epoch' + $6::int8 * interval '1 millisecond'))
                       AND ($7::int8 IS NULL OR f.created_at < (timestamptz 'epoch' + $7::int8 * interval '1 millisecond'))
                       AND ($8::text IS NULL OR strpos(f.last_error, $8) > 0) OFFSET 0)
             OR EXISTS (SELECT 1 FROM "public"."outbox_messages" f
                        WHERE f.lane = d.lane AND f.target = d.target
                          AND f.ordering_key = d.ordering_key AND f.status = 'claimed'
                          AND f.seq < d.seq
                          AND ($2::text IS NULL OR f.lane = $2)
                          AND ($3::text IS NULL OR f.target = $3)
                          AND ($4::text IS NULL OR f.ordering_key = $4)
                          AND (cardinality($5::uuid[]) = 0 OR f.outbox_id = ANY($5))
                          AND ($6::int8 IS NULL OR f.created_at >= (timestamptz 'epoch' + $6::int8 * interval '1 millisecond'))
                          AND ($7::int8 IS NULL OR f.created_at < (timestamptz 'epoch' + $7::int8 * interval '1 millisecond'))
                          AND ($8::text IS NULL OR strpos(f.last_error, $8) > 0) OFFSET 0)))) AS blocked_keys
FROM "public"."outbox_messages" m
WHERE ($2::text IS NULL OR m.lane = $2)
  AND ($3::text IS NULL OR m.target = $3)
  AND ($4::text IS NULL OR m.ordering_key = $4)
  AND (cardinality($5::uuid[]) = 0 OR m.outbox_id = ANY($5))
  AND ($6::int8 IS NULL OR m.created_at >= (timestamptz 'epoch' + $6::int8 * interval '1 millisecond'))
  AND ($7::int8 IS NULL OR m.created_at < (timestamptz 'epoch' + $7::int8 * interval '1 millisecond'))
  AND ($8::text IS NULL OR strpos(m.last_error, $8) > 0)
GROUP BY m.lane, m.target
