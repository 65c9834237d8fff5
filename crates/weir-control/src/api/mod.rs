//! The management API of `weir serve`: JSON over HTTP under `/api/v1`, on
//! `[api] listen` (default 127.0.0.1:9190).
//!
//! Reads ([`view`]): `GET /api/v1/status` (everything, for a dashboard),
//! `/vips`, `/vips/{vip}`, `/vips/{vip}/dips`, `/vips/{vip}/dips/{dip}`,
//! `/counters`, `/connections`, `/workers` (the software tier's),
//! `/cluster` (nodes, leader, table versions, connection sync), `/bgp`
//! (neighbours, BFD, each VIP announced or why not).
//!
//! Writes ([`edit`]), each applied through [`Live`] as a reload is, and
//! written back to the configuration file: `POST /vips/{vip}/dips` (add),
//! `DELETE /vips/{vip}/dips/{dip}`, `PUT /vips/{vip}/dips/{dip}/weight`,
//! `POST /vips/{vip}/dips/{dip}/drain`, `POST /reload`, and
//! `POST /node/drain` and `/node/undrain` (withdraw every VIP from the
//! routers, or announce them again; kept across restarts). With a token
//! (`[api] token` or `token_file`; required off loopback) every write needs
//! `Authorization: Bearer <token>`, compared in constant time.
//!
//! The same listener serves the live dashboard ([`weir_http::dashboard`]) at
//! `/` and `/dashboard`, which reads `/api/v1/status`.
//!
//! Errors are `{"error": "..."}`: 400 bad JSON or a bad DIP name, 401 no or
//! a wrong token, 404 no such VIP or DIP, 409 a DIP that exists already or
//! an ambiguous one, 422 a change that would make the configuration
//! invalid, 500 a file that cannot be written. A refused write changes
//! neither the maps nor the file.

pub mod edit;
pub mod view;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Request, State};
use axum::http::{header, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;
use weir_config::{ApiCfg, Config};
use weir_dataplane::maps::Maps;

use crate::live::{ChangeError, Live};
use edit::{DipRef, NewDip, SetWeight};
use view::{Counts, Slots, StatusView, VipView};
use weir_http::{error, Server};

/// The answer to a write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Changed {
    /// What was done, as the log says it.
    pub message: String,
    /// The VIP afterwards (absent for a reload).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vip: Option<VipView>,
}

/// A refused or failed request: its status and what to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error(self.status, self.message)
    }
}

impl From<ChangeError> for ApiError {
    fn from(e: ChangeError) -> ApiError {
        let status = match e {
            ChangeError::NotFound(_) => StatusCode::NOT_FOUND,
            ChangeError::Conflict(_) => StatusCode::CONFLICT,
            ChangeError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ChangeError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.to_string())
    }
}

#[derive(Clone)]
struct Api {
    live: Arc<Live>,
    /// The pinned maps, for reads (none if they could not be opened).
    maps: Option<Arc<Maps>>,
    slots: Arc<Slots>,
    counts: Arc<Counts>,
}

type Reply = Result<Response, ApiError>;

