//! A small W3C WebDriver client over plain HTTP/1.1: chromedriver on a port of its own,
//! driving Debian's headless Chromium with a fresh profile. Only the commands the UI tests
//! use: navigate, find, click, type, read text and attributes, cookies, run a script, take
//! a screenshot.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};
use tempfile::TempDir;

use crate::{free_port, WAIT};

/// The key WebDriver's "send keys" understands as Enter.
pub const ENTER: &str = "\u{E007}";
/// The element reference's key in WebDriver answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Where screenshots go: `target/ui-screenshots/`.
pub fn screenshot_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .join("ui-screenshots")
}

/// One HTTP exchange with chromedriver: the status and the JSON body.
fn exchange(port: u16, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .unwrap_or_else(|error| panic!("connect to chromedriver on {port}: {error}"));
    stream.set_read_timeout(Some(WAIT)).expect("a read timeout");
    let body = body.map(Value::to_string).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .expect("send to chromedriver");
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).expect("a status line");
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {status_line:?}"));
    let (mut length, mut chunked) = (None, false);
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("a header line");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(value) = lower.strip_prefix("content-length:") {
            length = value.trim().parse::<usize>().ok();
        }
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let mut raw = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).expect("a chunk size");
            let size = usize::from_str_radix(size.trim(), 16).expect("a hex chunk size");
            if size == 0 {
                break;
            }
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).expect("a chunk");
            raw.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(length) = length {
        raw.resize(length, 0);
        reader.read_exact(&mut raw).expect("the body");
    } else {
        reader.read_to_end(&mut raw).expect("the body");
    }
    let value = if raw.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&raw).unwrap_or_else(|error| {
            panic!(
                "chromedriver answered non-JSON ({error}): {}",
                String::from_utf8_lossy(&raw)
            )
        })
    };
    (status, value)
}

/// A headless Chromium under chromedriver, one per test; both end when it drops. A test
/// that panics leaves a screenshot in [`screenshot_dir`] named after it.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    name: String,
    _profile: TempDir,
}

/// An element of the current page.
#[derive(Debug, Clone)]
pub struct Element(String);

