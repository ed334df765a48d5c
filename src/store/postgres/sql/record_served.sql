-- $1 now, $2 lanes, $3 targets, $4 for how long in ms: these lanes are served until then
-- (a later time already recorded stays).
INSERT INTO "public"."outbox_served_lanes" AS s (lane, target, served_until)
SELECT lane, target,
       COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
           + $4::int8 * interval '1 millisecond'
FROM unnest($2::text[], $3::text[]) AS l (lane, target)
ON CONFLICT (lane, target) DO UPDATE
SET served_until = greatest(s.served_until, excluded.served_until)
