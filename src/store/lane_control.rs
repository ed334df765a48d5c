//! Fleet-wide lane control: a (lane, target) paused in the store, for every relay process
//! on that database and across their restarts, with who paused it, when and why.
//!
//! The store only records the pause ([`Outbox::pause_lane`], `resume_lane`,
//! `lane_pauses`: one row per paused lane). Every relay reads the pauses when it starts
//! (its lanes start paused) and then at least once per [`LANE_CONTROL_POLL`], and applies
//! them through its own pause path; a relay's process-local pause
//! ([`RelayHandle::pause`](crate::RelayHandle::pause)) is kept apart and reported apart.
//!
//! Why a poll rather than wake-ups: a pause is rare and must hold within a second; one
//! primary-key scan of a table of a few rows per relay and second costs nothing, works the
//! same on every backend (SQLite has no cross-process wake-ups), and a missed notification
//! can never leave a relay claiming.
//!
//! [`Outbox::pause_lane`]: super::Outbox::pause_lane

use std::time::Duration;

use serde::Serialize;

use crate::message::ValidationError;
use crate::time::UnixMillis;

use super::StoreError;

/// How often a relay reads the lane pauses: a pause holds everywhere within this, plus
/// one store round trip.
pub const LANE_CONTROL_POLL: Duration = Duration::from_millis(500);

/// The longest `paused_by` may be, in characters.
pub const MAX_PAUSED_BY_LEN: usize = 200;
/// The longest `reason` may be, in characters.
pub const MAX_PAUSE_REASON_LEN: usize = 1000;
/// The longest lane or target name lane control accepts (as a draft's).
const MAX_NAME_LEN: usize = 200;

/// A fleet-wide pause of one (lane, target), as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LanePause {
    /// The lane.
    pub lane: String,
    /// The target.
    pub target: String,
    /// Who paused it (an operator, `cli:user@host`, `api`).
    pub paused_by: String,
    /// Why, if they said.
    pub reason: Option<String>,
    /// When, on the store's clock.
    pub paused_at: UnixMillis,
}

/// A request to pause a (lane, target) for every relay on the store.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LanePauseRequest {
    /// The lane.
    pub lane: String,
    /// The target.
    pub target: String,
    /// Who asks.
    pub paused_by: String,
    /// Why.
    pub reason: Option<String>,
}

impl LanePauseRequest {
    /// A pause of `lane`/`target` asked by `paused_by`, with no reason.
    pub fn new(
        lane: impl Into<String>,
        target: impl Into<String>,
        paused_by: impl Into<String>,
    ) -> Self {
        Self {
            lane: lane.into(),
            target: target.into(),
            paused_by: paused_by.into(),
            reason: None,
        }
    }

    /// Says why (shown in status and the API).
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// Checks every field; the error names the field. Stores call it before writing.
    pub fn validate(&self) -> Result<(), StoreError> {
        validate_lane(&self.lane, &self.target)?;
        let by = self.paused_by.trim();
        if by.is_empty() || by.chars().count() > MAX_PAUSED_BY_LEN {
            return Err(ValidationError::new(
                "paused_by",
                format!("must be 1 to {MAX_PAUSED_BY_LEN} characters"),
            )
            .into());
        }
        if let Some(reason) = &self.reason {
            if reason.chars().count() > MAX_PAUSE_REASON_LEN {
                return Err(ValidationError::new(
                    "reason",
                    format!("must be at most {MAX_PAUSE_REASON_LEN} characters"),
                )
                .into());
            }
        }
        Ok(())
    }
}

/// Checks a (lane, target) a lane-control call names; the error names the field.
pub fn validate_lane(lane: &str, target: &str) -> Result<(), StoreError> {
    for (field, value) in [("lane", lane), ("target", target)] {
        if value.is_empty() || value.chars().count() > MAX_NAME_LEN {
            return Err(ValidationError::new(
                field,
                format!("must be 1 to {MAX_NAME_LEN} characters"),
            )
            .into());
        }
    }
    Ok(())
}

/// What a store without lane control answers (the trait's provided methods): refused for
/// good, so a relay stops asking and says why once.
pub(crate) fn unsupported(op: super::StoreOp) -> StoreError {
    StoreError::denied(op, "this store keeps no lane control")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_names_the_field_it_fails_on() {
        let field = |request: LanePauseRequest| match request.validate() {
            Err(StoreError::Validation(error)) => error.field,
            other => panic!("{other:?}"),
        };
        assert!(LanePauseRequest::new("orders", "audit", "ops")
            .reason("broker upgrade")
            .validate()
            .is_ok());
        assert_eq!(field(LanePauseRequest::new("", "audit", "ops")), "lane");
        assert_eq!(field(LanePauseRequest::new("orders", "", "ops")), "target");
        assert_eq!(
            field(LanePauseRequest::new("orders", "audit", "  ")),
            "paused_by"
        );
        assert_eq!(
            field(
                LanePauseRequest::new("orders", "audit", "ops")
                    .reason("x".repeat(MAX_PAUSE_REASON_LEN + 1))
            ),
            "reason"
        );
    }
}
