-- $1 id.
{{select_message}}
WHERE m.outbox_id = $1
