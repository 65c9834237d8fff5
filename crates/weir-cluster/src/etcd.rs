//! A small etcd v3 client over etcd's JSON gateway (`POST /v3/...`, keys
//! and values in base64, 64-bit integers as strings), on hyper's HTTP/1.1
//! client. It covers what the cluster needs: range, put, transactions
//! (compare-and-put, create-if-absent), leases (grant, keep-alive, revoke)
//! and watch streams. Each call has a deadline and a bounded reply; the
//! endpoints are tried in order, starting with the last one that answered.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{header, Request};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpStream;

/// Longest reply read (a range over the cluster's prefix is small).
const MAX_REPLY: usize = 8 << 20;
/// Longest watch message buffered before it is complete.
const MAX_WATCH_MESSAGE: usize = 8 << 20;

/// One key-value pair as etcd returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kv {
    pub key: String,
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub lease: i64,
}

/// A change seen by a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Put(Kv),
    Delete { key: String, mod_revision: i64 },
}

/// A transaction's compare clause.
#[derive(Debug, Clone)]
pub enum Compare {
    /// The key does not exist (its create revision is 0).
    Absent(String),
    /// The key exists with this create revision.
    CreatedAt(String, i64),
}

/// An etcd cluster reached through its JSON gateway.
#[derive(Debug)]
pub struct Client {
    endpoints: Vec<SocketAddr>,
    /// The endpoint that answered last.
    current: AtomicUsize,
    deadline: Duration,
}

fn b64(s: &[u8]) -> String {
    B64.encode(s)
}

/// The key after every key that starts with `prefix` (etcd's range end).
pub fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

fn kv_of(v: &Value) -> Result<Kv> {
    let key = B64
        .decode(v["key"].as_str().unwrap_or(""))
        .context("etcd sent a key that is not base64")?;
    let value = B64
        .decode(v["value"].as_str().unwrap_or(""))
        .context("etcd sent a value that is not base64")?;
    Ok(Kv {
        key: String::from_utf8(key).context("etcd sent a key that is not UTF-8")?,
        value,
        create_revision: int(&v["create_revision"]),
        mod_revision: int(&v["mod_revision"]),
        lease: int(&v["lease"]),
    })
}

/// A watch response's events, and the revision it brings the watch to.
fn watch_events(msg: &Value) -> Result<(Vec<Event>, i64)> {
    let r = &msg["result"];
    if let Some(e) = msg.get("error") {
        bail!("etcd ended the watch: {e}");
    }
    if r.get("canceled").and_then(Value::as_bool) == Some(true) {
        bail!(
            "etcd canceled the watch: {}",
            r["cancel_reason"].as_str().unwrap_or("no reason given")
        );
    }
    let revision = int(&r["header"]["revision"]);
    let mut events = Vec::new();
    for e in r["events"].as_array().into_iter().flatten() {
        let kv = kv_of(&e["kv"])?;
        events.push(match e["type"].as_str() {
            Some("DELETE") => Event::Delete {
                key: kv.key,
                mod_revision: kv.mod_revision,
            },
            _ => Event::Put(kv),
        });
    }
    Ok((events, revision))
}

impl Client {
    /// `endpoints` are etcd client URLs' host:port; `deadline` bounds each call.
    pub fn new(endpoints: Vec<SocketAddr>, deadline: Duration) -> Client {
        assert!(!endpoints.is_empty(), "at least one etcd endpoint");
        Client {
            endpoints,
            current: AtomicUsize::new(0),
            deadline,
        }
    }

    /// POSTs `body` to `path` on the first endpoint that answers.
    async fn call(&self, path: &str, body: Value) -> Result<Value> {
        let n = self.endpoints.len();
        let start = self.current.load(Ordering::Relaxed);
        let mut errors = Vec::new();
        for i in 0..n {
            let at = (start + i) % n;
            let addr = self.endpoints[at];
            match tokio::time::timeout(self.deadline, exchange(addr, path, &body)).await {
                Ok(Ok(v)) => {
                    self.current.store(at, Ordering::Relaxed);
                    return Ok(v);
                }
                Ok(Err(e)) => errors.push(format!("{addr}: {e:#}")),
                Err(_) => errors.push(format!("{addr}: no answer within {:?}", self.deadline)),
            }
        }
        Err(anyhow!("etcd unreachable ({})", errors.join("; ")))
    }

