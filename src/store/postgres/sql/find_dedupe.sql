-- $1 lanes, $2 targets, $3 dedupe keys: the rows holding those dedupe keys.
{{select_message}}
JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(lane, target, dedupe_key)
  ON m.lane = k.lane AND m.target = k.target AND m.dedupe_key = k.dedupe_key
