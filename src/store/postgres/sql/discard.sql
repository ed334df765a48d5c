-- $1..$7 filter (lane, target, ordering key, ids or empty for any, enqueued at or after
-- and before in Unix ms, error text; `admin.rs`' `bind_filter`): deletes dead letters.
DELETE FROM "public"."outbox_messages" m
WHERE m.status = 'dead_letter'
  AND ($1::text IS NULL OR m.lane = $1)
  AND ($2::text IS NULL OR m.target = $2)
  AND ($3::text IS NULL OR m.ordering_key = $3)
  AND (cardinality($4::uuid[]) = 0 OR m.outbox_id = ANY($4))
  AND ($5::int8 IS NULL OR m.created_at >= (timestamptz 'epoch' + $5::int8 * interval '1 millisecond'))
  AND ($6::int8 IS NULL OR m.created_at < (timestamptz 'epoch' + $6::int8 * interval '1 millisecond'))
  AND ($7::text IS NULL OR strpos(m.last_error, $7) > 0)
