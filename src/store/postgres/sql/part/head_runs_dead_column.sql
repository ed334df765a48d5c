-- `head_runs` under Block: the key's first dead letter, `dead`.
 d.first AS dead,
