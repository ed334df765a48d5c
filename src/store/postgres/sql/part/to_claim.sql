-- The CTE `to_claim`: the lapsed claims, then the key runs, with `ord`, the claim's order
-- (`claim_block.sql`).
to_claim AS (
            SELECT u.*, row_number() OVER (ORDER BY u.src, u.due_at, u.seq, u.pos) AS ord
            FROM (
                SELECT l.outbox_id, l.src, l.due_at, l.seq, 0::int8 AS pos FROM lapsed l
                UNION ALL
                SELECT * FROM pending
            ) u
         )