impl Api {
    fn maps(&self) -> Result<&Maps, ApiError> {
        self.maps.as_deref().ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the data plane's pinned maps could not be opened; see weir serve's log",
            )
        })
    }

    fn vips_of(&self, cfg: &Config) -> Result<Vec<VipView>, ApiError> {
        let snap = self.live.shared().snapshot();
        view::vips(
            cfg,
            self.maps()?,
            snap.as_ref(),
            &self.slots,
            self.live.run_dir(),
        )
        .map_err(failed)
    }

    fn vips(&self) -> Result<Vec<VipView>, ApiError> {
        self.vips_of(&self.live.running())
    }

    /// VIP `name` and its index in the running configuration.
    fn vip(&self, name: &str) -> Result<(VipView, usize, Config), ApiError> {
        let cfg = self.live.running();
        let i = edit::find_vip(&cfg, name)?;
        let v = self.vips_of(&cfg)?.swap_remove(i);
        Ok((v, i, cfg))
    }

    fn status(&self) -> Result<StatusView, ApiError> {
        let maps = self.maps()?;
        let snap = self.live.shared().snapshot();
        let run_dir = self.live.run_dir();
        let counters = view::counters(maps).map_err(failed)?;
        let workers = crate::tier::read_workers(run_dir);
        Ok(StatusView {
            at_unix_ms: view::unix_ms(),
            connections: self.counts.get(maps),
            controller: snap.as_ref().map(view::controller),
            vips: view::vips(
                &self.live.running(),
                maps,
                snap.as_ref(),
                &self.slots,
                self.live.run_dir(),
            )
            .map_err(failed)?,
            software_accounting: workers
                .as_ref()
                .zip(crate::tier::read_baseline(run_dir))
                .map(|(w, b)| {
                    let to_software = counters.get("to_software").copied().unwrap_or(0);
                    crate::status::SoftwareAccounting::of(to_software, b, w)
                }),
            counters,
            workers,
            cluster: self.live.shared().cluster.get().map(|c| c.view()),
            xdp_attach: crate::xdp_watch::REPORT.read(run_dir).unwrap_or_default(),
            redirect_targets: crate::redirect_targets::REPORT
                .read(run_dir)
                .unwrap_or_default(),
            bgp: crate::bgp::REPORT
                .read(run_dir)
                .filter(|_| self.live.running().bgp.is_some()),
        })
    }

    /// `weir node drain` / `undrain`: within its next period the speaker
    /// withdraws or de-prefers (`bgp.drain`) every VIP, or announces them
    /// as usual again.
    fn drain(&self, on: bool) -> Reply {
        let running = self.live.running();
        let Some(bgp) = running.bgp.as_ref() else {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "this node announces nothing to drain (no [bgp] in its configuration); drain its \
                 DIPs with `weir dip drain`, or take it out of the router's configuration",
            ));
        };
        crate::bgp::set_drained(self.live.run_dir(), on).map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("recording the drain in the run directory: {e}"),
            )
        })?;
        let message = match (on, bgp.drain.get_ref()) {
            (true, weir_config::DrainMode::Withdraw) => {
                "drained: every VIP is withdrawn from the routers (weir node undrain announces them again)"
            }
            (true, weir_config::DrainMode::GracefulShutdown) => {
                "drained: every VIP is announced de-preferred (GRACEFUL_SHUTDOWN, longer AS path), \
                 so the routers send new flows to the other nodes (weir node undrain restores it)"
            }
            (false, _) => "undrained: the VIPs that pass their checks are announced as usual again",
        };
        log::info!("{message}");
        json(Changed {
            message: message.into(),
            vip: None,
        })
    }

    /// A write: `f` edits the file's document; the answer shows the VIP.
    fn change(
        &self,
        vip: &str,
        f: impl FnOnce(&Config, &mut toml_edit::DocumentMut) -> Result<String, ChangeError>,
    ) -> Reply {
        let (message, _) = self.live.edit(f)?;
        let vip = self.vip(vip).ok().map(|(v, _, _)| v);
        Ok(Json(Changed { message, vip }).into_response())
    }
}

fn no_bgp() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "this node announces no VIPs by BGP (no [bgp] in its configuration)",
    )
}

fn failed(e: anyhow::Error) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("reading the data plane: {e:#}"),
    )
}

/// Runs `f` on the blocking pool: reads walk maps, writes take locks and
/// write files.
async fn blocking(api: Api, f: impl FnOnce(Api) -> Reply + Send + 'static) -> Response {
    match tokio::task::spawn_blocking(move || f(api)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => e.into_response(),
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "the handler panicked"),
    }
}

fn json<T: Serialize>(v: T) -> Reply {
    Ok(Json(v).into_response())
}

fn body<T: DeserializeOwned>(bytes: &[u8], example: &str) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("the body must be JSON like {example}: {e}"),
        )
    })
}

fn dip_ref(s: &str) -> Result<DipRef, ApiError> {
    s.parse()
        .map_err(|e: String| ApiError::new(StatusCode::BAD_REQUEST, e))
}

/// With a token, a write needs `Authorization: Bearer <token>`.
async fn authorize(State(token): State<Option<Arc<str>>>, req: Request, next: Next) -> Response {
    let Some(token) = token else {
        return next.run(req).await;
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(g) if bool::from(g.as_bytes().ct_eq(token.as_bytes())) => next.run(req).await,
        _ => {
            let mut r = error(
                StatusCode::UNAUTHORIZED,
                if given.is_some() {
                    "wrong token"
                } else {
                    "this API needs `Authorization: Bearer <token>` for changes ([api] token)"
                },
            );
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, "Bearer".parse().expect("valid"));
            r
        }
    }
}

