use super::*;

#[test]
fn payloads_parse() {
    assert_eq!(
        parse("orders\tbilling"),
        WakeUp::Lane {
            lane: "orders".into(),
            target: "billing".into()
        }
    );
    assert_eq!(parse("garbage"), WakeUp::All);
    assert_eq!(parse(LANE_CONTROL_PAYLOAD), WakeUp::LaneControl);
}
