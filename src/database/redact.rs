//! Passwords out of everything printed about a database URL. A URL the `url` crate can
//! parse is rewritten through it; one it cannot (an unencoded `/` or `?` in the password,
//! the keyword form `host=… password=…`) is hidden conservatively, since where its
//! password ends is exactly what cannot be known.

use url::Url;

/// What a password is replaced with.
const HIDDEN: &str = "***";

/// `text` (a database URL or connection string, valid or not) with every password in it
/// replaced by `***`: the user info's password, and the value of any parameter whose
/// name contains `password` (`password`, `sslpassword`), in a query or in keyword form.
pub(crate) fn redact(text: &str) -> String {
    match Url::parse(text.trim()) {
        Ok(url) if url.has_authority() => redact_url(url),
        _ => redact_unparsed(text),
    }
}

/// The host and port of a URL, for messages; `None` if the `url` crate cannot parse it.
pub(crate) fn host_and_port(text: &str, default_port: u16) -> Option<String> {
    let url = Url::parse(text.trim()).ok()?;
    let host = url.host_str().filter(|h| !h.is_empty())?;
    Some(format!("{host}:{}", url.port().unwrap_or(default_port)))
}

/// Whether a URL names its host: in the authority, or as a `host` parameter (a Unix
/// socket directory). `None` if the `url` crate cannot parse it.
pub(crate) fn names_a_host(text: &str) -> Option<bool> {
    let url = Url::parse(text.trim()).ok()?;
    let in_authority = url.host_str().is_some_and(|h| !h.is_empty());
    Some(in_authority || url.query_pairs().any(|(name, _)| name == "host"))
}

fn is_secret(name: &str) -> bool {
    name.to_ascii_lowercase().contains("password")
}

fn redact_url(mut url: Url) -> String {
    if url.password().is_some() {
        // Only fails for URLs without a host, which `has_authority` ruled out.
        let _ = url.set_password(Some(HIDDEN));
    }
    if url.query_pairs().any(|(name, _)| is_secret(&name)) {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(name, value)| {
                let value = if is_secret(&name) {
                    HIDDEN.to_owned()
                } else {
                    value.into_owned()
                };
                (name.into_owned(), value)
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    url.to_string()
}

/// Text the `url` crate cannot parse: parameter values named like a password are hidden,
/// then, in `scheme://…@host` shape, everything between the user name and the last `@`
/// (a password may hold an unencoded `/`, `?` or `@`).
fn redact_unparsed(text: &str) -> String {
    let text = hide_password_parameters(text);
    let Some((scheme, rest)) = text.split_once("://") else {
        return text;
    };
    let Some((user_info, host)) = rest.rsplit_once('@') else {
        return text;
    };
    match user_info.split_once(':') {
        Some((user, _)) if !user.contains(['/', '?']) => {
            format!("{scheme}://{user}:{HIDDEN}@{host}")
        }
        // A user name alone: nothing secret in it.
        None if !user_info.contains(['/', '?']) => format!("{scheme}://{user_info}@{host}"),
        // Where the user info starts is unclear: hide all of it.
        _ => format!("{scheme}://{HIDDEN}@{host}"),
    }
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

    /// Every shape a password can come in; none may be printed.
    #[test]
    fn no_url_shape_prints_its_password() {
        for (input, shown) in [
            (
                "postgres://app:S3cr3t@127.0.0.1:1/db",
                "postgres://app:***@127.0.0.1:1/db",
            ),
            (
                "postgres://app:S3cr3t/Pw@127.0.0.1:1/db",
                "postgres://app:***@127.0.0.1:1/db",
            ),
            (
                "postgres://app:S3cr3t?Pw@127.0.0.1:1/db",
                "postgres://app:***@127.0.0.1:1/db",
            ),
            (
                "postgres://app:S3c@r3t@127.0.0.1:1/db",
                "postgres://app:***@127.0.0.1:1/db",
            ),
            (
                "postgresql://u:S3cr3t%40x@db:6543/app?sslmode=disable",
                "postgresql://u:***@db:6543/app?sslmode=disable",
            ),
            (
                "postgres://app@127.0.0.1:1/db?password=S3cr3t&sslmode=require",
                "postgres://app@127.0.0.1:1/db?password=***&sslmode=require",
            ),
            (
                "postgres://app@127.0.0.1:notaport/db?password=S3cr3t",
                "postgres://app@127.0.0.1:notaport/db?password=***",
            ),
            (
                "postgres://app@[::1/db?sslmode=require&PASSWORD=S3cr3t",
                "postgres://app@[::1/db?sslmode=require&PASSWORD=***",
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
            ("postgres://db.internal/app", "postgres://db.internal/app"),
            ("sqlite:outbox.db", "sqlite:outbox.db"),
        ] {
            let redacted = redact(input);
            assert!(!redacted.contains("S3c"), "{input} -> {redacted}");
            assert_eq!(redacted, shown, "{input}");
        }
    }

    #[test]
    fn host_and_port_come_from_the_url_crate() {
        assert_eq!(
            host_and_port("postgres://u:p@db:6543/app", 5432).as_deref(),
            Some("db:6543")
        );
        assert_eq!(
            host_and_port("postgres://[::1]/app", 5432).as_deref(),
            Some("[::1]:5432")
        );
        assert_eq!(host_and_port("postgres://app:S3cr3t/Pw@h/db", 5432), None);
    }
}
