//! A blocking HTTP/1.1 client for weir's own command-line tools (`weir dip`,
//! `weir kv status`) and tests: one request on one connection, through
//! hyper's client connection on a current-thread runtime made for the call,
//! with a deadline for the whole exchange and a bound on the reply.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use axum::body::Bytes;
use axum::http::{header, Request};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

pub use axum::http::Method;

/// Longest reply read.
pub const MAX_REPLY: usize = 16 << 20;
/// Deadline of an exchange unless the caller gives one.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);

/// A reply: its status and its body as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub body: String,
}

impl Reply {
    /// The body as JSON.
    pub fn json(&self) -> Result<serde_json::Value> {
        serde_json::from_str(&self.body)
            .with_context(|| format!("the reply is not JSON: {:.200}", self.body))
    }
}

/// What to send.
#[derive(Debug, Clone)]
pub struct Call<'a> {
    pub method: Method,
    pub path: &'a str,
    /// Sent as `Authorization: Bearer <token>`.
    pub token: Option<&'a str>,
    /// Sent as `application/json`.
    pub body: Option<Vec<u8>>,
    pub deadline: Duration,
}

impl<'a> Call<'a> {
    pub fn new(method: Method, path: &'a str) -> Call<'a> {
        Call {
            method,
            path,
            token: None,
            body: None,
            deadline: DEFAULT_DEADLINE,
        }
    }

    pub fn get(path: &'a str) -> Call<'a> {
        Call::new(Method::GET, path)
    }

    pub fn token(mut self, token: Option<&'a str>) -> Call<'a> {
        self.token = token;
        self
    }

    pub fn json(self, body: serde_json::Value) -> Call<'a> {
        self.body(body.to_string().into_bytes())
    }

    /// A body sent as JSON as it is (the API's tests send broken ones).
    pub fn body(mut self, body: Vec<u8>) -> Call<'a> {
        self.body = Some(body);
        self
    }

    /// Sends the call to `addr` and reads the whole reply.
    pub fn send(&self, addr: SocketAddr) -> Result<Reply> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the HTTP client's runtime")?;
        rt.block_on(async {
            tokio::time::timeout(self.deadline, self.exchange(addr))
                .await
                .map_err(|_| {
                    anyhow!(
                        "{} http://{addr}{}: no answer within {:?}",
                        self.method,
                        self.path,
                        self.deadline
                    )
                })?
        })
    }

    async fn exchange(&self, addr: SocketAddr) -> Result<Reply> {
        let stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .with_context(|| format!("talking to {addr}"))?;
        tokio::spawn(conn);
        let mut req = Request::builder()
            .method(self.method.clone())
            .uri(self.path)
            .header(header::HOST, addr.to_string());
        if let Some(t) = self.token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let body = match &self.body {
            Some(b) => {
                req = req.header(header::CONTENT_TYPE, "application/json");
                Bytes::from(b.clone())
            }
            None => Bytes::new(),
        };
        let req = req.body(Full::new(body)).context("building the request")?;
        let resp = sender
            .send_request(req)
            .await
            .with_context(|| format!("{} http://{addr}{}", self.method, self.path))?;
        let status = resp.status().as_u16();
        let body = Limited::new(resp.into_body(), MAX_REPLY)
            .collect()
            .await
            .map_err(|e| anyhow!("reading the reply from {addr}: {e}"))?
            .to_bytes();
        Ok(Reply {
            status,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    }
}

/// GETs `path` from `addr`.
pub fn get(addr: SocketAddr, path: &str) -> Result<Reply> {
    Call::get(path).send(addr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Server;
    use axum::routing::{get as get_route, post};
    use axum::Router;

    #[test]
    fn sends_requests_and_reads_replies() {
        let app = Router::new()
            .route("/a", get_route(|| async { "text" }))
            .route(
                "/echo",
                post(|h: axum::http::HeaderMap, b: String| async move {
                    let auth = h
                        .get("authorization")
                        .map_or("-", |v| v.to_str().unwrap())
                        .to_string();
                    format!("{auth} {b}")
                }),
            );
        let srv = Server::start("127.0.0.1:0".parse().unwrap(), app).unwrap();
        assert_eq!(
            get(srv.addr, "/a").unwrap(),
            Reply {
                status: 200,
                body: "text".into()
            }
        );
        assert_eq!(get(srv.addr, "/b").unwrap().status, 404);
        let r = Call::new(Method::POST, "/echo")
            .token(Some("s3cret"))
            .json(serde_json::json!({"k": 1}))
            .send(srv.addr)
            .unwrap();
        assert_eq!(r.body, r#"Bearer s3cret {"k":1}"#);
        drop(srv);
        let e = get("127.0.0.1:1".parse().unwrap(), "/a").unwrap_err();
        assert!(
            format!("{e:#}").contains("connecting to 127.0.0.1:1"),
            "{e:#}"
        );
    }
}
