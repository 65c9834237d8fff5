//! HTTP calls to a server reachable inside a network namespace (the API,
//! the metrics of `weir serve` or `weir kv`), from a thread that enters it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use serde_json::Value;
use weir_http::client::{Call, Method, Reply};
use weir_lab::netns::enter;

/// `GET /metrics` from `127.0.0.1:port` inside namespace `ns`, as text.
pub fn metrics(ns: &str, port: u16) -> String {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        enter(&ns).unwrap();
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    })
    .join()
    .unwrap()
}

/// A call with an optional JSON body.
pub fn call(ns: &str, addr: SocketAddr, method: Method, path: &str, body: Option<Value>) -> Reply {
    call_with(ns, addr, method, path, body, None)
}

/// [`call`] with the bearer `token` when given.
pub fn call_with(
    ns: &str,
    addr: SocketAddr,
    method: Method,
    path: &str,
    body: Option<Value>,
    token: Option<&str>,
) -> Reply {
    let token = token.map(String::from);
    in_namespace(ns, path, move |path| {
        let mut c = Call::new(method, path).token(token.as_deref());
        if let Some(b) = body {
            c = c.json(b);
        }
        c.send(addr)
    })
}

/// A call whose body is not JSON.
pub fn raw(ns: &str, addr: SocketAddr, method: Method, path: &str, body: &str) -> Reply {
    let body = body.to_string();
    in_namespace(ns, path, move |path| {
        Call::new(method, path).body(body.into_bytes()).send(addr)
    })
}

fn in_namespace(
    ns: &str,
    path: &str,
    send: impl FnOnce(&str) -> anyhow::Result<Reply> + Send + 'static,
) -> Reply {
    let (ns, path) = (ns.to_string(), path.to_string());
    std::thread::spawn(move || {
        enter(&ns).unwrap();
        send(&path).unwrap_or_else(|e| panic!("{path}: {e:#}"))
    })
    .join()
    .unwrap()
}
