//! The dashboard: `GET /` (the page) and `GET /dashboard/{*path}` (its
//! scripts, style sheet and the hooks' example requests), every file
//! embedded in the binary at build time from `assets/dashboard/` — nothing is
//! read from disk, fetched from another host or built by the user.
//!
//! The page carries no data, so both routes are open: everything it shows
//! it reads from the ordinary API routes, with the token the operator types
//! in when a read answers 401 (the same rules as any client). This module
//! must never answer anything but these fixed files: no template filled
//! with state, no path that reaches the filesystem.

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::body::JsonReply;

/// One embedded file.
pub(crate) struct Asset {
    /// Below `/dashboard/` (`app.js`, `views/plugins.js`).
    pub path: &'static str,
    pub content_type: &'static str,
    pub body: &'static [u8],
}

macro_rules! asset {
    ($path:literal, $type:expr) => {
        Asset {
            path: $path,
            content_type: $type,
            body: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/assets/dashboard/", $path)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file of the dashboard (`index.html` is also `GET /`).
pub(crate) const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("dom.js", JS),
    asset!("chart.js", JS),
    asset!("hooks.json", "application/json"),
    asset!("views/plugins.js", JS),
    asset!("views/health.js", JS),
    asset!("views/logs.js", JS),
    asset!("views/turns.js", JS),
    asset!("views/memory.js", JS),
    asset!("views/agent.js", JS),
    asset!("panel.html", "text/html; charset=utf-8"),
    asset!("panel.js", JS),
];

/// The page's own policy: its scripts and styles only from this origin (no
/// inline script, so a plugin's text shown in the page cannot run), data
/// only from this daemon, FaustBot panels in frames of this origin, and no
/// other site may frame the page (its buttons act).
const PAGE_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; frame-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'; \
     object-src 'none'";

/// A FaustBot panel's frame (`panel.html`, sandboxed by the page without
/// `allow-same-origin`): the plugin's scripts and styles from this daemon,
/// no request of their own (their `communicate` calls go through the page),
/// framed only by the dashboard.
const PANEL_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
     img-src 'self' data:; font-src 'self'; connect-src 'none'; frame-ancestors 'self'; base-uri 'none'; \
     form-action 'none'";

/// `GET /`: the page.
pub(crate) async fn index(headers: HeaderMap) -> Response {
    match find("index.html") {
        Some(asset) => serve(asset, &headers),
        None => missing("index.html"),
    }
}

/// `GET /dashboard/{*path}`: one of the page's files, or 404.
pub(crate) async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Response {
    match find(&path) {
        Some(asset) => serve(asset, &headers),
        None => missing(&path),
    }
}

fn find(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.path == path)
}

fn missing(path: &str) -> Response {
    let names: Vec<&str> = ASSETS.iter().map(|a| a.path).collect();
    let hint = crate::hint::did_you_mean(path, names.iter().copied());
    JsonReply::error(StatusCode::NOT_FOUND, format!("the dashboard has no file {path}{hint}")).into_response()
}

/// The file with its type; `304` when the browser holds this build's copy
/// (the tag is the file's hash, so a new binary's files are fetched anew).
fn serve(asset: &'static Asset, headers: &HeaderMap) -> Response {
    let tag = etag(asset);
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, asset.content_type)], asset.body).into_response()
    };
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&tag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    if asset.path == "index.html" {
        h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(PAGE_POLICY));
        h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    }
    if asset.path == "panel.html" {
        h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(PANEL_POLICY));
    }
    response
}

/// `"<first 16 hex digits of the sha256>"`, computed once per file.
fn etag(asset: &'static Asset) -> String {
    use sha2::Digest;
    static TAGS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        ASSETS.iter().map(|a| format!("\"{}\"", &hex::encode(sha2::Sha256::digest(a.body))[..16])).collect()
    });
    ASSETS.iter().position(|a| std::ptr::eq(a, asset)).and_then(|i| tags.get(i).cloned()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file under `assets/dashboard/` is embedded, and every module a
    /// script imports is one of them (a file added but not listed would be
    /// a 404 in the browser).
    #[test]
    fn every_asset_file_is_embedded_and_every_import_resolves() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/dashboard");
        let mut on_disk = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    on_disk.push(path.strip_prefix(&root).unwrap().to_string_lossy().into_owned());
                }
            }
        }
        on_disk.sort();
        let mut listed: Vec<String> = ASSETS.iter().map(|a| a.path.to_owned()).collect();
        listed.sort();
        assert_eq!(on_disk, listed, "assets/dashboard/ and ASSETS differ");
        for a in ASSETS.iter().filter(|a| a.path.ends_with(".js") || a.path.ends_with(".html")) {
            let text = std::str::from_utf8(a.body).unwrap();
            for piece in text.split("from '").skip(1).chain(text.split("src=\"/dashboard/").skip(1)) {
                let target = piece.split(['\'', '"']).next().unwrap();
                let resolved = if let Some(rel) = target.strip_prefix("./") {
                    let dir = a.path.rsplit_once('/').map(|(d, _)| format!("{d}/")).unwrap_or_default();
                    format!("{dir}{rel}")
                } else if let Some(rel) = target.strip_prefix("../") {
                    rel.to_owned()
                } else {
                    target.to_owned()
                };
                assert!(find(&resolved).is_some(), "{} imports {target} ({resolved}), which is not embedded", a.path);
            }
        }
    }

    #[test]
    fn tags_differ_per_file_and_a_held_copy_is_304() {
        let index = find("index.html").unwrap();
        let app = find("app.js").unwrap();
        assert_ne!(etag(index), etag(app));
        assert!(etag(index).starts_with('"'));
        let mut headers = HeaderMap::new();
        headers.insert(header::IF_NONE_MATCH, HeaderValue::from_str(&etag(app)).unwrap());
        assert_eq!(serve(app, &headers).status(), StatusCode::NOT_MODIFIED);
        assert_eq!(serve(index, &headers).status(), StatusCode::OK);
        let page = serve(index, &HeaderMap::new());
        assert!(page.headers().get(header::CONTENT_SECURITY_POLICY).is_some());
        assert_eq!(page.headers().get(header::CONTENT_TYPE).unwrap(), "text/html; charset=utf-8");
    }
}
