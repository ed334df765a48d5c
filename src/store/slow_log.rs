//! [`SlowCallLog`]: a [`StoreHook`] that logs a slow call by its operation's name and its
//! duration, and nothing else. sqlx's own slow-statement warning prints the whole statement
//! (5 KB for a claim) at WARN; the stores this crate opens turn that off and log through
//! this hook instead.

use std::time::Duration;

use crate::store::{StoreCall, StoreHook};

/// A store call slower than this is logged, unless configured otherwise (sqlx's own
/// threshold for its slow-statement warning).
pub const DEFAULT_SLOW_CALL_THRESHOLD: Duration = Duration::from_secs(1);

/// Logs a call slower than `threshold` at WARN as
/// `slow store call op=claim duration_ms=1234`, without its statement or arguments.
#[derive(Debug, Clone, Copy)]
pub struct SlowCallLog {
    threshold: Duration,
}

impl SlowCallLog {
    /// Logs calls slower than `threshold`.
    pub fn new(threshold: Duration) -> Self {
        Self { threshold }
    }
}

impl StoreHook for SlowCallLog {
    fn finished(&self, call: &StoreCall<'_>) {
        if call.duration >= self.threshold {
            tracing::warn!(
                op = call.op.as_str(),
                duration_ms = u64::try_from(call.duration.as_millis()).unwrap_or(u64::MAX),
                "slow store call"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::InMemoryOutboxStore;
    use crate::store::{ClaimRequest, Outbox};

    /// Collects what the fmt subscriber writes.
    use crate::captured_log::Captured;

    async fn claim_logged(threshold: Duration) -> String {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let store = Outbox::new(InMemoryOutboxStore::new()).with_hook(SlowCallLog::new(threshold));
        let request = ClaimRequest::new("orders", "billing", 10, Duration::from_secs(30), "me");
        store
            .claim(&request)
            .await
            .map(drop)
            .unwrap_or_else(|e| panic!("{e}"));
        let bytes = captured.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[tokio::test]
    async fn a_slow_call_is_logged_by_name_and_duration_only() {
        // Every call is "slow" at a zero threshold: the line is all there is to check.
        let log = claim_logged(Duration::ZERO).await;
        assert!(log.contains("slow store call"), "{log}");
        assert!(
            log.contains("op=\"claim\"") || log.contains("op=claim"),
            "{log}"
        );
        assert!(log.contains("duration_ms="), "{log}");
        assert!(
            !log.contains("orders") && !log.contains("billing"),
            "the call's arguments were logged: {log}"
        );
        assert_eq!(log.lines().count(), 1, "{log}");
    }

    #[tokio::test]
    async fn a_fast_call_is_not_logged() {
        let log = claim_logged(Duration::from_secs(3600)).await;
        assert!(log.is_empty(), "{log}");
    }
}
