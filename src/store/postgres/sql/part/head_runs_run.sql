-- `head_runs`' `{{run}}` of `pending.sql`: the run that `due` read with its head.
cardinality(h.seqs) > 1 AND e.seq = ANY (h.seqs[2:])
