//! `LogSink`: writes one JSON line per delivered message, to stdout or any writer.
//!
//! Each line holds `outbox_id`, `lane`, `target`, `ordering_key`, `attempt`, `headers` and
//! `payload`:
//!
//! ```text
//! {"outbox_id":"0190…","lane":"orders","target":"billing","ordering_key":"c-42","attempt":1,"headers":{},"payload":{"id":7}}
//! ```
//!
//! A consumer that reads the lines should treat `outbox_id` as the idempotency key: delivery
//! is at least once, so a line may repeat after a crash.
//!
//! `delay` (`sink = { kind = "log", delay = "200ms" }`) makes every delivery wait that long
//! before its line is written: a stand-in for a slow target (a broker or webhook that takes
//! that long to accept a message), for demos and for fault tests that need deliveries to
//! be in flight when a relay is killed. It counts against the lane's `delivery_timeout`, as
//! a slow target's time would.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::config::duration::HumanDuration;
use crate::config::ConfigError;
use crate::delivery::{DeliveryError, DeliveryHandler};
use crate::message::{OutboxMessage, Payload};

// ---- config ----------------------------------------------------------------------------

/// The settings of a log sink: `sink = { kind = "log" }`, or
/// `sink = { kind = "log", delay = "200ms" }`. An unknown key is refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSinkConfig {
    /// How long each delivery waits before its line is written, simulating a slow target.
    /// Default `0s` (none).
    #[serde(default)]
    pub delay: HumanDuration,
}

impl LogSinkConfig {
    /// Checks the settings (every delay is valid; the lane's `delivery_timeout` bounds it).
    pub fn validate(&self, _field: &str) -> Result<(), ConfigError> {
        Ok(())
    }
}

// ---- handler ---------------------------------------------------------------------------

/// One line of the log sink's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogLine {
    /// The message's id: the idempotency key.
    pub outbox_id: Uuid,
    /// The lane.
    pub lane: String,
    /// The target.
    pub target: String,
    /// The ordering key, if any.
    pub ordering_key: Option<String>,
    /// Which attempt this is (1 for the first).
    pub attempt: u32,
    /// The message's headers.
    pub headers: BTreeMap<String, String>,
    /// The message body, embedded as the JSON text that was enqueued; only line breaks
    /// between its tokens become spaces, so the line stays one line.
    pub payload: Payload,
}

impl LogLine {
    /// The line for `message`.
    pub fn of(message: &OutboxMessage) -> Self {
        Self {
            outbox_id: message.outbox_id,
            lane: message.lane.clone(),
            target: message.target.clone(),
            ordering_key: message.ordering_key.clone(),
            attempt: message.attempt_count,
            headers: message.headers.clone(),
            payload: on_one_line(&message.payload),
        }
    }
}

/// `payload` with each CR or LF turned into a space. In JSON text a raw line break can only
/// be whitespace between tokens (inside a string it must be escaped), so the value and every
/// other byte stay the same.
fn on_one_line(payload: &Payload) -> Payload {
    let text = payload.as_str();
    if !text.contains(['\n', '\r']) {
        return payload.clone();
    }
    // Swapping whitespace for whitespace keeps the text JSON; should that ever fail, the
    // payload as it is beats no line at all.
    Payload::from_json(text.replace(['\n', '\r'], " ")).unwrap_or_else(|_| payload.clone())
}

/// Delivers a message by writing it as one JSON line.
pub struct LogSink {
    // A mutex, not a channel to a writer task: a line must be written and flushed before the
    // delivery is acked, or a crash could ack a message whose line never left the process.
    writer: Arc<Mutex<Box<dyn Write + Send>>>,
    /// Waited before each line: a simulated slow target.
    delay: Duration,
}

impl fmt::Debug for LogSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogSink")
            .field("delay", &self.delay)
            .finish_non_exhaustive()
    }
}

impl LogSink {
    /// A sink writing to the process's stdout.
    pub fn stdout() -> Self {
        Self::new(std::io::stdout())
    }

    /// A sink writing to `writer` (a file, a pipe, a buffer in a test).
    pub fn new(writer: impl Write + Send + 'static) -> Self {
        Self {
            writer: Arc::new(Mutex::new(Box::new(writer))),
            delay: Duration::ZERO,
        }
    }

    /// Makes every delivery wait `delay` before writing its line, as a slow target would.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// The sink `config` describes: stdout, with its delay.
    pub fn from_config(config: &LogSinkConfig) -> Self {
        Self::stdout().with_delay(config.delay.0)
    }

    /// Writes `line` and flushes it.
    fn write_line(writer: &Mutex<Box<dyn Write + Send>>, line: &[u8]) -> Result<(), LogSinkError> {
        let mut writer = writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        writer.write_all(line).map_err(LogSinkError::Write)?;
        writer.flush().map_err(LogSinkError::Write)
    }
}

