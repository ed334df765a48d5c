-- $1 ids.
DELETE FROM "public"."outbox_messages" WHERE outbox_id = ANY($1::uuid[])
