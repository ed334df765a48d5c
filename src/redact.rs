//! Secrets out of every URL the crate prints: a database URL, a sink's URL (webhook, Redis,
//! AMQP, NATS), in an error, a log line, a dead letter's `last_error` or an event.
//!
//! [`redact`] hides the user info (user and password) and the value of every query
//! parameter and the fragment, where tokens and API keys travel (`?token=…`,
//! `?api_key=…`, `#access_token=…`); scheme, host, port, path and the parameters' names
//! stay, since they are what an operator needs to tell which target failed. A URL the `url`
//! crate can parse is rewritten through it; one it cannot (an unencoded `/` or `?` in the
//! password, a template's `{placeholder}` in the host, the keyword form
//! `host=… password=…`) is hidden conservatively, since where its secrets end is exactly
//! what cannot be known.

use url::Url;

/// What a secret is replaced with.
const HIDDEN: &str = "***";

/// `text` (a URL or connection string, valid or not) with its secrets replaced by `***`:
/// the user info, every query parameter's value, the fragment, and the value of any
/// `…password…=` parameter of the keyword form. Text with nothing to hide comes back as
/// it was (a template's `{lane}` is not percent-encoded).
pub(crate) fn redact(text: &str) -> String {
    // A list of servers (`nats://a:4222,nats://b:4222`): each one on its own.
    if text.contains(',') && text.split(',').all(|part| part.contains("://")) {
        return text.split(',').map(redact).collect::<Vec<_>>().join(",");
    }
    match Url::parse(text.trim()) {
        Ok(url) if url.has_authority() => redact_url(url).unwrap_or_else(|| text.to_owned()),
        _ => redact_unparsed(text),
    }
}

/// The URL rewritten with its secrets hidden; `None` when it holds none.
fn redact_url(mut url: Url) -> Option<String> {
    let has_user_info = !url.username().is_empty() || url.password().is_some();
    if !has_user_info && url.query().is_none() && url.fragment().is_none() {
        return None;
    }
    if has_user_info {
        // Only fails for URLs without a host, which `has_authority` ruled out.
        let _ = url.set_username(HIDDEN);
        if url.password().is_some() {
            let _ = url.set_password(Some(HIDDEN));
        }
    }
    if let Some(query) = url.query() {
        let query = hide_query_values(query);
        url.set_query(Some(&query));
    }
    if url.fragment().is_some() {
        url.set_fragment(Some(HIDDEN));
    }
    Some(url.to_string())
}

/// Text the `url` crate cannot parse: parameter values named like a password are hidden;
/// then, in `scheme://…` shape, the query's values and the fragment, and everything before
/// the last `@` of the authority (a password may hold an unencoded `/`, `?` or `@`).
fn redact_unparsed(text: &str) -> String {
    let text = hide_password_parameters(text);
    let Some((scheme, rest)) = text.split_once("://") else {
        return text;
    };
    let (rest, user_info) = match rest.rsplit_once('@') {
        Some((user_info, host)) => (host, !user_info.is_empty()),
        None => (rest, false),
    };
    let (rest, fragment) = match rest.split_once('#') {
        Some((rest, _)) => (rest, format!("#{HIDDEN}")),
        None => (rest, String::new()),
    };
    let rest = match rest.split_once('?') {
        Some((before, query)) => format!("{before}?{}", hide_query_values(query)),
        None => rest.to_owned(),
    };
    let user_info = if user_info {
        format!("{HIDDEN}@")
    } else {
        String::new()
    };
    format!("{scheme}://{user_info}{rest}{fragment}")
}

/// A query with every value hidden: `name=value` becomes `name=***`, and a segment without
/// `=` (which may be a bare token) becomes `***`.
fn hide_query_values(query: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) => format!("{name}={HIDDEN}"),
            None if pair.is_empty() => String::new(),
            None => HIDDEN.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// Hides the value of every `…password…=value` in `text`: a quoted value up to its
