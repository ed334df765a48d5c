-- `key_free` in Skip's full claim: a row this claim dead-letters (`to_dead`) holds its key
-- no longer.
 AND NOT EXISTS (SELECT 1 FROM to_dead d WHERE d.outbox_id = e.outbox_id)
