//! What a running `weir kv` answers on its metrics address (default
//! 127.0.0.1:9122), on `weir_http`'s server:
//! - `GET /metrics`: Prometheus ([`crate::metrics`]);
//! - `GET /status`: the whole [`Status`] (read by `weir kv status`);
//! - the read-only management API: `GET /api/v1/status` (the same),
//!   `/api/v1/pools`, `/api/v1/pools/{pool}` (servers with their state,
//!   last error and requests; hit ratio) and `/api/v1/hot-keys` (the XDP cache's hot keys and hit
//!   ratio). JSON; errors are `{"error": "..."}`;
//! - the live dashboard (`weir_http::dashboard`) at `/` and `/dashboard`,
//!   which draws the pool from `/api/v1/status`.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use anyhow::{bail, Result};
use axum::extract::Path;
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use weir_http::{client, error, Server};

use crate::status::Status;

/// Reads the running switch's status.
pub type StatusFn = Arc<dyn Fn() -> Status + Send + Sync>;

/// Reads the status on the blocking pool: it takes the hot-key loop's lock
/// and asks the kernel for the program's run time. None: it panicked.
async fn read(status: &StatusFn) -> Option<Status> {
    let status = status.clone();
    tokio::task::spawn_blocking(move || status()).await.ok()
}

fn unreadable() -> Response {
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "reading the status failed",
    )
}

/// The routes, over `status`.
pub fn router(status: StatusFn) -> Router {
    let with = |f: fn(Status) -> Response| {
        let status = status.clone();
        move || {
            let status = status.clone();
            async move { read(&status).await.map_or_else(unreadable, f) }
        }
    };
    let pool = {
        let status = status.clone();
        move |Path(name): Path<String>| {
            let status = status.clone();
            async move {
                let Some(st) = read(&status).await else {
                    return unreadable();
                };
                if st.pool != name {
                    return error(
                        StatusCode::NOT_FOUND,
                        format!("no pool `{name}`; this weir kv runs pool `{}`", st.pool),
                    );
                }
                Json(st.pool_view()).into_response()
            }
        }
    };
    Router::new()
        .route(
            "/metrics",
            get(with(|st| {
                (
                    [(header::CONTENT_TYPE, weir_control::metrics::CONTENT_TYPE)],
                    crate::metrics::render(st),
                )
                    .into_response()
            })),
        )
        .route("/status", get(with(|st| Json(st).into_response())))
        .route("/api/v1/status", get(with(|st| Json(st).into_response())))
        .route(
            "/api/v1/pools",
            get(with(|st| Json(vec![st.pool_view()]).into_response())),
        )
        .route("/api/v1/pools/{pool}", get(pool))
        .route(
            "/api/v1/hot-keys",
            get(with(|st| Json(st.hot_keys_view()).into_response())),
        )
        .merge(weir_http::dashboard::routes())
        .fallback(|uri: Uri| async move {
            error(
                StatusCode::NOT_FOUND,
                format!(
                    "no {uri} here; try /metrics, /status or /api/v1/status, /api/v1/pools, \
                     /api/v1/hot-keys, or / for the dashboard"
                ),
            )
        })
}

/// Serves the routes on a bound listener until dropped.
pub fn serve(listener: TcpListener, status: StatusFn) -> Result<Server> {
    Server::on(listener, router(status))
}

/// GETs `path` from a running switch's metrics address: the body of a 200.
pub fn http_get(addr: SocketAddr, path: &str) -> Result<String> {
    let reply = client::get(addr, path).map_err(|e| {
        anyhow::anyhow!("no weir kv answers on {addr} (is it running? --metrics ADDR): {e:#}")
    })?;
    if reply.status != 200 {
        bail!(
            "{addr}{path} answered {}: is this the metrics address of a weir kv? {:.200}",
            reply.status,
            reply.body
        );
    }
    Ok(reply.body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::tests::sample;
    use crate::status::{HotKeysView, PoolView};

    #[test]
    fn serves_metrics_status_and_the_read_api() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let srv = serve(l, Arc::new(|| sample(true))).unwrap();
        let a = srv.addr;
        assert!(http_get(a, "/metrics")
            .unwrap()
            .contains("weir_kv_requests_total 10\n"));
        let st: Status = serde_json::from_str(&http_get(a, "/status").unwrap()).unwrap();
        assert_eq!(st.pool, "alpha");
        let st: Status = serde_json::from_str(&http_get(a, "/api/v1/status").unwrap()).unwrap();
        assert_eq!(st.stats.requests, 10);
        let pools: Vec<PoolView> =
            serde_json::from_str(&http_get(a, "/api/v1/pools").unwrap()).unwrap();
        assert_eq!(pools, vec![sample(true).pool_view()]);
        let p: PoolView =
            serde_json::from_str(&http_get(a, "/api/v1/pools/alpha").unwrap()).unwrap();
        assert_eq!(p.hit_ratio, Some(0.75));
        let h: HotKeysView =
            serde_json::from_str(&http_get(a, "/api/v1/hot-keys").unwrap()).unwrap();
        assert_eq!(h.hot_keys, vec!["k1".to_string()]);
        let r = client::get(a, "/api/v1/pools/beta").unwrap();
        assert_eq!(r.status, 404);
        assert!(r.json().unwrap()["error"]
            .as_str()
            .unwrap()
            .contains("runs pool `alpha`"));
        let r = client::get(a, "/nope").unwrap();
        assert_eq!(r.status, 404);
        assert!(r.body.contains("/api/v1/pools"), "{}", r.body);
        assert!(http_get(a, "/").unwrap().contains("/dashboard/app.js"));
    }
}
