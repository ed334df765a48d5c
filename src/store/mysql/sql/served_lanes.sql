-- The (lane, target) pairs a running relay serves: binds now.
SELECT lane, target FROM `outbox_served_lanes` WHERE served_until > ?
