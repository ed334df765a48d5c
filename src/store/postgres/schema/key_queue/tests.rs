use super::*;

#[test]
fn each_probe_names_one_status_so_that_one_partial_index_serves_it() {
    // "An earlier live row of the key exists", as the statements spell it.
    let exists = include_str!("../../sql/sweep_clear.sql");
    assert_eq!(
        exists.matches("e.status = 'pending'").count(),
        1,
        "{exists}"
    );
    assert_eq!(
        exists.matches("e.status = 'claimed'").count(),
        1,
        "{exists}"
    );
    assert!(!exists.contains(" IN ("), "{exists}");
    assert!(
        exists.contains("e.ordering_key = m.ordering_key"),
        "{exists}"
    );
    let lowest = lowest_live("t", "e", &KeyOf::of("u"), "");
    assert_eq!(
        lowest.matches("ORDER BY e.seq LIMIT 1").count(),
        2,
        "{lowest}"
    );
    assert!(lowest.ends_with("ORDER BY x.seq LIMIT 1"), "{lowest}");
    let bound = run_bound("t", &KeyOf::of("h"), "h.seq");
    assert!(
        bound.contains("c.status = 'claimed' AND c.seq > h.seq"),
        "{bound}"
    );
}
