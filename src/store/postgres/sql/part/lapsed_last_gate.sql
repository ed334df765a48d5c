-- The one-statement claim's `{{gate}}` of `head_runs.sql`: both scans stop when
-- `lapsed_last` holds.
 AND NOT (SELECT yes FROM lapsed_last)