/// closing quote, otherwise up to the next whitespace or `&`.
fn hide_password_parameters(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while let Some(found) = lower[at..].find("password") {
        let name_end = at + found + "password".len();
        let after_name = &text[name_end..];
        let spaces = after_name.len() - after_name.trim_start().len();
        let Some(value) = after_name.trim_start().strip_prefix('=') else {
            out.push_str(&text[at..name_end]);
            at = name_end;
            continue;
        };
        let value_start = name_end + spaces + 1 + (value.len() - value.trim_start().len());
        let value = &text[value_start..];
        let value_len = match value.strip_prefix('\'') {
            Some(quoted) => quoted.find('\'').map_or(value.len(), |closing| closing + 2),
            None => value
                .find(|c: char| c.is_whitespace() || c == '&')
                .unwrap_or(value.len()),
        };
        out.push_str(&text[at..value_start]);
        out.push_str(HIDDEN);
        at = value_start + value_len;
    }
    out.push_str(&text[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape a secret can come in; none may be printed.
    #[test]
    fn no_url_shape_prints_its_secrets() {
        for (input, shown) in [
            (
                "postgres://app:S3cr3t@127.0.0.1:1/db",
                "postgres://***:***@127.0.0.1:1/db",
            ),
            (
                "postgres://app:S3cr3t/Pw@127.0.0.1:1/db",
                "postgres://***@127.0.0.1:1/db",
            ),
            (
                "postgres://app:S3cr3t?Pw@127.0.0.1:1/db",
                "postgres://***@127.0.0.1:1/db",
            ),
            (
                "postgres://app:S3c@r3t@127.0.0.1:1/db",
                "postgres://***:***@127.0.0.1:1/db",
            ),
            (
                "postgresql://u:S3cr3t%40x@db:6543/app?sslmode=disable",
                "postgresql://***:***@db:6543/app?sslmode=***",
            ),
            (
                "postgres://app@127.0.0.1:1/db?password=S3cr3t&sslmode=require",
                "postgres://***@127.0.0.1:1/db?password=***&sslmode=***",
            ),
            (
                "postgres://app@127.0.0.1:notaport/db?password=S3cr3t",
                "postgres://***@127.0.0.1:notaport/db?password=***",
            ),
            (
                "postgres://app@[::1/db?sslmode=require&PASSWORD=S3cr3t",
                "postgres://***@[::1/db?sslmode=***&PASSWORD=***",
            ),
            (
                "host=127.0.0.1 user=app password=S3cr3t dbname=db",
                "host=127.0.0.1 user=app password=*** dbname=db",
            ),
            (
                "host=127.0.0.1 password = 'S3c r3t' dbname=db",
                "host=127.0.0.1 password = *** dbname=db",
            ),
            (
                "host=db sslpassword=S3cr3t password=S3cr3t",
                "host=db sslpassword=*** password=***",
            ),
            (
                "http://S3cuser:S3cr3tPw@127.0.0.1:9/hook?token=S3c&x=1#S3cfrag",
                "http://***:***@127.0.0.1:9/hook?token=***&x=***#***",
            ),
            (
                "https://hooks.example.com/{lane}?S3ctoken",
                "https://hooks.example.com/%7Blane%7D?***",
            ),
            (
                "https://S3c:S3c@{lane}.example.com/x?key=S3c#S3c",
                "https://***:***@{lane}.example.com/x?key=***#***",
            ),
            (
                "redis://:S3cr3t@127.0.0.1:6379/0",
                "redis://***:***@127.0.0.1:6379/0",
            ),
            (
                "amqp://S3cuser@127.0.0.1:5672/%2f",
                "amqp://***@127.0.0.1:5672/%2f",
            ),
            (
                "nats://S3c:S3c@127.0.0.1:4222,nats://S3c@h:1",
                "nats://***:***@127.0.0.1:4222,nats://***@h:1",
            ),
            // Nothing to hide: as written, templates included.
            ("postgres://db.internal/app", "postgres://db.internal/app"),
            (
                "https://hooks.example.com/{lane}/{target}",
                "https://hooks.example.com/{lane}/{target}",
            ),
            ("sqlite:outbox.db", "sqlite:outbox.db"),
        ] {
            let redacted = redact(input);
            assert!(!redacted.contains("S3c"), "{input} -> {redacted}");
            assert_eq!(redacted, shown, "{input}");
        }
    }
}
