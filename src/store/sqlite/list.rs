//! A [`MessageFilter`] as an SQL `WHERE` fragment with its bound values.

use crate::store::MessageFilter;

use super::row::uuid_text;

/// The fragment and its values, bound in order to its anonymous `?` placeholders. Only the
/// fields the filter sets become terms, so SQLite can use the (lane, target) indexes.
#[derive(Debug)]
pub(super) struct FilterSql {
    pub(super) clause: String,
    pub(super) binds: Vec<String>,
}

/// Which of a filter's terms a fragment holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Terms {
    /// Every term.
    All,
    /// The terms an index reads (lane, target, status, key, ids).
    Indexed,
    /// The terms checked on the rows read ([`MessageFilter::scans`]: the enqueue time range
    /// and the error text).
    Scanned,
}

impl FilterSql {
    /// The filter over table alias `alias` (e.g. `"l."`, or `""` for none).
    pub(super) fn new(filter: &MessageFilter, alias: &str) -> Self {
        Self::of(filter, alias, Terms::All)
    }

    /// The filter's indexed terms only (what a listing reads its rows by).
    pub(super) fn indexed(filter: &MessageFilter, alias: &str) -> Self {
        Self::of(filter, alias, Terms::Indexed)
    }

    /// The filter's scanned terms only (what a listing checks on the rows it read).
    pub(super) fn scanned(filter: &MessageFilter, alias: &str) -> Self {
        Self::of(filter, alias, Terms::Scanned)
    }

    fn of(filter: &MessageFilter, alias: &str, which: Terms) -> Self {
        let mut terms = vec!["1".to_owned()];
        let mut binds = Vec::new();
        if which != Terms::Indexed {
            let (after, before) = filter.enqueued_millis();
            if let Some(after) = after {
                terms.push(format!("{alias}created_at >= CAST(? AS INTEGER)"));
                binds.push(after.as_millis().to_string());
            }
            if let Some(before) = before {
                terms.push(format!("{alias}created_at < CAST(? AS INTEGER)"));
                binds.push(before.as_millis().to_string());
            }
            if let Some(text) = &filter.error_contains {
                // instr, not LIKE: the text is a plain substring, and case-sensitive as
                // the other stores compare it.
                terms.push(format!("instr({alias}last_error, ?) > 0"));
                binds.push(text.clone());
            }
        }
        if which == Terms::Scanned {
            return Self {
                clause: terms.join(" AND "),
                binds,
            };
        }
        // A listing compares with `? || ''`, an expression SQLite does not sample against
        // its statistics: given the value itself, it judged a common lane unselective and
        // read a key's index by skip-scan, sorting the key's rows, instead of the range.
        let placeholder = if which == Terms::Indexed {
            "(? || '')"
        } else {
            "?"
        };
        let mut term = |column: &str, value: String| {
            terms.push(format!("{alias}{column} = {placeholder}"));
            binds.push(value);
        };
        if let Some(lane) = &filter.lane {
            term("lane", lane.clone());
        }
        if let Some(target) = &filter.target {
            term("target", target.clone());
        }
        if let Some(status) = filter.status {
            term("status", status.as_str().to_owned());
        }
        if let Some(key) = &filter.ordering_key {
            term("ordering_key", key.clone());
        }
        if !filter.ids.is_empty() {
            let ids: Vec<String> = filter.ids.iter().map(|id| uuid_text(*id)).collect();
            terms.push(format!(
                "{alias}outbox_id IN (SELECT value FROM json_each(?))"
            ));
            // A Vec<String> always serialises; the fallback is an empty array, matching none.
            binds.push(serde_json::to_string(&ids).unwrap_or_else(|_| "[]".to_owned()));
        }
        Self {
            clause: terms.join(" AND "),
            binds,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::OutboxStatus;
    use uuid::Uuid;

    #[test]
    fn only_set_fields_become_terms() {
        let all = FilterSql::new(&MessageFilter::all(), "");
        assert_eq!(all.clause, "1");
        assert!(all.binds.is_empty());

        let id = Uuid::nil();
        let some = FilterSql::new(
            &MessageFilter::lane("orders", "billing")
                .with_status(OutboxStatus::DeadLetter)
                .with_ids([id]),
            "d.",
        );
        assert_eq!(
            some.clause,
            "1 AND d.lane = ? AND d.target = ? AND d.status = ? \
             AND d.outbox_id IN (SELECT value FROM json_each(?))"
        );
        assert_eq!(
            some.binds,
            vec![
                "orders".to_owned(),
                "billing".to_owned(),
                "dead_letter".to_owned(),
                format!("[\"{id}\"]"),
            ]
        );
    }
}
