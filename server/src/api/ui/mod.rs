//! `GET /ui`: the fleet page (docs/ui.md), and `GET /ui/<file>`: the ES modules and the
//! stylesheet it loads. `fleet.html` names one module, `fleet.js`, which imports the others
//! (`api.js` for the token, the calls and the watches; `state.js` for the page's state and its
//! updates; one module per view, each a pure function from that state to markup) and
//! `fleet.css`. Every file is built into the binary as it is written: the machines that run
//! Flotilla may reach no CDN, and there is no build step.
//!
//! The page carries no fleet data. It asks its user for the bearer token kubectl uses and reads
//! everything through the API with it (lists, watches, `explain`, the failover dry-run), so
//! `/ui` and its files are public like the probes ([`crate::api::access::auth`], [`is_public`]), and a token
//! never travels in a URL. The answers' Content-Security-Policy ([`CONTENT_SECURITY_POLICY`])
//! lets the page talk to its own origin only and run and style itself only from the files
//! served here: no inline script, no `eval`, no inline style.

use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY as CSP_HEADER, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS,
};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// The path the page is served at.
pub const UI_PATH: &str = "/ui";

/// The page.
pub const FLEET_PAGE: &str = include_str!("fleet.html");

/// One file the page loads, served at its `path`.
#[derive(Debug)]
pub struct Asset {
    /// Where it is served: `/ui/<file name>`.
    pub path: &'static str,
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// The file, as written in `server/src/api/ui/`.
    pub body: &'static str,
}

const JAVASCRIPT: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const HTML: &str = "text/html; charset=utf-8";

/// The [`Asset`]s of files in `ui/`, each served at `/ui/<file>`, grouped by content type.
macro_rules! assets {
    ($($content_type:ident: $($file:literal),+);+) => {
        [$($(Asset {
            path: concat!("/ui/", $file),
            content_type: $content_type,
            body: include_str!($file),
        }),+),+]
    };
}

/// Every file the page loads: its modules (the one `fleet.html` names first) and its
/// stylesheet.
pub const ASSETS: &[Asset] = &assets![
    JAVASCRIPT: "fleet.js", "api.js", "hooks.js", "state.js", "format.js", "brakes.js",
        "members.js", "matrix.js", "binding.js", "history.js", "whatif.js", "events.js";
    CSS: "fleet.css"
];

/// The Content-Security-Policy of the page and its files: requests to its own origin only
/// (`connect-src 'self'`: the page's `fetch` calls, since `default-src` is `'none'`), scripts
/// and stylesheets from its own origin only (no inline script or style, no `eval`), images
/// from its own origin or `data:` (the empty favicon), no `<base>`, no form posted anywhere,
/// no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// Whether `path` is the page or one of its files: answered without a token, as they hold no
/// data.
pub fn is_public(path: &str) -> bool {
    path == UI_PATH || ASSETS.iter().any(|asset| asset.path == path)
}

/// The routes of the page and its files.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    ASSETS.iter().fold(
        Router::new().route(UI_PATH, get(|| async { serve(HTML, FLEET_PAGE) })),
        |router, asset| {
            router.route(
                asset.path,
                get(move || async move { serve(asset.content_type, asset.body) }),
            )
        },
    )
}

