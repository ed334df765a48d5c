-- The one-statement claim of both policies (`claim_fast_block.sql`).
WITH lapsed_last AS MATERIALIZED (SELECT {{lapsed_last}} AS yes),
         {{head_runs}}
         SELECT (SELECT yes FROM lapsed_last) AS lapsed_last, c.*
         FROM (SELECT 1) one
         LEFT JOIN (claimed c JOIN to_claim o ON o.outbox_id = c.outbox_id) ON true
         ORDER BY o.ord
