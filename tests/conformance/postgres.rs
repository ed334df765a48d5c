//! The conformance suite against `PostgresOutboxStore` (being written).
