-- The watch's poll (wake.rs): the lanes of the rows enqueued since the last poll. Binds the
-- last sequence seen and the newest.
SELECT DISTINCT lane, target FROM `outbox_messages` WHERE seq > ? AND seq <= ?
