-- Marks each row as its key's head and records it in the key's row: binds the sequences.
UPDATE `outbox_messages` m JOIN `outbox_keys` k
    ON k.lane = m.lane AND k.target = m.target AND k.ordering_key = m.ordering_key
SET m.key_head = 1, k.head_seq = m.seq
WHERE m.seq IN (?)
