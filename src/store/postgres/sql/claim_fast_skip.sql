-- The one-statement claim under Skip: `claim_fast_block.sql` says what each part does
-- and why it is written so. Under Skip a dead letter holds no key: no `dead_idx` probe.
{{claim_fast}}
