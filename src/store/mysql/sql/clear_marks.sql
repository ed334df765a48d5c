-- Clears the head mark of rows: binds the sequences.
UPDATE `outbox_messages` SET key_head = 0 WHERE seq IN (?) AND key_head <> 0
