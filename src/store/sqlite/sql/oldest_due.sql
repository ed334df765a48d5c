-- When the oldest due pending row of a lane was enqueued. Enqueue order stands for enqueue
-- time (the clock only moves forward), so the first due row in seq order is the oldest; the
-- rows before it are delayed ones. Binds: ?1 now, ?2 lane, ?3 target.
SELECT created_at FROM outbox
    WHERE lane = ?2 AND target = ?3 AND status = 'pending' AND available_at <= ?1
    ORDER BY seq LIMIT 1
