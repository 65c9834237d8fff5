//! What a running `weir kv` answers on its metrics address (default
//! 127.0.0.1:9122), on `weir_http`'s server:
//! - `GET /metrics`: Prometheus ([`crate::metrics`]);
//! - `GET /status`: the whole [`KvStatus`], every pool (read by
//!   `weir kv status`);
//! - the management API: `GET /api/v1/status` (the same),
//!   `/api/v1/pools`, `/api/v1/pools/{pool}` (servers with their state,
//!   last error and requests; hit ratio) and `/api/v1/hot-keys` (the XDP
//!   cache's hot keys and hit ratio); `POST /api/v1/reload` re-reads the
//!   configuration file and answers what changed, or 409 with why the file
//!   was refused (read by `weir kv reload`). JSON; errors are
//!   `{"error": "..."}`;
//! - the live dashboard (`weir_http::dashboard`) at `/` and `/dashboard`,
//!   which draws the pools from `/api/v1/status`.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use anyhow::{bail, Result};
use axum::extract::Path;
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use weir_http::{client, error, Server};

use crate::status::KvStatus;

/// Reads the running switch's status.
pub type StatusFn = Arc<dyn Fn() -> KvStatus + Send + Sync>;

/// Re-reads the configuration: what changed, or why the file was refused.
pub type ReloadFn = Arc<dyn Fn() -> Result<String> + Send + Sync>;

/// Reads the status on the blocking pool: it takes the hot-key loop's lock
/// and asks the kernel for the program's run time. None: it panicked.
async fn read(status: &StatusFn) -> Option<KvStatus> {
    let status = status.clone();
    tokio::task::spawn_blocking(move || status()).await.ok()
}

fn unreadable() -> Response {
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "reading the status failed",
    )
}

/// The routes, over `status` and `reload`.
pub fn router(status: StatusFn, reload: ReloadFn) -> Router {
    let with = |f: fn(KvStatus) -> Response| {
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
                match st.pool(&name) {
                    Some(p) => Json(p.pool_view()).into_response(),
                    None => {
                        let names: Vec<&str> = st.pools.iter().map(|p| p.pool.as_str()).collect();
                        error(
                            StatusCode::NOT_FOUND,
                            format!(
                                "no pool `{name}`; this weir kv runs {}",
                                names
                                    .iter()
                                    .map(|n| format!("`{n}`"))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        )
                    }
                }
            }
        }
    };
    let reload = move || {
        let reload = reload.clone();
        async move {
            match tokio::task::spawn_blocking(move || reload()).await {
                Ok(Ok(changed)) => {
                    Json(serde_json::json!({ "reloaded": true, "changes": changed }))
                        .into_response()
                }
                Ok(Err(e)) => error(StatusCode::CONFLICT, format!("{e:#}")),
                Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "the reload panicked"),
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
            get(with(|st| {
                Json(st.pools.iter().map(|p| p.pool_view()).collect::<Vec<_>>()).into_response()
            })),
        )
        .route("/api/v1/pools/{pool}", get(pool))
        .route("/api/v1/reload", post(reload))
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
                     /api/v1/hot-keys, POST /api/v1/reload, or / for the dashboard"
                ),
            )
        })
}

/// Serves the routes on a bound listener until dropped.
pub fn serve(listener: TcpListener, status: StatusFn, reload: ReloadFn) -> Result<Server> {
    Server::on(listener, router(status, reload))
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

    /// Two pools, alpha (with the UDP path) and beta.
    fn two_pools() -> KvStatus {
        let mut beta = sample(false);
        beta.pool = "beta".into();
        beta.stats.requests = 4;
        KvStatus::of(vec![sample(true), beta])
    }

    #[test]
    fn serves_metrics_status_and_the_read_api() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let srv = serve(
            l,
            Arc::new(two_pools),
            Arc::new(|| Ok("nothing changed".into())),
        )
        .unwrap();
        let a = srv.addr;
        let metrics = http_get(a, "/metrics").unwrap();
        assert!(
            metrics.contains("weir_kv_requests_total{pool=\"alpha\"} 10\n"),
            "{metrics}"
        );
        assert!(
            metrics.contains("weir_kv_requests_total{pool=\"beta\"} 4\n"),
            "{metrics}"
        );
        let st: KvStatus = serde_json::from_str(&http_get(a, "/status").unwrap()).unwrap();
        let names: Vec<&str> = st.pools.iter().map(|p| p.pool.as_str()).collect();
        assert_eq!(names, ["alpha", "beta"]);
        let st: KvStatus = serde_json::from_str(&http_get(a, "/api/v1/status").unwrap()).unwrap();
        assert_eq!(st.pools[1].stats.requests, 4);
        let pools: Vec<PoolView> =
            serde_json::from_str(&http_get(a, "/api/v1/pools").unwrap()).unwrap();
        assert_eq!(
            pools,
            two_pools()
                .pools
                .iter()
                .map(|p| p.pool_view())
                .collect::<Vec<_>>()
        );
        let p: PoolView =
            serde_json::from_str(&http_get(a, "/api/v1/pools/alpha").unwrap()).unwrap();
        assert_eq!(p.hit_ratio, Some(0.75));
        let p: PoolView =
            serde_json::from_str(&http_get(a, "/api/v1/pools/beta").unwrap()).unwrap();
        assert_eq!(p.requests, 4);
        let h: HotKeysView =
            serde_json::from_str(&http_get(a, "/api/v1/hot-keys").unwrap()).unwrap();
        assert_eq!(h.hot_keys, vec!["k1".to_string()]);
        let r = client::get(a, "/api/v1/pools/gamma").unwrap();
        assert_eq!(r.status, 404);
        assert!(r.json().unwrap()["error"]
            .as_str()
            .unwrap()
            .contains("runs `alpha`, `beta`"));
        let r = client::get(a, "/nope").unwrap();
        assert_eq!(r.status, 404);
        assert!(r.body.contains("/api/v1/pools"), "{}", r.body);
        assert!(http_get(a, "/").unwrap().contains("/dashboard/app.js"));
    }

    #[test]
    fn a_reload_answers_what_changed_or_why_it_was_refused() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let ok = serve(
            l,
            Arc::new(two_pools),
            Arc::new(|| Ok("pool gamma added".into())),
        )
        .unwrap();
        let r = client::Call::new(client::Method::POST, "/api/v1/reload")
            .send(ok.addr)
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json().unwrap()["changes"], "pool gamma added");
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let refused = serve(
            l,
            Arc::new(two_pools),
            Arc::new(|| Err(anyhow::anyhow!("nc.yml:3: alpha.hash: `md6` is unknown"))),
        )
        .unwrap();
        let r = client::Call::new(client::Method::POST, "/api/v1/reload")
            .send(refused.addr)
            .unwrap();
        assert_eq!(r.status, 409, "{}", r.body);
        assert!(r.json().unwrap()["error"]
            .as_str()
            .unwrap()
            .starts_with("nc.yml:3: alpha.hash"));
    }
}
