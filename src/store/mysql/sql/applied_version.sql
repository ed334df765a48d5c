-- The schema version applied (schema.rs), once the migrations table is known to exist.
SELECT MAX(version) FROM `outbox_migrations`
