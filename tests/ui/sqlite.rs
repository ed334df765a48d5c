//! The UI on one relay over SQLite: logging in, the lane's counts against the store's,
//! refused requests, and the dead-letter paths (find by key, requeue, bulk discard by
//! filter, unblock a key).

use std::time::Duration;

use outbox_relay::message::OutboxStatus;
use outbox_relay::store::MessageFilter;
use outbox_relay::{Outbox, SqliteOutboxStore};
use serde_json::json;
use tempfile::TempDir;

use crate::webdriver::{screenshot_dir, Browser, ENTER};
use crate::{
    block_on, csrf_in, dead_letter_everything, enqueue, enqueue_text, free_port, get_page,
    ids_with, log_in, post_form, relay_config, set_cookie, Relay, LANE, TARGET, TOKEN,
};

/// A relay over a fresh SQLite file in a directory of its own, and the test's own store.
struct Sandbox {
    dir: TempDir,
    store: Outbox,
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = Outbox::new(
            block_on(SqliteOutboxStore::open(dir.path().join("outbox.db")))
                .expect("open the SQLite outbox"),
        );
        Self { dir, store }
    }

    fn start_relay(&self) -> Relay {
        let port = free_port();
        let database = format!(
            "database_url = \"sqlite:{}\"",
            self.dir.path().join("outbox.db").display()
        );
        let config = relay_config(self.dir.path(), &database, port, "relay-sqlite");
        Relay::start(self.dir.path(), &config, port)
    }

    fn stats(&self) -> outbox_relay::store::LaneStats {
        block_on(self.store.stats(&MessageFilter::lane(LANE, TARGET)))
            .expect("stats")
            .into_iter()
            .next()
            .expect("the lane has messages")
    }
}

/// The text of `field` in the lane's row of the lanes page.
fn lane_field(browser: &Browser, field: &str) -> String {
    browser
        .find(&format!(
            "tr[data-lane=\"{LANE}/{TARGET}\"] [data-field=\"{field}\"]"
        ))
        .text()
}

#[test]
fn login_lane_counts_and_the_theme_on_sqlite() {
    let sandbox = Sandbox::new();
    // Two poison messages and a key held by a dead head; three messages due in an hour.
    enqueue(&sandbox.store, None, json!({"n": 1}), None);
    enqueue(&sandbox.store, None, json!({"n": 2}), None);
    enqueue(&sandbox.store, Some("customer-42"), json!({"n": 3}), None);
    assert_eq!(dead_letter_everything(&sandbox.store, "poison"), 3);
    enqueue(&sandbox.store, Some("customer-42"), json!({"n": 4}), None);
    for n in 5..8 {
        enqueue(
            &sandbox.store,
            None,
            json!({"n": n}),
            Some(Duration::from_secs(3600)),
        );
    }
    let relay = sandbox.start_relay();
    let browser = Browser::start("login_lane_counts_and_the_theme_on_sqlite");

    // 1. A wrong token is refused; the right one opens a session kept in an HttpOnly,
    // SameSite=Strict cookie that scripts cannot read.
    browser.goto(&relay.ui("/ui/lanes"));
    assert!(
        browser.url().contains("/ui/login?next="),
        "{}",
        browser.url()
    );
    browser.find("#token").send_keys("not-the-token-0123456789");
    browser.find("#token").send_keys(ENTER);
    assert!(
        browser
            .find("p.error")
            .text()
            .contains("not the listener's token"),
        "no refusal shown"
    );
    assert!(!browser.has("section#lanes"));
    browser.find("#token").send_keys(TOKEN);
    browser.find("#token").send_keys(ENTER);
    browser.find("section#lanes");
    let cookies = browser.cookies();
    let session = cookies
        .iter()
        .find(|cookie| cookie["name"] == "outbox_ui_session")
        .unwrap_or_else(|| panic!("no session cookie: {cookies:?}"));
    assert_eq!(session["httpOnly"], true, "{session}");
    assert_eq!(session["sameSite"], "Strict", "{session}");
    assert_ne!(
        session["value"], TOKEN,
        "the token itself is never a cookie"
    );
    let visible = browser.script("return document.cookie", json!([]));
    assert!(
        !visible
            .as_str()
            .unwrap_or_default()
            .contains("outbox_ui_session"),
        "scripts can read the session: {visible}"
    );

    // 2. The lane's counts are the store's.
    let stats = sandbox.stats();
    assert_eq!(
        (stats.pending, stats.dead_letter, stats.blocked_keys),
        (4, 3, 1),
        "{stats:?}"
    );
    assert_eq!(lane_field(&browser, "pending"), stats.pending.to_string());
    assert_eq!(
        lane_field(&browser, "dead-letters"),
        stats.dead_letter.to_string()
    );
    assert_eq!(
        lane_field(&browser, "blocked-keys"),
        stats.blocked_keys.to_string()
    );
    assert_eq!(lane_field(&browser, "in-flight"), "0");
    assert_eq!(lane_field(&browser, "state"), "running");
    // The blocked key's head is due: its age is shown, not "–".
    assert_ne!(lane_field(&browser, "oldest-due"), "–");

    // Light and dark themes follow the system's preference.
    let background = |browser: &Browser| {
        browser.script(
            "return getComputedStyle(document.body).backgroundColor",
            json!([]),
        )
    };
    browser.prefer_color_scheme("dark");
    assert_eq!(background(&browser), "rgb(13, 17, 23)");
    browser.prefer_color_scheme("light");
    assert_eq!(background(&browser), "rgb(255, 255, 255)");

    // Read-only pages work without the script: the lanes table is in the HTML itself.
    let (status, _, page) = get_page(relay.port, "/ui/lanes", None);
    assert_eq!(status, 303, "no session: sent to the login page");
    assert!(page.is_empty());
}