/// One file of the page, with its type and the page's policy; asked again on every load
/// (`no-cache`), so a new server's page never runs an old module.
fn serve(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
            (
                CSP_HEADER,
                HeaderValue::from_static(CONTENT_SECURITY_POLICY),
            ),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt;

    /// The files a text refers to with `attribute="/ui/..."` (the page) or `from "./..."`
    /// (a module's imports), as served paths.
    fn references(text: &str, prefix: &str, served_as: &str) -> Vec<String> {
        text.match_indices(prefix)
            .filter_map(|(at, _)| {
                let rest = &text[at + prefix.len()..];
                rest.find('"')
                    .map(|end| format!("{served_as}{}", &rest[..end]))
            })
            .collect()
    }

    #[test]
    fn the_page_has_no_inline_script_or_style_and_no_external_asset() {
        assert_eq!(
            references(FLEET_PAGE, "<script type=\"module\" src=\"/ui/", "/ui/"),
            vec!["/ui/fleet.js"],
            "one script, the entry module"
        );
        assert_eq!(FLEET_PAGE.matches("<script").count(), 1, "no inline script");
        for inline in [
            "<style",
            "style=",
            " onclick=",
            " onchange=",
            " oninput=",
            " onload=",
        ] {
            assert!(!FLEET_PAGE.contains(inline), "the page has {inline}");
        }
        let texts = std::iter::once(FLEET_PAGE).chain(ASSETS.iter().map(|a| a.body));
        for text in texts {
            for external in [
                "src=\"http",
                "href=\"http",
                "src='http",
                "href='http",
                "@import",
                "//cdn",
                "eval(",
                "new Function",
            ] {
                assert!(!text.contains(external), "the page refers to {external}");
            }
        }
    }

    #[test]
    fn every_module_checks_its_types_and_imports_only_served_modules() {
        let served: Vec<&str> = ASSETS.iter().map(|a| a.path).collect();
        let mut wanted = references(FLEET_PAGE, "=\"/ui/", "/ui/");
        for asset in ASSETS {
            if asset.content_type == JAVASCRIPT {
                assert!(
                    asset.body.starts_with("// @ts-check\n"),
                    "{} does not start with // @ts-check",
                    asset.path
                );
                // The state, the views and their helpers touch no page: pure functions.
                if !["/ui/fleet.js", "/ui/api.js", "/ui/hooks.js"].contains(&asset.path) {
                    for page in ["document", "window", "innerHTML", "fetch("] {
                        assert!(!asset.body.contains(page), "{} uses {page}", asset.path);
                    }
                }
                wanted.extend(references(asset.body, "from \"./", "/ui/"));
            }
        }
        for path in &wanted {
            assert!(served.contains(&path.as_str()), "{path} is not served");
        }
        for path in &served {
            assert!(
                wanted.contains(&path.to_string()),
                "{path} is served but never loaded"
            );
        }
    }

    #[test]
    fn the_policy_runs_only_the_servers_own_script() {
        for want in [
            "default-src 'none'",
            "script-src 'self';",
            "style-src 'self';",
            "connect-src 'self'",
            "frame-ancestors 'none'",
        ] {
            assert!(
                CONTENT_SECURITY_POLICY.contains(want),
                "{want}: {CONTENT_SECURITY_POLICY}"
            );
        }
        for never in ["unsafe-inline", "unsafe-eval", "sha256-", "http"] {
            assert!(
                !CONTENT_SECURITY_POLICY.contains(never),
                "{never}: {CONTENT_SECURITY_POLICY}"
            );
        }
        assert!(HeaderValue::from_str(CONTENT_SECURITY_POLICY).is_ok());
    }

    #[tokio::test]
    async fn the_page_and_its_files_are_served_with_their_type_and_the_policy() {
        // (path, Content-Type)
        let table =
            std::iter::once((UI_PATH, HTML)).chain(ASSETS.iter().map(|a| (a.path, a.content_type)));
        for (path, content_type) in table {
            assert!(is_public(path), "{path}");
            let request = Request::get(path).body(Body::empty()).expect("a request");
            let answer = routes::<()>().oneshot(request).await.expect("an answer");
            assert_eq!(answer.status(), StatusCode::OK, "{path}");
            let header = |name| answer.headers().get(name).and_then(|v| v.to_str().ok());
            assert_eq!(header(CONTENT_TYPE), Some(content_type), "{path}");
            assert_eq!(header(CSP_HEADER), Some(CONTENT_SECURITY_POLICY), "{path}");
            assert_eq!(header(X_CONTENT_TYPE_OPTIONS), Some("nosniff"), "{path}");
        }
        assert!(!is_public("/ui/nothing.js"));
        assert!(!is_public("/ui/"));
    }
}
