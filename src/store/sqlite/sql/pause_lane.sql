-- Pauses a (lane, target) fleet-wide, or updates who paused it, why and when.
-- Binds: ?1 lane, ?2 target, ?3 paused_by, ?4 reason, ?5 now.
INSERT INTO outbox_lane_control (lane, target, paused_by, reason, paused_at)
    VALUES (?1, ?2, ?3, ?4, ?5)
    ON CONFLICT (lane, target) DO UPDATE SET paused_by = excluded.paused_by,
        reason = excluded.reason, paused_at = excluded.paused_at
