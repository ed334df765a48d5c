-- `next_due` under Skip: as `next_due_block.sql`, but a dead letter holds no key.
{{next_due}}
