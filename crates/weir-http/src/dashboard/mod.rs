//! The live web dashboard: one page, `/` and `/dashboard`, with its script
//! and style sheet under `/dashboard/`, compiled into the binary
//! (`include_str!`), so that a browser needs nothing but the server it asks.
//!
//! `weir serve` mounts these routes next to its management API, `weir kv`
//! next to its read API. The page polls `/api/v1/status` on the server
//! that sent it, every second, and draws what it finds there: a load
//! balancer's VIPs and DIPs (and its software tier's workers), or a
//! memcached switch's pool. It reads only; its footer says where changes
//! are made: `weir dip` or the API for `weir serve`, the configuration file
//! for `weir kv`.
//!
//! Every answer carries a Content-Security-Policy that allows the page to
//! load scripts, styles and data from its own origin only: even a changed
//! asset cannot make the browser reach another host.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::error;

/// The page's policy: its own origin for everything, no frames, no forms.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
frame-ancestors 'none'";

/// The page (also answered at `/`).
const INDEX: &str = include_str!("assets/index.html");

/// The files under `/dashboard/`: name, content type, content.
const ASSETS: [(&str, &str, &str); 6] = [
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("assets/app.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/app.js"),
    ),
    (
        "chart.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/chart.js"),
    ),
    (
        "dom.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/dom.js"),
    ),
    (
        "serve.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/serve.js"),
    ),
    (
        "kv.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/kv.js"),
    ),
];

fn file(content_type: &'static str, body: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // The assets change with the binary, which an upgrade replaces under
    // the same URLs: have the browser ask again on every load.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

async fn index() -> Response {
    file("text/html; charset=utf-8", INDEX)
}

async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, content_type, body)) => file(content_type, body),
        None => error(
            StatusCode::NOT_FOUND,
            format!("the dashboard has no file {name}; open / or /dashboard"),
        ),
    }
}

/// The dashboard's routes, to merge into a server's router.
pub fn routes() -> Router {
    Router::new()
        .route("/", get(index))
        .route("/dashboard", get(index))
        .route("/dashboard/{file}", get(asset))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Server;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    /// One request on its own connection: the answer's head and body.
    fn fetch(srv: &Server, path: &str) -> (String, String) {
        let mut s = TcpStream::connect(srv.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: weir\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").expect("a head");
        (head.to_ascii_lowercase(), body.to_string())
    }

    #[test]
    fn serves_the_page_and_its_files_with_their_types_and_policy() {
        let srv = Server::start("127.0.0.1:0".parse().unwrap(), routes()).unwrap();
        for path in ["/", "/dashboard"] {
            let (head, body) = fetch(&srv, path);
            assert!(head.starts_with("http/1.1 200"), "{path}: {head}");
            assert!(head.contains("content-type: text/html; charset=utf-8"));
            assert!(head.contains(&format!("content-security-policy: {CSP}")));
            assert_eq!(body, INDEX);
        }
        for (name, content_type, content) in ASSETS {
            let (head, body) = fetch(&srv, &format!("/dashboard/{name}"));
            assert!(head.starts_with("http/1.1 200"), "{name}: {head}");
            assert!(head.contains(&format!("content-type: {content_type}")));
            assert!(head.contains("x-content-type-options: nosniff"));
            assert_eq!(body, content);
        }
        let (head, body) = fetch(&srv, "/dashboard/../Cargo.toml");
        assert!(head.starts_with("http/1.1 404"), "{head}");
        let (head, body2) = fetch(&srv, "/dashboard/nope.js");
        assert!(head.starts_with("http/1.1 404"), "{head}");
        assert!(body2.contains("no file nope.js"), "{body2}");
        assert!(!body.contains("[package]"));
    }

    /// Nothing outside the machine: no absolute URL in any file, and every
    /// script and style the page and the modules load is one of ours.
    #[test]
    fn the_assets_reach_nothing_but_their_own_server() {
        let all = std::iter::once(("index.html", INDEX))
            .chain(ASSETS.iter().map(|(n, _, c)| (*n, *c)))
            .collect::<Vec<_>>();
        for (name, text) in &all {
            // The SVG namespace is a name, never fetched.
            let text = text.replace("\"http://www.w3.org/2000/svg\"", "");
            for bad in ["http://", "https://", "//cdn", "@import", "url("] {
                assert!(!text.contains(bad), "{name} holds {bad}");
            }
        }
        let names: Vec<&str> = ASSETS.iter().map(|(n, _, _)| *n).collect();
        for (name, text) in &all {
            for quote in ['"', '\''] {
                for piece in text.split(quote).skip(1).step_by(2) {
                    let local = piece
                        .strip_prefix("/dashboard/")
                        .or_else(|| piece.strip_prefix("./"));
                    let Some(file) = local else { continue };
                    if file.ends_with(".js") || file.ends_with(".css") {
                        assert!(
                            names.contains(&file),
                            "{name} loads {piece}, which is not served"
                        );
                    }
                }
            }
        }
        assert!(INDEX.contains("/dashboard/app.js") && INDEX.contains("/dashboard/app.css"));
    }
}
