//! Collects a child process's stderr on a thread, so a test can print it when it fails.

use std::io::Read;
use std::process::ChildStderr;
use std::sync::{Arc, Mutex};
use std::thread;

/// Reads `pipe` to its end into the returned buffer.
pub fn capture(mut pipe: ChildStderr) -> Arc<Mutex<String>> {
    let text = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&text);
    thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                return;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    text
}
