//! `GET /ui`: the fleet page (docs/ui.md). One self-contained HTML file, its script and styles
//! inline and no external asset, built into the binary: the machines that run Flotilla may
//! reach no CDN, and there is no build step.
//!
//! The page carries no fleet data. It asks its user for the bearer token kubectl uses and reads
//! everything through the API with it (lists, watches, `explain`, the failover dry-run), so
//! `/ui` itself is public like the probes ([`super::auth`]), and a token never travels in a
//! URL. The answer's Content-Security-Policy lets the page talk to its own origin only and run
//! only its own script, named by its SHA-256.

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use sha2::{Digest, Sha256};
use std::sync::LazyLock;

/// The path the page is served at.
pub const UI_PATH: &str = "/ui";

/// The page.
pub const FLEET_PAGE: &str = include_str!("ui/fleet.html");

/// The page's one inline script: the text between its `<script>` and `</script>` tags.
fn inline_script(page: &str) -> Option<&str> {
    let start = page.find("<script>")? + "<script>".len();
    let end = start + page[start..].find("</script>")?;
    Some(&page[start..end])
}

/// The Content-Security-Policy of a page whose inline script is `script`: nothing but its own
/// origin for requests and images, that script alone (by hash), inline styles (the page sets
/// widths and colours on elements it draws), no framing, no forms posted anywhere.
pub fn content_security_policy(script: &str) -> String {
    let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(script));
    format!(
        "default-src 'none'; script-src 'sha256-{hash}'; style-src 'unsafe-inline'; \
         connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
         frame-ancestors 'none'"
    )
}

static POLICY: LazyLock<HeaderValue> = LazyLock::new(|| {
    let policy = content_security_policy(inline_script(FLEET_PAGE).unwrap_or_default());
    HeaderValue::from_str(&policy)
        .unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'"))
});

/// Serves the page.
pub async fn fleet_page() -> Response {
    (
        [
            (
                CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
            (axum::http::header::CONTENT_SECURITY_POLICY, POLICY.clone()),
        ],
        FLEET_PAGE,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_has_one_inline_script_and_no_external_asset() {
        let script = inline_script(FLEET_PAGE).expect("an inline <script>");
        assert!(!script.trim().is_empty());
        assert_eq!(
            FLEET_PAGE.matches("<script").count(),
            1,
            "one script, inline"
        );
        for external in [
            "src=\"http",
            "href=\"http",
            "src='http",
            "href='http",
            "@import",
            "//cdn",
        ] {
            assert!(
                !FLEET_PAGE.contains(external),
                "the page refers to {external}"
            );
        }
    }

    #[test]
    fn the_policy_names_the_script_by_its_hash() {
        // (script, what the policy must contain)
        let table = [
            ("let a = 1;", "script-src 'sha256-"),
            ("", "connect-src 'self'"),
            ("x", "frame-ancestors 'none'"),
        ];
        for (script, want) in table {
            let policy = content_security_policy(script);
            assert!(policy.contains(want), "{script:?}: {policy}");
            assert!(!policy.contains("unsafe-eval"), "{policy}");
        }
        assert_ne!(
            content_security_policy("a"),
            content_security_policy("b"),
            "another script, another hash"
        );
    }
}
