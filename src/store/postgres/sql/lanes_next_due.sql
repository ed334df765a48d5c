-- `next_due` of many lanes in one statement: $1 now; $2 lanes, $3 targets and $4 their
-- places in the asked list, of the lanes under `Skip`; $5, $6, $7 of those under `Block`
-- (the policy is statement text, so each has its own branch). Rows `(i, wait_ms)`: each
-- lane's answer is `next_due`'s statement over that lane, so it costs what one lane's does
-- (each branch one index descent per lane), and an idle relay asks for all its lanes with
-- one statement per pass instead of every lane polling.
SELECT q.i, ({{next_due_skip}}) AS wait_ms
             FROM unnest($2::text[], $3::text[], $4::int4[]) AS q(lane, target, i)
UNION ALL
SELECT q.i, ({{next_due_block}}) AS wait_ms
             FROM unnest($5::text[], $6::text[], $7::int4[]) AS q(lane, target, i)
