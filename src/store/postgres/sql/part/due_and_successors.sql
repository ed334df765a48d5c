-- The heads of Skip's full claim (`{{heads}}` of `pending.sql`): `due` and `successors`
-- merged in due order.
(SELECT * FROM (SELECT * FROM due UNION ALL SELECT * FROM successors) p
                  ORDER BY p.due_at, p.seq LIMIT greatest($4 - (SELECT count(*) FROM lapsed), 0))
