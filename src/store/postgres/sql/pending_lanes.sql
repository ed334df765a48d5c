-- $1 the prefixes, $2 each prefix's target, $3 the most pairs: the (lane, target) pairs
-- holding pending messages whose lane begins with a prefix given for its target (lane
-- patterns, `relay/patterns.rs`), in name order.
--
-- The pairs are found as `unserved.sql` finds them: a skip scan of `pending_idx`, one index
-- probe per pair holding pending messages, never their messages. The walk does not start at
-- a prefix and stop past it: under a collation other than C the lanes that begin with a
-- prefix need not sort together (glibc's en_US puts `tenant1x` between `tenant-1` and
-- `tenant-2`), so every pair is matched against every prefix.
{{pairs}}
SELECT p.lane, p.target
FROM pairs AS p
WHERE EXISTS (
    SELECT 1 FROM unnest($1::text[], $2::text[]) AS q (prefix, target)
    WHERE q.target = p.target AND left(p.lane, length(q.prefix)) = q.prefix
)
ORDER BY p.lane, p.target
LIMIT $3
