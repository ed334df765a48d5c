//! A [`MessageFilter`] as an SQL `WHERE` fragment and its values, written in a dialect's
//! words ([`Dialect`]). Only the fields the filter sets become terms, so each shape of
//! filter gets the plan its indexes allow (a generic `(? IS NULL OR lane = ?)` reads no
//! index).

use uuid::Uuid;

use crate::store::MessageFilter;

/// A value bound to a filter's fragment.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Text(String),
    Int(i64),
    /// One id (MySQL's `IN (?, ?, …)` binds each).
    Id(Uuid),
    /// A list of ids as one array value (PostgreSQL's `ANY($n::uuid[])`).
    Ids(Vec<Uuid>),
}

/// How a dialect writes a filter's terms.
#[derive(Debug)]
pub(crate) struct Dialect {
    /// Placeholders are numbered (`$1`, PostgreSQL) rather than anonymous (`?`).
    pub(crate) numbered: bool,
    /// An instant bound as store-clock milliseconds (the placeholder), as compared with
    /// `created_at`.
    pub(crate) instant: fn(&str) -> String,
    /// The function whose `f(text, sub) > 0` says `text` holds `sub` as a plain substring,
    /// case-sensitive (`%` and `_` read as themselves, as `LIKE` would not).
    pub(crate) contains: &'static str,
    /// How a list of ids is bound.
    pub(crate) ids: IdList,
    /// The status as a literal word (`status = 'pending'`) rather than a bound value.
    pub(crate) status_literal: bool,
    /// A bound text an index is read by (lane, target, status, key), in a listing's
    /// indexed terms: SQLite's `(? || '')`, an expression its planner does not sample
    /// against its statistics (given the value itself, it judged a common lane
    /// unselective and read a key's index by skip-scan, sorting the key's rows).
    pub(crate) indexed_text: fn(&str) -> String,
}

/// How a dialect binds a list of ids.
// Each variant is its store's: a build with fewer stores leaves the others unbuilt.
#[cfg_attr(
    not(all(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(dead_code)
)]
#[derive(Debug, Clone, Copy)]
pub(crate) enum IdList {
    /// One array value: `outbox_id = ANY($n::uuid[])`.
    Array,
    /// One placeholder per id: `outbox_id IN (?, ?, …)`.
    Marks,
    /// One JSON array of id texts: `outbox_id IN (SELECT value FROM json_each(?))`.
    Json,
}

/// Which of a filter's terms a fragment holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Terms {
    /// Every term.
    All,
    /// The terms an index reads (lane, target, status, key, ids).
    Indexed,
    /// The terms checked on the rows read ([`MessageFilter::scans`]: the enqueue time range
    /// and the error text).
    Scanned,
}

/// A fragment and its values, in placeholder order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Where {
    pub(crate) clause: String,
    pub(crate) values: Vec<Value>,
}

impl Where {
    /// `filter`'s `terms` over table alias `alias` (`"m."`, or `""` for none), in
    /// `dialect`'s words. Numbered placeholders start after `bound`, the values the
    /// statement binds before these.
    pub(crate) fn of(
        dialect: &Dialect,
        filter: &MessageFilter,
        alias: &str,
        terms: Terms,
        bound: usize,
    ) -> Self {
        let mut parts = vec!["1 = 1".to_owned()];
        let mut values = Vec::new();
        let bind = |values: &mut Vec<Value>, value: Value| {
            values.push(value);
            if dialect.numbered {
                format!("${}", bound + values.len())
            } else {
                "?".to_owned()
            }
        };
        if terms != Terms::Scanned {
            let eq = |p: String| match terms {
                Terms::Indexed => (dialect.indexed_text)(&p),
                _ => p,
            };
            let texts = [
                ("lane", &filter.lane),
                ("target", &filter.target),
                ("ordering_key", &filter.ordering_key),
            ];
            for (column, value) in texts {
                if let Some(value) = value {
                    let p = eq(bind(&mut values, Value::Text(value.clone())));
                    parts.push(format!("{alias}{column} = {p}"));
                }
            }
            if let Some(status) = filter.status {
                let p = if dialect.status_literal {
                    format!("'{}'", status.as_str())
                } else {
                    eq(bind(&mut values, Value::Text(status.as_str().to_owned())))
                };
                parts.push(format!("{alias}status = {p}"));
            }
            if !filter.ids.is_empty() {
                let column = format!("{alias}outbox_id");
                parts.push(match dialect.ids {
                    IdList::Array => {
                        let p = bind(&mut values, Value::Ids(filter.ids.clone()));
                        format!("{column} = ANY({p}::uuid[])")
                    }
                    IdList::Marks => {
                        let marks: Vec<String> = filter
                            .ids
                            .iter()
                            .map(|id| bind(&mut values, Value::Id(*id)))
                            .collect();
                        format!("{column} IN ({})", marks.join(", "))
                    }
                    IdList::Json => {
                        let ids: Vec<String> = filter.ids.iter().map(Uuid::to_string).collect();
                        // A Vec<String> always serialises; the fallback, an empty array,
                        // matches none.
                        let json = serde_json::to_string(&ids).unwrap_or_else(|_| "[]".into());
                        let p = bind(&mut values, Value::Text(json));
                        format!("{column} IN (SELECT value FROM json_each({p}))")
                    }
                });
            }
        }
        if terms != Terms::Indexed {
            // `[after, before)` on the enqueue time, in the store clock's milliseconds.
            let (after, before) = filter.enqueued_millis();
            for (op, at) in [(">=", after), ("<", before)] {
                if let Some(at) = at {
                    let p = bind(&mut values, Value::Int(at.as_millis()));
                    parts.push(format!("{alias}created_at {op} {}", (dialect.instant)(&p)));
                }
            }
            if let Some(text) = &filter.error_contains {
                let p = bind(&mut values, Value::Text(text.clone()));
                parts.push(format!("{}({alias}last_error, {p}) > 0", dialect.contains));
            }
        }
        Where {
            clause: parts.join(" AND "),
            values,
        }
    }
}

#[cfg(test)]
mod tests;