#[async_trait]
impl DeliveryHandler for LogSink {
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
        let mut line = serde_json::to_vec(&LogLine::of(message))
            .map_err(|error| DeliveryError::permanent(LogSinkError::Encode(error)))?;
        line.push(b'\n');
        if !self.delay.is_zero() {
            // The slow target: its time passes before the line is written, so a relay killed
            // meanwhile has claimed the message without delivering it.
            tokio::time::sleep(self.delay).await;
        }
        // The write blocks (a full pipe when the reader falls behind), so it runs on tokio's
        // blocking pool: a slow reader then slows this lane's deliveries, and never stalls
        // the runtime's workers, where lease timers and other lanes run.
        let writer = Arc::clone(&self.writer);
        tokio::task::spawn_blocking(move || Self::write_line(&writer, &line))
            .await
            .map_err(|error| DeliveryError::retryable(format!("log sink writer task: {error}")))?
            .map_err(DeliveryError::retryable)
    }
}

// ---- errors ----------------------------------------------------------------------------

/// Why a log sink could not deliver.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogSinkError {
    /// The message could not be written as JSON (permanent: it never will be).
    #[error("could not encode the message as JSON: {0}")]
    Encode(#[source] serde_json::Error),
    /// The writer refused the line (retryable: the reader may come back).
    #[error("could not write the line: {0}")]
    Write(#[source] std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer the test can read back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    struct Broken;

    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "gone"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    async fn stored_message() -> OutboxMessage {
        use crate::store::{ClaimRequest, Outbox};
        use crate::{InMemoryOutboxStore, OutboxMessageDraft};
        let store = Outbox::new(InMemoryOutboxStore::new());
        let draft = OutboxMessageDraft::new("orders", "billing", serde_json::json!({"id": 7}))
            .unwrap()
            .with_ordering_key("c-42")
            .with_header("x-trace", "abc");
        store.enqueue(draft).await.unwrap();
        let request = ClaimRequest::new(
            "orders",
            "billing",
            1,
            std::time::Duration::from_secs(5),
            "t",
        );
        store.claim(&request).await.unwrap().messages.remove(0)
    }

    #[test]
    fn a_payload_keeps_its_bytes_but_not_its_line_breaks() {
        let payload =
            Payload::from_json("{\"b\":1,\r\n \"a\":\"x\\ny\",\n\"a\":18446744073709551616}")
                .unwrap();
        assert_eq!(
            on_one_line(&payload).as_str(),
            "{\"b\":1,   \"a\":\"x\\ny\", \"a\":18446744073709551616}"
        );
        let flat = Payload::from_json("{ \"b\" : 1,\t\"a\":2 }").unwrap();
        assert_eq!(on_one_line(&flat), flat);
    }

    #[tokio::test]
    async fn writes_one_json_line_per_message() {
        let out = Captured::default();
        let sink = LogSink::new(out.clone());
        let message = stored_message().await;
        sink.deliver(&message).await.unwrap();
        sink.deliver(&message).await.unwrap();
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        let line: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(
            line,
            serde_json::json!({
                "outbox_id": message.outbox_id,
                "lane": "orders",
                "target": "billing",
                "ordering_key": "c-42",
                "attempt": 1,
                "headers": {"x-trace": "abc"},
                "payload": {"id": 7},
            })
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_delay_holds_each_line_back_that_long() {
        let config: LogSinkConfig = serde_json::from_str(r#"{"delay": "200ms"}"#).unwrap();
        assert_eq!(config.delay.0, Duration::from_millis(200));
        assert_eq!(
            serde_json::from_str::<LogSinkConfig>("{}").unwrap(),
            LogSinkConfig::default(),
            "no delay unless configured"
        );
        let out = Captured::default();
        let sink = Arc::new(LogSink::new(out.clone()).with_delay(config.delay.0));
        let message = stored_message().await;
        let started = tokio::time::Instant::now();
        let delivery = tokio::spawn({
            let sink = Arc::clone(&sink);
            async move { sink.deliver(&message).await }
        });
        // The paused clock: this sleep ends first, 1 ms before the sink's.
        tokio::time::sleep(Duration::from_millis(199)).await;
        assert!(out.0.lock().unwrap().is_empty(), "written before the delay");
        delivery.await.unwrap().unwrap();
        assert!(started.elapsed() >= Duration::from_millis(200));
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
    }

    #[tokio::test]
    async fn a_failing_writer_is_a_retryable_failure() {
        let sink = LogSink::new(Broken);
        let error = sink.deliver(&stored_message().await).await.unwrap_err();
        assert!(matches!(error, DeliveryError::Retryable(_)), "{error:?}");
        assert!(error.to_string().contains("gone"), "{error}");
    }
}
