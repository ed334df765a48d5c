//! Lanes nobody serves (`store::served`): the pairs holding pending messages that no
//! record of a running relay covers, in name order; a record holds for its time, a shorter
//! renewal never cuts it, and only pending messages count.

use crate::store::UnservedLane;

use super::*;

fn pair(lane: &str, target: &str) -> (String, String) {
    (lane.to_owned(), target.to_owned())
}

fn unserved(lane: &str, target: &str, pending: u64) -> UnservedLane {
    UnservedLane {
        lane: lane.to_owned(),
        target: target.to_owned(),
        pending,
    }
}

/// A relay serves `canonical/projector` and `orders/billing`; a producer also wrote to
/// `order/billing` (a typo), and lanes without pending messages are no matter.
pub async fn unserved_lanes_are_those_with_pending_messages_no_record_covers(h: Harness) {
    let store = &h.store;
    if !store.capabilities().served_lanes {
        // A store without the record refuses both for good: relays stop asking.
        let record = store.record_served(&[], Duration::from_secs(30)).await;
        assert!(record.is_err_and(|e| e.is_permanent()));
        let read = store.unserved_lanes(10).await;
        assert!(read.is_err_and(|e| e.is_permanent()));
        return;
    }
    assert_eq!(store.unserved_lanes(10).await.unwrap(), []);
    put(&h, draft(1)).await;
    for value in 0..2 {
        put(&h, draft_in("orders", "billing", value)).await;
    }
    for value in 0..3 {
        put(&h, draft_in("order", "billing", value)).await;
    }
    // Nothing pending in `done/audit` (delivered) nor in `busy/audit` (claimed).
    put(&h, draft_in("done", "audit", 1)).await;
    let done = h
        .store
        .claim(&ClaimRequest::new("done", "audit", 1, LEASE, "relay-a"))
        .await
        .unwrap();
    store.ack(&[claim_of(&done.messages[0])]).await.unwrap();
    put(&h, draft_in("busy", "audit", 1)).await;
    store
        .claim(&ClaimRequest::new("busy", "audit", 1, LEASE, "relay-a"))
        .await
        .unwrap();

    let served = [pair(LANE, TARGET), pair("orders", "billing")];
    store
        .record_served(&served, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        store.unserved_lanes(10).await.unwrap(),
        [unserved("order", "billing", 3)]
    );

    // A longer record is not cut by a shorter renewal.
    store
        .record_served(&[pair("orders", "billing")], Duration::from_secs(60))
        .await
        .unwrap();
    store
        .record_served(&served, Duration::from_secs(10))
        .await
        .unwrap();
    h.clock.advance(ms(31_000));
    assert_eq!(
        store.unserved_lanes(10).await.unwrap(),
        [unserved(LANE, TARGET, 1), unserved("order", "billing", 3)],
        "the default lane's record lapsed, orders/billing's holds"
    );
    h.clock.advance(ms(30_000));
    assert_eq!(
        store.unserved_lanes(2).await.unwrap(),
        [unserved(LANE, TARGET, 1), unserved("order", "billing", 3)],
        "in name order, at most the limit"
    );
    assert_eq!(
        store.unserved_lanes(10).await.unwrap()[2],
        unserved("orders", "billing", 2)
    );
}

/// Lane patterns find their lanes: the pairs holding pending messages whose lane begins
/// with a prefix given for its target, in name order, at most the limit; a prefix of
/// another target, and a lane with nothing pending, are no match.
pub async fn pending_lanes_are_the_pending_pairs_a_prefix_matches(h: Harness) {
    let store = &h.store;
    let tenants = [pair("tenant-", "billing")];
    assert_eq!(store.pending_lanes(&tenants, 10).await.unwrap(), []);
    assert_eq!(store.pending_lanes(&[], 10).await.unwrap(), []);
    for lane in ["tenant-7", "tenant-12", "tenantx", "tenant-", "other"] {
        put(&h, draft_in(lane, "billing", 1)).await;
    }
    put(&h, draft_in("tenant-9", "audit", 1)).await;
    // Nothing pending in tenant-3 (claimed).
    put(&h, draft_in("tenant-3", "billing", 1)).await;
    store
        .claim(&ClaimRequest::new(
            "tenant-3", "billing", 1, LEASE, "relay-a",
        ))
        .await
        .unwrap();

    assert_eq!(
        store.pending_lanes(&tenants, 10).await.unwrap(),
        [
            pair("tenant-", "billing"),
            pair("tenant-12", "billing"),
            pair("tenant-7", "billing")
        ]
    );
    assert_eq!(
        store.pending_lanes(&tenants, 2).await.unwrap(),
        [pair("tenant-", "billing"), pair("tenant-12", "billing")],
        "at most the limit, in name order"
    );
    // A prefix is text, not a pattern: `_` and `%` in it match only themselves.
    for wild in ["tenant_", "tenant%", "%"] {
        assert_eq!(
            store
                .pending_lanes(&[pair(wild, "billing")], 10)
                .await
                .unwrap(),
            [],
            "{wild}"
        );
    }
    let both = [pair("tenant-1", "billing"), pair("tenant-", "audit")];
    assert_eq!(
        store.pending_lanes(&both, 10).await.unwrap(),
        [pair("tenant-12", "billing"), pair("tenant-9", "audit")]
    );
}
