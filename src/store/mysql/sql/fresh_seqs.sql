-- The sequence the server gave each fresh row: binds the ids.
SELECT outbox_id, seq FROM `outbox_messages` WHERE outbox_id IN (?)
