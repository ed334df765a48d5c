use super::*;

fn live(first: Option<i64>, old_marked: bool) -> Live {
    Live { first, old_marked }
}

#[test]
fn an_ack_of_the_head_marks_the_next_without_clearing_a_cleared_mark() {
    // The acked head (7) lost its mark in the ack's own UPDATE, or its row is gone.
    assert_eq!(
        Change::of(Some(7), live(Some(9), false)),
        Change {
            unmark: None,
            mark: Some(9),
            forget: false
        }
    );
}

#[test]
fn a_head_still_marked_and_still_first_writes_nothing() {
    assert_eq!(
        Change::of(Some(7), live(Some(7), true)),
        Change {
            unmark: None,
            mark: None,
            forget: false
        }
    );
}

#[test]
fn an_earlier_message_put_back_takes_the_mark_from_the_marked_head() {
    assert_eq!(
        Change::of(Some(7), live(Some(3), true)),
        Change {
            unmark: Some(7),
            mark: Some(3),
            forget: false
        }
    );
}

#[test]
fn a_first_message_that_lost_its_mark_gets_it_back() {
    assert_eq!(
        Change::of(Some(7), live(Some(7), false)).mark,
        Some(7),
        "a recorded head without its mark is marked again"
    );
    assert_eq!(Change::of(None, live(Some(4), false)).mark, Some(4));
}

#[test]
fn a_key_left_without_live_messages_is_forgotten() {
    assert_eq!(
        Change::of(Some(7), live(None, false)),
        Change {
            unmark: None,
            mark: None,
            forget: true
        }
    );
    assert_eq!(Change::of(Some(7), live(None, true)).unmark, Some(7));
}