const ENDPOINTS: [&str; 18] = [
    "GET /api/v1/status",
    "GET /api/v1/vips",
    "GET /api/v1/vips/{vip}",
    "GET /api/v1/vips/{vip}/dips",
    "GET /api/v1/vips/{vip}/dips/{dip}",
    "GET /api/v1/counters",
    "GET /api/v1/connections",
    "GET /api/v1/workers",
    "GET /api/v1/cluster",
    "GET /api/v1/bgp",
    "POST /api/v1/vips/{vip}/dips",
    "DELETE /api/v1/vips/{vip}/dips/{dip}",
    "PUT /api/v1/vips/{vip}/dips/{dip}/weight",
    "POST /api/v1/vips/{vip}/dips/{dip}/drain",
    "POST /api/v1/reload",
    "POST /api/v1/node/drain",
    "POST /api/v1/node/undrain",
    "GET /api/v1",
];

/// The routes over `live`; `maps` are the pinned maps (for reads).
pub fn router(live: Arc<Live>, maps: Option<Maps>, token: Option<String>) -> Router {
    let api = Api {
        live,
        maps: maps.map(Arc::new),
        slots: Arc::new(Slots::default()),
        counts: Arc::new(Counts::default()),
    };
    type V = UrlPath<String>;
    type VD = UrlPath<(String, String)>;
    let reads = Router::new()
        .route(
            "/api/v1",
            get(|| async { Json(serde_json::json!({ "endpoints": ENDPOINTS })) }),
        )
        .route(
            "/api/v1/status",
            get(|State(a): State<Api>| blocking(a, |a| json(a.status()?))),
        )
        .route(
            "/api/v1/vips",
            get(|State(a): State<Api>| blocking(a, |a| json(a.vips()?))),
        )
        .route(
            "/api/v1/vips/{vip}",
            get(|State(a): State<Api>, UrlPath(v): V| blocking(a, move |a| json(a.vip(&v)?.0))),
        )
        .route(
            "/api/v1/vips/{vip}/dips",
            get(|State(a): State<Api>, UrlPath(v): V| {
                blocking(a, move |a| json(a.vip(&v)?.0.dips))
            }),
        )
        .route(
            "/api/v1/vips/{vip}/dips/{dip}",
            get(|State(a): State<Api>, UrlPath((v, d)): VD| {
                blocking(a, move |a| {
                    let want = dip_ref(&d)?;
                    let (vip, i, cfg) = a.vip(&v)?;
                    let j = edit::find_dip(&cfg.vips[i], want)?;
                    json(&vip.dips[j])
                })
            }),
        )
        .route(
            "/api/v1/counters",
            get(|State(a): State<Api>| {
                blocking(a, |a| json(view::counters(a.maps()?).map_err(failed)?))
            }),
        )
        .route(
            "/api/v1/connections",
            get(|State(a): State<Api>| blocking(a, |a| json(a.counts.get(a.maps()?)))),
        )
        .route(
            "/api/v1/workers",
            get(|State(a): State<Api>| {
                blocking(a, |a| match crate::tier::read_workers(a.live.run_dir()) {
                    Some(w) => json(w),
                    None => Err(ApiError::new(
                        StatusCode::NOT_FOUND,
                        "no software tier runs (dataplane.tier = \"xdp\")",
                    )),
                })
            }),
        )
        .route(
            "/api/v1/cluster",
            get(|State(a): State<Api>| {
                blocking(a, |a| match a.live.shared().cluster.get() {
                    Some(c) => json(c.view()),
                    None => Err(ApiError::new(
                        StatusCode::NOT_FOUND,
                        "this node runs alone (no [cluster] in its configuration)",
                    )),
                })
            }),
        )
        .route(
            "/api/v1/bgp",
            get(|State(a): State<Api>| {
                blocking(a, |a| match crate::bgp::REPORT.read(a.live.run_dir()) {
                    Some(v) if a.live.running().bgp.is_some() => json(v),
                    Some(_) | None => Err(no_bgp()),
                })
            }),
        );
    let writes = Router::new()
        .route(
            "/api/v1/vips/{vip}/dips",
            post(|State(a): State<Api>, UrlPath(v): V, b: Bytes| {
                blocking(a, move |a| {
                    let new: NewDip =
                        body(&b, r#"{"address": "10.0.0.3", "port": 8080, "weight": 1}"#)?;
                    let mut r = a.change(&v, |c, d| edit::add_dip(c, d, &v, &new))?;
                    *r.status_mut() = StatusCode::CREATED;
                    Ok(r)
                })
            }),
        )
        .route(
            "/api/v1/vips/{vip}/dips/{dip}",
            axum::routing::delete(|State(a): State<Api>, UrlPath((v, d)): VD| {
                blocking(a, move |a| {
                    let dip = dip_ref(&d)?;
                    a.change(&v, |c, doc| edit::remove_dip(c, doc, &v, dip))
                })
            }),
        )
        .route(
            "/api/v1/vips/{vip}/dips/{dip}/weight",
            put(|State(a): State<Api>, UrlPath((v, d)): VD, b: Bytes| {
                blocking(a, move |a| {
                    let dip = dip_ref(&d)?;
                    let SetWeight { weight } = body(&b, r#"{"weight": 2}"#)?;
                    a.change(&v, |c, doc| edit::set_weight(c, doc, &v, dip, weight))
                })
            }),
        )
        .route(
            "/api/v1/vips/{vip}/dips/{dip}/drain",
            post(|State(a): State<Api>, UrlPath((v, d)): VD| {
                blocking(a, move |a| {
                    let dip = dip_ref(&d)?;
                    a.change(&v, |c, doc| edit::set_weight(c, doc, &v, dip, 0))
                })
            }),
        )
        .route(
            "/api/v1/reload",
            post(|State(a): State<Api>| {
                blocking(a, |a| {
                    let r = a.live.reload()?;
                    json(Changed {
                        message: format!(
                            "reloaded: +{} -{} VIPs, +{} -{} DIPs",
                            r.vips_added, r.vips_removed, r.dips_added, r.dips_removed
                        ),
                        vip: None,
                    })
                })
            }),
        )
        .route(
            "/api/v1/node/drain",
            post(|State(a): State<Api>| blocking(a, |a| a.drain(true))),
        )
        .route(
            "/api/v1/node/undrain",
            post(|State(a): State<Api>| blocking(a, |a| a.drain(false))),
        )
        .route_layer(middleware::from_fn_with_state(
            token.map(Arc::<str>::from),
            authorize,
        ));
    reads
        .merge(writes)
        .method_not_allowed_fallback(|uri: Uri| async move {
            error(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("{uri} does not take this method; GET /api/v1 lists the endpoints"),
            )
        })
        .fallback(|uri: Uri| async move {
            error(
                StatusCode::NOT_FOUND,
                format!("no {uri} here; GET /api/v1 lists the endpoints"),
            )
        })
        .with_state(api)
        .merge(weir_http::dashboard::routes())
}

/// Starts the API as `[api]` says, on the maps pinned in `pin_dir`. A
/// failure is logged, and `weir serve` runs on without it: the data plane
/// is attached by now.
pub fn start(live: Arc<Live>, cfg: &ApiCfg, pin_dir: &Path) -> Option<Server> {
    let Some(addr) = cfg.addr() else {
        log::info!("api: off ([api] listen = \"off\")");
        return None;
    };
    let token = match cfg.token() {
        Ok(t) => t,
        Err(e) => {
            log::warn!("api not started: {e}");
            return None;
        }
    };
    let maps = match Maps::pinned(pin_dir) {
        Ok(m) => Some(m),
        Err(e) => {
            log::warn!("api: reads unavailable: {e:#}");
            None
        }
    };
    let secured = token.is_some();
    match Server::start(addr, router(live, maps, token)) {
        Ok(s) => {
            log::info!(
                "api on http://{}/api/v1, dashboard on http://{0}/ ({})",
                s.addr,
                if secured {
                    "writes need the token"
                } else {
                    "no token: writes from this host are allowed"
                }
            );
            Some(s)
        }
        Err(e) => {
            log::warn!(
                "api not started: {e:#}; is another weir serve using {addr}? set [api] listen"
            );
            None
        }
    }
}

/// Where a client reaches a server listening on `addr`: an unspecified
/// address (0.0.0.0, ::) means this host's loopback.
pub fn reachable(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        std::net::IpAddr::V4(a) if a.is_unspecified() => {
            SocketAddr::from(([127, 0, 0, 1], addr.port()))
        }
        std::net::IpAddr::V6(a) if a.is_unspecified() => {
            SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, addr.port()))
        }
        _ => addr,
    }
}
