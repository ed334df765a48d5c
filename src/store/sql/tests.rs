use super::*;

#[test]
fn an_entry_ending_in_a_star_is_a_prefix() {
    assert!(Codes::lists(&["08*", "53300"], "08006"));
    assert!(Codes::lists(&["08*", "53300"], "53300"));
    assert!(!Codes::lists(&["08*", "53300"], "5330"));
    assert!(!Codes::lists(&["08*"], "42P01"));
}
