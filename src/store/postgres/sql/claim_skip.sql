-- The claim under Skip: `claim_block.sql` says what each part does and why it is written
-- so. Under Skip a dead letter holds no key, so `key_free` has no dead-letter clause and
-- a run is not cut at one; and the rows this claim dead-letters (`to_dead`) hold their
-- key no longer, so `successors` finds the next row of each such key.
{{claim}}
