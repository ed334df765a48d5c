-- $1 lanes, $2 targets, $3 keys: marks the head of each key (schema/heads.rs).
SELECT "public"."outbox_promote_heads"($1::text[], $2::text[], $3::text[])
