-- A running relay serves (lane, target) until ?3 (never moved back).
-- Binds: ?1 lane, ?2 target, ?3 until.
INSERT INTO outbox_served_lanes (lane, target, served_until) VALUES (?1, ?2, ?3)
    ON CONFLICT (lane, target) DO UPDATE
    SET served_until = max(served_until, excluded.served_until)
