//! Tests only: a `tracing` writer that keeps what a subscriber wrote, for tests that read
//! the log lines the library emits.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// What the subscriber wrote; clones share the buffer.
#[derive(Clone, Default)]
pub(crate) struct Captured(pub(crate) Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// Everything written so far, as text.
    #[allow(dead_code)] // not every test module that captures reads it this way
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

/// Installs, for this thread, a plain-text subscriber at INFO that logs span closes too,
/// writing into the returned buffer until the guard is dropped.
#[allow(dead_code)] // not every test build has a module that reads spans
pub(crate) fn capture_spans() -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
}

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
