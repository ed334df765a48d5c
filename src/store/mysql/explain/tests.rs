use serde_json::json;

use super::*;

fn plan(value: Value) -> ClaimPlan {
    ClaimPlan {
        statement: "ready",
        sql: String::new(),
        plan: value,
    }
}

fn read(access: Access, index: Option<&str>, rows: u64) -> TableRead {
    TableRead {
        access,
        index: index.map(str::to_owned),
        rows,
    }
}

#[test]
fn mariadb_plans_give_their_tables_rows_really_read_and_sorts() {
    // MariaDB 10.11, ANALYZE FORMAT=JSON of a range read and of a full scan with a sort.
    let analyzed = plan(json!({"query_block": {"select_id": 1, "r_loops": 1,
            "table": {"table_name": "outbox_messages", "access_type": "range",
                "key": "ready", "rows": 99000, "r_rows": 64, "filtered": 100}}}));
    assert_eq!(
        analyzed.reads(),
        [read(Access::IndexRange, Some("ready"), 64)]
    );
    assert!(!analyzed.sorts());
    let sorted = plan(json!({"query_block": {"select_id": 1,
            "filesort": {"sort_key": "created_at", "table": {"table_name": "outbox_messages",
                "access_type": "ALL", "rows": 1000}}}}));
    assert_eq!(sorted.reads(), [read(Access::FullTableScan, None, 1000)]);
    assert!(sorted.sorts());
    let dive = plan(json!({"query_block": {"select_id": 1,
            "table": {"message": "Select tables optimized away"}}}));
    assert_eq!(dive.reads(), [read(Access::OneIndexDive, None, 1)]);
}

#[test]
fn mysql_first_format_plans_give_their_tables_and_sorts() {
    let lookup = plan(
        json!({"query_block": {"select_id": 1, "ordering_operation": {
            "using_filesort": false, "table": {"table_name": "outbox_messages",
                "access_type": "ref", "key": "by_key", "rows_examined_per_scan": 3,
                "rows_produced_per_join": 3}}}}),
    );
    assert_eq!(
        lookup.reads(),
        [read(Access::IndexLookup, Some("by_key"), 3)]
    );
    assert!(!lookup.sorts());
    let scan = plan(
        json!({"query_block": {"select_id": 1, "ordering_operation": {
            "using_filesort": true, "table": {"table_name": "outbox_messages",
                "access_type": "index", "key": "pending", "rows_examined_per_scan": 500}}}}),
    );
    assert_eq!(
        scan.reads(),
        [read(Access::FullIndexScan, Some("pending"), 500)]
    );
    assert!(scan.sorts());
}

#[test]
fn mysql_second_format_plans_give_only_the_operations_over_tables() {
    // MySQL 9.7, EXPLAIN ANALYZE FORMAT=JSON: a limit over an index range scan, and a
    // union of two MIN()s answered while planning.
    let range = plan(json!({"query_plan": {"operation": "Limit: 64 row(s)",
            "access_type": "limit", "estimated_rows": 64.0, "actual_rows": 64.0,
            "inputs": [{"operation": "Index range scan on outbox_messages using ready",
                "table_name": "outbox_messages", "index_name": "ready",
                "access_type": "index", "index_access_type": "index_range_scan",
                "estimated_rows": 99000.0, "actual_rows": 64.0, "actual_loops": 1}]},
            "json_schema_version": "2.0"}));
    assert_eq!(range.reads(), [read(Access::IndexRange, Some("ready"), 64)]);
    assert!(!range.sorts());
    let dives = plan(json!({"query_plan": {"access_type": "append",
            "estimated_rows": 2.0, "inputs": [
                {"access_type": "stream", "estimated_rows": 1.0, "inputs": [
                    {"access_type": "zero_rows_aggregated", "estimated_rows": 1.0,
                     "zero_rows_cause": "No matching min/max row"}]},
                {"access_type": "stream", "estimated_rows": 1.0, "inputs": [
                    {"access_type": "rows_fetched_before_execution",
                     "estimated_rows": 1.0}]}]}}));
    assert_eq!(
        dives.reads(),
        [
            read(Access::OneIndexDive, None, 1),
            read(Access::OneIndexDive, None, 1)
        ]
    );
    let scan = plan(json!({"query_plan": {"access_type": "sort",
            "operation": "Sort: outbox_messages.created_at", "estimated_rows": 10.0,
            "inputs": [{"operation": "Table scan on outbox_messages",
                "table_name": "outbox_messages", "access_type": "table",
                "estimated_rows": 10.0}]}}));
    assert_eq!(scan.reads(), [read(Access::FullTableScan, None, 10)]);
    assert!(scan.sorts());
    let full_index = plan(json!({"query_plan": {"table_name": "outbox_messages",
            "access_type": "index", "index_access_type": "index_scan",
            "index_name": "pending", "estimated_rows": 10.0}}));
    assert_eq!(
        full_index.reads(),
        [read(Access::FullIndexScan, Some("pending"), 10)]
    );
}
