-- `head_runs` under Block: an earlier dead letter holds the key.
 AND (k.dead IS NULL OR k.dead > m.seq)