    /// Every key under `prefix`, and the store's revision.
    pub async fn range_prefix(&self, prefix: &str) -> Result<(Vec<Kv>, i64)> {
        let v = self
            .call(
                "/v3/kv/range",
                json!({"key": b64(prefix.as_bytes()), "range_end": b64(&prefix_end(prefix))}),
            )
            .await?;
        let kvs = v["kvs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(kv_of)
            .collect::<Result<Vec<_>>>()?;
        Ok((kvs, int(&v["header"]["revision"])))
    }

    /// Puts `value` at `key`, attached to `lease` (0: none).
    pub async fn put(&self, key: &str, value: &[u8], lease: i64) -> Result<()> {
        self.call("/v3/kv/put", put_op(key, value, lease)).await?;
        Ok(())
    }

    /// Puts `value` at `key` (with `lease`) if `cmp` holds. Returns whether
    /// it did and, if not, the key's current value.
    pub async fn put_if(
        &self,
        cmp: &Compare,
        key: &str,
        value: &[u8],
        lease: i64,
    ) -> Result<(bool, Option<Kv>, i64)> {
        let (ckey, target) = match cmp {
            Compare::Absent(k) => (k, json!({"target": "CREATE", "create_revision": "0"})),
            Compare::CreatedAt(k, r) => (
                k,
                json!({"target": "CREATE", "create_revision": r.to_string()}),
            ),
        };
        let mut compare = target;
        compare["key"] = json!(b64(ckey.as_bytes()));
        compare["result"] = json!("EQUAL");
        let v = self
            .call(
                "/v3/kv/txn",
                json!({
                    "compare": [compare],
                    "success": [{"request_put": put_op(key, value, lease)}],
                    "failure": [{"request_range": {"key": b64(key.as_bytes())}}],
                }),
            )
            .await?;
        let revision = int(&v["header"]["revision"]);
        if v["succeeded"].as_bool() == Some(true) {
            return Ok((true, None, revision));
        }
        let current = v["responses"][0]["response_range"]["kvs"]
            .as_array()
            .and_then(|a| a.first())
            .map(kv_of)
            .transpose()?;
        Ok((false, current, revision))
    }

    /// A new lease of `ttl` seconds: its id and the TTL etcd granted
    /// (etcd raises a TTL below its minimum).
    pub async fn grant(&self, ttl: u64) -> Result<(i64, i64)> {
        let v = self
            .call("/v3/lease/grant", json!({"TTL": ttl.to_string()}))
            .await?;
        if let Some(e) = v["error"].as_str() {
            bail!("etcd refused a lease: {e}");
        }
        Ok((int(&v["ID"]), int(&v["TTL"])))
    }

    /// Refreshes a lease; its remaining TTL, 0 if it has expired.
    pub async fn keep_alive(&self, lease: i64) -> Result<i64> {
        let v = self
            .call("/v3/lease/keepalive", json!({"ID": lease.to_string()}))
            .await?;
        Ok(int(&v["result"]["TTL"]))
    }

    /// Ends a lease at once: its keys go with it.
    pub async fn revoke(&self, lease: i64) -> Result<()> {
        self.call("/v3/lease/revoke", json!({"ID": lease.to_string()}))
            .await?;
        Ok(())
    }

    /// Watches every key under `prefix` from `revision` on, calling
    /// `on_events` with each batch; returns (with an error) when the stream
    /// ends, so the caller can range again and watch on.
    pub async fn watch_prefix(
        &self,
        prefix: &str,
        revision: i64,
        mut on_events: impl FnMut(Vec<Event>, i64),
    ) -> Result<()> {
        let addr = self.endpoints[self.current.load(Ordering::Relaxed) % self.endpoints.len()];
        let body = json!({"create_request": {
            "key": b64(prefix.as_bytes()),
            "range_end": b64(&prefix_end(prefix)),
            "start_revision": revision.to_string(),
        }});
        let mut reply = tokio::time::timeout(self.deadline, request(addr, "/v3/watch", &body))
            .await
            .map_err(|_| anyhow!("{addr}: no answer to the watch within {:?}", self.deadline))??;
        let mut buf: Vec<u8> = Vec::new();
        while let Some(frame) = reply.frame().await {
            let frame = frame.with_context(|| format!("reading the watch from {addr}"))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            buf.extend_from_slice(&data);
            let mut stream = serde_json::Deserializer::from_slice(&buf).into_iter::<Value>();
            let mut used = 0;
            loop {
                match stream.next() {
                    Some(Ok(m)) => {
                        used = stream.byte_offset();
                        let (events, rev) = watch_events(&m)?;
                        if !events.is_empty() {
                            on_events(events, rev);
                        }
                    }
                    Some(Err(e)) if e.is_eof() => break,
                    Some(Err(e)) => bail!("etcd sent a watch message that is not JSON: {e}"),
                    None => break,
                }
            }
            buf.drain(..used);
            if buf.len() > MAX_WATCH_MESSAGE {
                bail!("a watch message from {addr} exceeds {MAX_WATCH_MESSAGE} bytes");
            }
        }
        bail!("etcd at {addr} closed the watch")
    }
}

fn put_op(key: &str, value: &[u8], lease: i64) -> Value {
    let mut op = json!({"key": b64(key.as_bytes()), "value": b64(value)});
    if lease != 0 {
        op["lease"] = json!(lease.to_string());
    }
    op
}

/// Sends one request and returns the reply's body unread, after checking
/// its status.
async fn request(addr: SocketAddr, path: &str, body: &Value) -> Result<Incoming> {
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .with_context(|| format!("talking to {addr}"))?;
    tokio::spawn(conn);
    let req = Request::post(path)
        .header(header::HOST, addr.to_string())
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .context("building an etcd request")?;
    let reply = sender
        .send_request(req)
        .await
        .with_context(|| format!("POST {path}"))?;
    let status = reply.status();
    if !status.is_success() {
        let text = http_body_util::Limited::new(reply.into_body(), 4096)
            .collect()
            .await
            .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
            .unwrap_or_default();
        bail!("POST {path}: HTTP {status}: {}", text.trim());
    }
    Ok(reply.into_body())
}

/// One call: the whole reply as JSON.
async fn exchange(addr: SocketAddr, path: &str, body: &Value) -> Result<Value> {
    let reply = request(addr, path, body).await?;
    let bytes = http_body_util::Limited::new(reply, MAX_REPLY)
        .collect()
        .await
        .map_err(|e| anyhow!("reading the reply to {path}: {e}"))?
        .to_bytes();
    serde_json::from_slice(&bytes).with_context(|| format!("the reply to {path} is not JSON"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends_cover_every_key_under_the_prefix() {
        assert_eq!(prefix_end("/weir/a/"), b"/weir/a0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
        assert_eq!(prefix_end(""), vec![0]);
    }

    #[test]
    fn watch_messages_decode() {
        let m: Value = serde_json::from_str(
            r#"{"result":{"header":{"revision":"9"},"events":[
              {"kv":{"key":"YQ==","create_revision":"2","mod_revision":"9","version":"2","value":"Yg==","lease":"77"}},
              {"type":"DELETE","kv":{"key":"Yw==","mod_revision":"9"}}]}}"#,
        )
        .unwrap();
        let (events, rev) = watch_events(&m).unwrap();
        assert_eq!(rev, 9);
        assert_eq!(
            events,
            vec![
                Event::Put(Kv {
                    key: "a".into(),
                    value: b"b".to_vec(),
                    create_revision: 2,
                    mod_revision: 9,
                    lease: 77
                }),
                Event::Delete {
                    key: "c".into(),
                    mod_revision: 9
                }
            ]
        );
        let created: Value =
            serde_json::from_str(r#"{"result":{"header":{"revision":"3"},"created":true}}"#)
                .unwrap();
        assert_eq!(watch_events(&created).unwrap(), (vec![], 3));
        let canceled: Value = serde_json::from_str(
            r#"{"result":{"canceled":true,"cancel_reason":"mvcc: required revision has been compacted"}}"#,
        )
        .unwrap();
        assert!(watch_events(&canceled)
            .unwrap_err()
            .to_string()
            .contains("compacted"));
    }
}
