//! The conformance suite against `SqliteOutboxStore` (being written).