#[test]
fn requests_without_the_session_or_the_csrf_token_change_nothing_on_sqlite() {
    let sandbox = Sandbox::new();
    enqueue(&sandbox.store, None, json!({"n": 1}), None);
    enqueue(&sandbox.store, None, json!({"n": 2}), None);
    assert_eq!(dead_letter_everything(&sandbox.store, "poison"), 2);
    let relay = sandbox.start_relay();
    let port = relay.port;
    let pause = "lane_target=orders%2Faudit&action=pause&reason=nope";
    let discard = "op=discard-matching&lane_target=orders%2Faudit";

    // Without a session: 401, for every form.
    for (path, form) in [
        ("/ui/lanes/action", pause.to_owned()),
        ("/ui/dead-letters/apply", discard.to_owned()),
        ("/ui/dead-letters/confirm", discard.to_owned()),
    ] {
        let (status, _, _) = post_form(port, path, None, "", &format!("{form}&csrf=0123"));
        assert_eq!(status, 401, "{path} without a session");
    }

    // A session, opened as the browser does: the login form's nonce (double submit), then
    // the token.
    let (_, head, page) = get_page(port, "/ui/login", None);
    let nonce_cookie = set_cookie(&head, "outbox_ui_login").expect("the login nonce cookie");
    let nonce = csrf_in(&page);
    let login = format!("csrf={nonce}&next=%2Fui%2Flanes&token={TOKEN}");
    let (status, _, _) = post_form(port, "/ui/login", None, "", &login);
    assert_eq!(status, 403, "a login without the nonce cookie");
    let (status, head, _) = post_form(port, "/ui/login", Some(&nonce_cookie), "", &login);
    assert_eq!(status, 303, "{head}");
    let session = set_cookie(&head, "outbox_ui_session").expect("a session cookie");
    let (status, _, page) = get_page(port, "/ui/lanes", Some(&session));
    assert_eq!(status, 200);
    let csrf = csrf_in(&page);

    // With the session but without the right CSRF token, from another host or another
    // site: 403.
    let refusals = [
        ("/ui/lanes/action", pause.to_owned(), String::new()),
        (
            "/ui/lanes/action",
            format!("{pause}&csrf=0000"),
            String::new(),
        ),
        ("/ui/dead-letters/apply", discard.to_owned(), String::new()),
        (
            "/ui/dead-letters/apply",
            format!("{discard}&csrf={}", "f".repeat(64)),
            String::new(),
        ),
        (
            "/ui/lanes/action",
            format!("{pause}&csrf={csrf}"),
            "Origin: http://evil.example\r\n".to_owned(),
        ),
    ];
    for (path, form, extra) in &refusals {
        let (status, _, body) = post_form(port, path, Some(&session), extra, form);
        assert_eq!(status, 403, "{path} {form} {extra}: {body}");
    }
    let (status, _, _) = crate::http(
        port,
        &format!(
            "POST /ui/lanes/action HTTP/1.1\r\nHost: evil.example:{port}\r\nCookie: {session}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{pause}&csrf={csrf}",
            pause.len() + 6 + csrf.len()
        ),
    );
    assert_eq!(status, 403, "a Host the listener does not serve");
    let (status, _, _) = crate::http(
        port,
        &format!("GET /ui/lanes HTTP/1.1\r\nHost: evil.example\r\nCookie: {session}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(status, 403, "reads from another Host too");

    // Nothing changed.
    assert!(block_on(sandbox.store.lane_pauses())
        .expect("pauses")
        .is_empty());
    assert_eq!(
        ids_with(&sandbox.store, OutboxStatus::DeadLetter, None).len(),
        2
    );

    // The same requests with the session and the token go through: what was refused was
    // only what was missing.
    let (status, _, _) = post_form(
        port,
        "/ui/lanes/action",
        Some(&session),
        "",
        &format!("{pause}&csrf={csrf}"),
    );
    assert_eq!(status, 303);
    let pauses = block_on(sandbox.store.lane_pauses()).expect("pauses");
    assert_eq!(pauses.len(), 1, "{pauses:?}");
    assert!(pauses[0].paused_by.starts_with("ui:"), "{pauses:?}");
    let (status, _, body) = post_form(
        port,
        "/ui/dead-letters/apply",
        Some(&session),
        "",
        &format!("{discard}&csrf={csrf}"),
    );
    assert_eq!(status, 200, "{body}");
    assert!(ids_with(&sandbox.store, OutboxStatus::DeadLetter, None).is_empty());

    // After logging out the session is gone.
    let (status, _, _) = post_form(
        port,
        "/ui/logout",
        Some(&session),
        "",
        &format!("csrf={csrf}"),
    );
    assert_eq!(status, 303);
    let (status, _, _) = post_form(
        port,
        "/ui/lanes/action",
        Some(&session),
        "",
        &format!("lane_target=orders%2Faudit&action=resume&csrf={csrf}"),
    );
    assert_eq!(status, 401);
    assert_eq!(
        block_on(sandbox.store.lane_pauses()).expect("pauses").len(),
        1
    );
}

#[test]
fn dead_letters_are_found_requeued_discarded_and_keys_unblocked_on_sqlite() {
    let sandbox = Sandbox::new();
    let store = &sandbox.store;
    // Stored as written (spacing and key order), shown pretty-printed, and as stored on
    // request.
    let raw = r#"{"order":4201,  "customer":"customer-42","total":"19.99"}"#;
    let c42_dead = enqueue_text(store, Some("customer-42"), raw, None);
    let c7_dead = enqueue(store, Some("customer-7"), json!({"order": 701}), None);
    for n in 0..4 {
        enqueue(store, Some("bulk-1"), json!({"bulk": n}), None);
    }
    enqueue(store, None, json!({"unkeyed": 1}), None);
    assert_eq!(
        dead_letter_everything(store, "billing API answered 422: unknown customer"),
        7
    );
    let c42_held = enqueue(store, Some("customer-42"), json!({"order": 4202}), None);
    let c7_held = enqueue(store, Some("customer-7"), json!({"order": 702}), None);
    let mut relay = sandbox.start_relay();
    let browser =
        Browser::start("dead_letters_are_found_requeued_discarded_and_keys_unblocked_on_sqlite");
    log_in(&browser, &relay);

    // Deliveries for the chart: the UI counts from its first look at the lane.
    let flowing: Vec<String> = (0..40)
        .map(|n| {
            enqueue(
                store,
                Some(&format!("customer-{}", 100 + n % 8)),
                json!({"order": 9000 + n}),
                None,
            )
        })
        .collect();
    for id in &flowing {
        relay.wait_for_delivery(id);
    }
    browser.goto(&relay.ui("/ui/lanes"));
    browser.reload_until("the chart shows the deliveries", |browser| {
        browser
            .find("svg.chart")
            .attribute("aria-label")
            .unwrap_or_default()
            .contains("40 delivered")
    });
    let shots = screenshot_dir();
    browser.save_screenshot(&shots, "lanes");

    // 4. Find the dead letter by its ordering key, open it, requeue it, see it delivered.
    browser.find("nav a[href=\"/ui/messages\"]").click();
    browser
        .find("select[name=lane_target]")
        .select("orders/audit");
    browser.find("select[name=status]").select("dead_letter");
    browser.find("input[name=key]").send_keys("customer-42");
    browser.find("input[name=key]").send_keys(ENTER);
    let rows = browser.find_all("tbody tr[data-id]");
    assert_eq!(rows.len(), 1, "one dead letter of customer-42");
    browser
        .find(&format!("a[href=\"/ui/messages/{c42_dead}\"]"))
        .click();
    assert_eq!(browser.find("[data-field=status]").text(), "dead_letter");
    assert!(browser
        .find("[data-field=payload]")
        .text()
        .contains("\"customer\": \"customer-42\""));
    assert!(browser
        .find("[data-field=last-error]")
        .text()
        .contains("422"));
    assert!(
        browser
            .find("[data-field=key-head]")
            .text()
            .contains(&c42_held),
        "the key's head is the held message"
    );
    browser.save_screenshot(&shots, "message");
    browser.find("a[href$=\"?raw=1\"]").click();
    assert_eq!(browser.find("[data-field=raw-payload]").text(), raw);
    browser.find("button[value=requeue-selected]").click();
    assert_eq!(
        browser
            .find("#confirm-count")
            .attribute("data-count")
            .as_deref(),
        Some("1")
    );
    browser
        .find("form[action=\"/ui/dead-letters/apply\"] button[type=submit]")
        .click();
    assert_eq!(
        browser.find("#result").attribute("data-count").as_deref(),
        Some("1")
    );
    relay.wait_for_delivery(&c42_dead);
    relay.wait_for_delivery(&c42_held);
    browser.goto(&relay.ui(&format!("/ui/messages/{c42_dead}")));
    browser.reload_until("the requeued dead letter shows delivered", |browser| {
        browser.find("[data-field=status]").text() == "delivered"
    });

    // 6. The blocked key shows, and its action unblocks it.
    browser.find("nav a[href=\"/ui/blocked-keys\"]").click();
    browser
        .find("select[name=lane_target]")
        .select("orders/audit");
    browser.find("button[type=submit].primary").click();
    browser.find("tr[data-key=\"customer-7\"]");
    assert!(
        !browser.has("tr[data-key=\"customer-42\"]"),
        "customer-42 was unblocked already"
    );
    assert!(
        !browser.has("tr[data-key=\"bulk-1\"]"),
        "nothing waits behind bulk-1"
    );
    browser
        .find("tr[data-key=\"customer-7\"] button[value=requeue-selected]")
        .click();
    assert_eq!(
        browser
            .find("#confirm-count")
            .attribute("data-count")
            .as_deref(),
        Some("1")
    );
    browser
        .find("form[action=\"/ui/dead-letters/apply\"] button[type=submit]")
        .click();
    relay.wait_for_delivery(&c7_dead);
    relay.wait_for_delivery(&c7_held);
    browser.goto(&relay.ui("/ui/blocked-keys?lane_target=orders%2Faudit"));
    browser.find("table#blocked-keys");
    assert!(!browser.has("tr[data-key=\"customer-7\"]"));

    // 5. Bulk discard by filter, after a confirmation with the store's count.
    browser.find("nav a[href=\"/ui/dead-letters\"]").click();
    browser
        .find("select[name=lane_target]")
        .select("orders/audit");
    browser.find("input[name=key]").send_keys("bulk-1");
    browser.find("input[name=key]").send_keys(ENTER);
    assert_eq!(browser.find_all("tbody tr[data-id]").len(), 4);
    let bulk = ids_with(store, OutboxStatus::DeadLetter, Some("bulk-1"));
    assert_eq!(bulk.len(), 4);
    browser.find("button[value=discard-matching]").click();
    assert_eq!(
        browser
            .find("#confirm-count")
            .attribute("data-count")
            .as_deref(),
        Some("4")
    );
    // Nothing is discarded before the confirmation.
    assert_eq!(
        ids_with(store, OutboxStatus::DeadLetter, Some("bulk-1")).len(),
        4
    );
    browser
        .find("form[action=\"/ui/dead-letters/apply\"] button[type=submit]")
        .click();
    assert_eq!(
        browser.find("#result").attribute("data-count").as_deref(),
        Some("4")
    );
    assert!(ids_with(store, OutboxStatus::DeadLetter, Some("bulk-1")).is_empty());
    for id in &bulk {
        assert!(block_on(store.get(id.parse().expect("an id")))
            .expect("get")
            .is_none());
    }
    // The unkeyed dead letter was outside the filter: it stays.
    assert_eq!(ids_with(store, OutboxStatus::DeadLetter, None).len(), 1);

    if std::env::var_os("OUTBOX_BLESS").is_some() {
        let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/images");
        for name in ["lanes", "message"] {
            std::fs::copy(
                shots.join(format!("{name}.png")),
                docs.join(format!("ui-{name}.png")),
            )
            .expect("bless a screenshot of the guide");
        }
    }
}
