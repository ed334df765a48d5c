-- Which of many (lane, target) hold a live row, pending or claimed (mysql.rs,
-- `lanes_next_due`): the relay's due watcher asks `next_due` only of those, so a relay's
-- thousand lanes with nothing live are this one statement. Binds the lanes as one JSON
-- array of [lane, target] pairs, read by JSON_TABLE (MariaDB 10.6+, MySQL 8.0+); one row
-- per asked lane with its place in the array (from 1), each one dive into `pending`
-- (lane, target, status lead it), stopping at its first row.
SELECT CAST(q.i AS SIGNED) AS i,
    CAST(EXISTS (SELECT 1 FROM `outbox_messages` m FORCE INDEX (pending)
                 WHERE m.lane = q.lane AND m.target = q.target
                     AND m.status IN ('pending', 'claimed')) AS SIGNED) AS live
FROM JSON_TABLE(?, '$[*]' COLUMNS (
    i FOR ORDINALITY,
    lane VARBINARY(255) PATH '$[0]',
    target VARBINARY(255) PATH '$[1]'
)) AS q
