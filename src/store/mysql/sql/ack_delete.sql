-- An ack with keep_delivered = false: binds the sequences.
DELETE FROM `outbox_messages` WHERE seq IN (?)