impl Browser {
    /// Starts chromedriver and a Chromium session; `name` names the failure screenshot.
    pub fn start(name: &str) -> Self {
        for binary in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                Path::new(binary).exists(),
                "{binary} is missing: apt-get install chromium chromium-driver (.ci/run does)"
            );
        }
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let started = Instant::now();
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok()
                && exchange(port, "GET", "/status", None).1["value"]["ready"] == true
            {
                break;
            }
            assert!(
                started.elapsed() < WAIT,
                "chromedriver did not answer within {WAIT:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let profile = tempfile::tempdir().expect("a profile directory");
        // Root needs --no-sandbox; the rest keeps Chromium from reaching for the network,
        // which is closed here: its background connections would fail, many at a time.
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,720",
            &format!("--user-data-dir={}", profile.path().display()),
        ];
        let (status, answer) = exchange(
            port,
            "POST",
            "/session",
            Some(&json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
            }}})),
        );
        let session = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session ({status}): {answer}"))
            .to_owned();
        Self {
            driver,
            port,
            session,
            name: name.to_owned(),
            _profile: profile,
        }
    }

    fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        let (status, answer) = exchange(self.port, method, &path, body.as_ref());
        assert!(
            status == 200,
            "WebDriver {method} {path} failed ({status}): {answer}"
        );
        answer["value"].clone()
    }

    /// Opens `url` and waits for it to load.
    pub fn goto(&self, url: &str) {
        self.command("POST", "/url", Some(json!({ "url": url })));
    }

    /// The current page's address.
    pub fn url(&self) -> String {
        self.command("GET", "/url", None)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    fn try_find(&self, css: &str) -> Option<Element> {
        let path = format!("/session/{}/element", self.session);
        let (status, answer) = exchange(
            self.port,
            "POST",
            &path,
            Some(&json!({"using": "css selector", "value": css})),
        );
        (status == 200).then(|| {
            Element(
                answer["value"][ELEMENT]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
    }

    /// The first element `css` selects, waited for up to [`WAIT`].
    pub fn find(&self, css: &str) -> Found<'_> {
        let started = Instant::now();
        loop {
            if let Some(element) = self.try_find(css) {
                return Found {
                    browser: self,
                    element,
                };
            }
            assert!(
                started.elapsed() < WAIT,
                "no element {css:?} on {} within {WAIT:?}",
                self.url()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether an element `css` selects is on the page now.
    pub fn has(&self, css: &str) -> bool {
        self.try_find(css).is_some()
    }

    /// Every element `css` selects now.
    pub fn find_all(&self, css: &str) -> Vec<Found<'_>> {
        let value = self.command(
            "POST",
            "/elements",
            Some(json!({"using": "css selector", "value": css})),
        );
        value
            .as_array()
            .into_iter()
            .flatten()
            .map(|element| Found {
                browser: self,
                element: Element(element[ELEMENT].as_str().unwrap_or_default().to_owned()),
            })
            .collect()
    }

    /// Runs `script` (a function body; `arguments` are `args`) and returns its value.
    pub fn script(&self, script: &str, args: Value) -> Value {
        self.command(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
    }

    /// The browser's cookies, as WebDriver reports them (with `httpOnly` and `sameSite`).
    pub fn cookies(&self) -> Vec<Value> {
        self.command("GET", "/cookie", None)
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Emulates the system's dark or light preference (`prefers-color-scheme`).
    pub fn prefer_color_scheme(&self, scheme: &str) {
        self.command(
            "POST",
            "/goog/cdp/execute",
            Some(json!({"cmd": "Emulation.setEmulatedMedia", "params": {
                "features": [{"name": "prefers-color-scheme", "value": scheme}]
            }})),
        );
    }

    /// A PNG of the viewport.
    pub fn screenshot(&self) -> Vec<u8> {
        let encoded = self.command("GET", "/screenshot", None);
        base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().unwrap_or_default())
            .expect("a base64 PNG")
    }

    /// Saves a screenshot as `dir/name.png`.
    pub fn save_screenshot(&self, dir: &Path, name: &str) -> PathBuf {
        std::fs::create_dir_all(dir).expect("create the screenshot directory");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, self.screenshot()).expect("write the screenshot");
        path
    }

    /// Waits until `check` says yes, reloading the page between tries; `what` says what is
    /// awaited in the failure.
    pub fn reload_until(&self, what: &str, mut check: impl FnMut(&Self) -> bool) {
        let started = Instant::now();
        while !check(self) {
            assert!(
                started.elapsed() < WAIT,
                "{what}: not within {WAIT:?} on {}",
                self.url()
            );
            std::thread::sleep(Duration::from_millis(100));
            self.command("POST", "/refresh", Some(json!({})));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let path = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.save_screenshot(&screenshot_dir(), &format!("failed-{}", self.name))
            }));
            match path {
                Ok(path) => eprintln!("screenshot of the failure: {}", path.display()),
                Err(_) => eprintln!("could not take a screenshot of the failure"),
            }
        }
        let path = format!("/session/{}", self.session);
        let _ = std::panic::catch_unwind(|| exchange(self.port, "DELETE", &path, None));
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// An element found on a page.
pub struct Found<'a> {
    browser: &'a Browser,
    element: Element,
}

impl Found<'_> {
    fn path(&self, rest: &str) -> String {
        format!("/element/{}{rest}", self.element.0)
    }

    /// Clicks it (a link or a button: waits for the page it loads).
    pub fn click(&self) {
        self.browser
            .command("POST", &self.path("/click"), Some(json!({})));
    }

    /// Types `text` into it.
    pub fn send_keys(&self, text: &str) {
        self.browser
            .command("POST", &self.path("/value"), Some(json!({ "text": text })));
    }

    /// Its rendered text.
    pub fn text(&self) -> String {
        self.browser
            .command("GET", &self.path("/text"), None)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The attribute `name`, if set.
    pub fn attribute(&self, name: &str) -> Option<String> {
        self.browser
            .command("GET", &self.path(&format!("/attribute/{name}")), None)
            .as_str()
            .map(str::to_owned)
    }

    /// Picks the `<option>` of this `<select>` whose value is `value`.
    pub fn select(&self, value: &str) {
        let css = format!("option[value=\"{value}\"]");
        let option = self.browser.command(
            "POST",
            &self.path("/element"),
            Some(json!({"using": "css selector", "value": css})),
        );
        let id = option[ELEMENT].as_str().unwrap_or_default();
        self.browser
            .command("POST", &format!("/element/{id}/click"), Some(json!({})));
    }
}
