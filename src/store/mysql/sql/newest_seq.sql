-- The watch's poll (wake.rs): the newest sequence, one dive to the primary key's end.
SELECT MAX(seq) FROM `outbox_messages`
