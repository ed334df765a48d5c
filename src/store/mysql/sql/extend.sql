-- A lease extension: binds the new lease end and now, then the sequences.
UPDATE `outbox_messages` SET lease_expires_at = ?, updated_at = ? WHERE seq IN (?)
