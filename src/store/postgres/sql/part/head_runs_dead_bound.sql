-- `head_runs` under Block: a dead letter bounds the run.
 AND q.seq < coalesce(d.first, 9223372036854775807)
