//! A test's own certificate authority and a server certificate it signs, made with
//! `openssl` (which `.ci/run` installs): the TLS tests trust this CA alone, so nothing on
//! the machine vouches for the server by accident.

use std::path::Path;
use std::process::Command;

/// Runs `openssl args` in `dir`; a failure fails the test with openssl's own words.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs (.ci/run installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Makes, in `dir`, a CA named `ca_name` (`ca.pem`, `ca.key`) and a certificate it signed
/// for localhost and 127.0.0.1 (`{server}.pem`, `{server}.key`), both valid for two days.
pub fn make_certificates(dir: &Path, ca_name: &str, server: &str) {
    let ca_subject = format!("/CN={ca_name}");
    let (key, csr, pem) = (
        format!("{server}.key"),
        format!("{server}.csr"),
        format!("{server}.pem"),
    );
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &ca_subject,
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            &key,
            "-out",
            &csr,
        ],
    );
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .expect("san.ext written");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            &pem,
        ],
    );
}
