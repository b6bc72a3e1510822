//! The web page at `GET /` (docs/http-api.md): a static page and its script and
//! style sheet, compiled into the binary (`include_str!`), so there is no
//! build step, no CDN and nothing to deploy beside the binary. The page
//! reads the public API from the browser (`/v1/boards`, the top stream,
//! `periods`, `around`, the member stream); this module only serves files.
//!
//! Every file is revalidated on each load (`Cache-Control: no-cache`) against
//! an `ETag` computed from its bytes at compile time: a new binary's page is
//! picked up at once, an unchanged one costs a 304. A Content-Security-Policy
//! allows only this origin, so the page cannot pull anything from elsewhere
//! nor run inline script, even if a member id carried markup.

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::state::ApiState;

/// One file of the page.
struct Asset {
    body: &'static str,
    content_type: &'static str,
    /// A quoted strong validator: a hash of `body`.
    etag: &'static str,
}

/// 64-bit FNV-1a, usable in a `const`: the files' validators are computed
/// by the compiler, once.
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    hash
}

/// `"<16 hex digits>"`, the form an `ETag` header takes.
const fn quoted_hex(hash: u64) -> [u8; 18] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [b'"'; 18];
    let mut i = 0;
    while i < 16 {
        out[16 - i] = DIGITS[((hash >> (4 * i)) & 0xf) as usize];
        i += 1;
    }
    out
}

macro_rules! asset {
    ($file:literal, $content_type:literal) => {{
        const BODY: &str = include_str!(concat!("web/", $file));
        const TAG: [u8; 18] = quoted_hex(fnv1a(BODY.as_bytes()));
        Asset {
            body: BODY,
            content_type: $content_type,
            // Hex digits and quotes only: always UTF-8.
            etag: match std::str::from_utf8(&TAG) {
                Ok(tag) => tag,
                Err(_) => "\"0\"",
            },
        }
    }};
}

const INDEX: Asset = asset!("index.html", "text/html; charset=utf-8");
const SCRIPT: Asset = asset!("app.js", "text/javascript; charset=utf-8");
const STYLE: Asset = asset!("style.css", "text/css; charset=utf-8");

/// Same origin only; `data:` images for the empty favicon (which keeps the
/// browser from asking for `/favicon.ico` and logging the 404).
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                   connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
                   form-action 'none'; frame-ancestors 'none'";

/// The page's routes: `/` and its two assets.
pub(super) fn routes() -> Router<ApiState> {
    Router::new()
        .route("/", get(|h: HeaderMap| async move { serve(&INDEX, &h) }))
        .route(
            "/assets/app.js",
            get(|h: HeaderMap| async move { serve(&SCRIPT, &h) }),
        )
        .route(
            "/assets/style.css",
            get(|h: HeaderMap| async move { serve(&STYLE, &h) }),
        )
}

/// The file, or 304 when the browser's copy is current.
fn serve(asset: &'static Asset, request: &HeaderMap) -> Response {
    let current = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| {
            tags.split(',')
                .any(|t| t.trim() == asset.etag || t.trim() == "*")
        });
    let mut response = if current {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        asset.body.into_response()
    };
    let headers = response.headers_mut();
    if !current {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(asset.content_type),
        );
    }
    headers.insert(header::ETAG, HeaderValue::from_static(asset.etag));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        // From the FNV reference (draft-eastlake-fnv): "" and "a".
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(&quoted_hex(0xaf63_dc4c_8601_ec8c), b"\"af63dc4c8601ec8c\"");
    }

    #[test]
    fn a_current_copy_gets_304_and_a_stale_one_the_file() {
        let mut h = HeaderMap::new();
        let fresh = serve(&SCRIPT, &h);
        assert_eq!(fresh.status(), StatusCode::OK);
        assert_eq!(
            fresh.headers()[header::CONTENT_TYPE],
            "text/javascript; charset=utf-8"
        );
        let tag = fresh.headers()[header::ETAG].clone();
        assert_eq!(tag.len(), 18);
        h.insert(header::IF_NONE_MATCH, tag);
        assert_eq!(serve(&SCRIPT, &h).status(), StatusCode::NOT_MODIFIED);
        h.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"x\""));
        assert_eq!(serve(&SCRIPT, &h).status(), StatusCode::OK);
    }

    #[test]
    fn the_page_loads_only_its_own_assets() {
        // No CDN, no external fonts: every src/href is local.
        for asset in [&INDEX, &STYLE] {
            assert!(!asset.body.contains("http://"), "{}", asset.content_type);
            assert!(!asset.body.contains("https://"), "{}", asset.content_type);
        }
        assert!(INDEX.body.contains("/assets/app.js"));
        assert!(INDEX.body.contains("/assets/style.css"));
    }
}
