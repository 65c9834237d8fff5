//! The controller's client of `weir agent`: `GET /load` with a deadline,
//! a bounded reply, and strict validation. Anything else is an
//! [`AgentError`] of a kind that is counted per DIP; nothing here panics on
//! what an agent sends.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::Sample;

/// Longest reply read; a longer one is refused as `too_large`.
pub const MAX_REPLY: usize = 4096;
/// Largest believable processing time (s) and rate (1/s).
pub const MAX_PROCESSING_TIME_S: f64 = 3600.0;
pub const MAX_RATE_PER_S: f64 = 1e9;

/// Why a poll produced no sample. Each kind is a counter per DIP.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AgentError {
    /// No complete reply within `agent_timeout_ms`.
    Timeout,
    /// Connection refused or reset, or another I/O error.
    Connect(String),
    /// Not an HTTP 200 reply.
    Http(String),
    /// More than [`MAX_REPLY`] bytes.
    TooLarge,
    /// The body is not the expected JSON.
    Parse(String),
    /// The JSON has values out of range: negative, NaN-like, huge.
    Invalid(String),
}

impl AgentError {
    /// The counter name.
    pub fn kind(&self) -> &'static str {
        match self {
            AgentError::Timeout => "timeout",
            AgentError::Connect(_) => "connect",
            AgentError::Http(_) => "http",
            AgentError::TooLarge => "too_large",
            AgentError::Parse(_) => "parse",
            AgentError::Invalid(_) => "invalid",
        }
    }

    /// Every kind, in a fixed order (for metrics).
    pub const KINDS: [&'static str; 6] = [
        "timeout",
        "connect",
        "http",
        "too_large",
        "parse",
        "invalid",
    ];
}

impl std::fmt::Display for AgentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AgentError::Timeout => write!(f, "no reply in time"),
            AgentError::TooLarge => write!(f, "reply longer than {MAX_REPLY} bytes"),
            AgentError::Connect(e)
            | AgentError::Http(e)
            | AgentError::Parse(e)
            | AgentError::Invalid(e) => write!(f, "{}: {e}", self.kind()),
        }
    }
}

#[derive(Deserialize)]
struct Wire {
    processing_time_s: f64,
    rate_per_s: f64,
    samples: u64,
    #[serde(default)]
    window_s: Option<f64>,
}

/// Validates a `/load` body.
pub fn parse_body(body: &[u8]) -> Result<Sample, AgentError> {
    let w: Wire = serde_json::from_slice(body).map_err(|e| AgentError::Parse(e.to_string()))?;
    let t = w.processing_time_s;
    if !(t.is_finite() && (0.0..=MAX_PROCESSING_TIME_S).contains(&t)) {
        return Err(AgentError::Invalid(format!(
            "processing_time_s = {t} is not in 0..={MAX_PROCESSING_TIME_S}"
        )));
    }
    let r = w.rate_per_s;
    if !(r.is_finite() && (0.0..=MAX_RATE_PER_S).contains(&r)) {
        return Err(AgentError::Invalid(format!(
            "rate_per_s = {r} is not in 0..={MAX_RATE_PER_S}"
        )));
    }
    if let Some(ws) = w.window_s {
        if !(ws.is_finite() && ws >= 0.0) {
            return Err(AgentError::Invalid(format!("window_s = {ws}")));
        }
    }
    if w.samples > 0 && t <= 0.0 {
        return Err(AgentError::Invalid(
            "samples > 0 with processing_time_s = 0".into(),
        ));
    }
    Ok(Sample {
        processing_time_s: (w.samples > 0).then_some(t),
        rate_per_s: r,
    })
}

/// Validates a whole HTTP reply (status line, headers, body).
pub fn parse_reply(reply: &[u8]) -> Result<Sample, AgentError> {
    let split = reply
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| AgentError::Http("no end of headers".into()))?;
    let head = String::from_utf8_lossy(&reply[..split]);
    let status = head.lines().next().unwrap_or("");
    let mut parts = status.split_whitespace();
    let (proto, code) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if !proto.starts_with("HTTP/1.") {
        return Err(AgentError::Http(format!("not HTTP: {:.40}", status)));
    }
    if code != "200" {
        return Err(AgentError::Http(format!("status {:.40}", code)));
    }
    parse_body(&reply[split + 4..])
}

/// Polls the agent at `addr`: the whole exchange takes at most `timeout`.
pub fn poll(addr: SocketAddr, timeout: Duration) -> Result<Sample, AgentError> {
    let deadline = Instant::now() + timeout;
    let left = || deadline.saturating_duration_since(Instant::now());
    let io = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => AgentError::Timeout,
        _ => AgentError::Connect(e.to_string()),
    };
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(io)?;
    let _ = s.set_nodelay(true);
    s.set_write_timeout(Some(left().max(Duration::from_millis(1))))
        .map_err(io)?;
    s.write_all(b"GET /load HTTP/1.0\r\nHost: weir\r\n\r\n")
        .map_err(io)?;
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        let l = left();
        if l.is_zero() {
            return Err(AgentError::Timeout);
        }
        s.set_read_timeout(Some(l)).map_err(io)?;
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                if buf.len() + n > MAX_REPLY {
                    return Err(AgentError::TooLarge);
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e)),
        }
    }
    parse_reply(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_replies_become_samples() {
        let s = parse_body(
            br#"{"processing_time_s": 0.002, "rate_per_s": 150.5, "samples": 75, "window_s": 0.5}"#,
        )
        .unwrap();
        assert_eq!(s.processing_time_s, Some(0.002));
        assert_eq!(s.rate_per_s, 150.5);
        // Idle: no processing time, the previous estimate stands.
        let s = parse_body(br#"{"processing_time_s": 0, "rate_per_s": 0, "samples": 0}"#).unwrap();
        assert_eq!(s.processing_time_s, None);
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{\"processing_time_s\":1,\"rate_per_s\":1,\"samples\":1}";
        assert_eq!(parse_reply(r).unwrap().processing_time_s, Some(1.0));
    }

    #[test]
    fn bad_replies_are_errors_of_the_right_kind() {
        let cases: &[(&[u8], &str)] = &[
            (b"garbage", "parse"),
            (b"", "parse"),
            (b"{}", "parse"),
            (
                br#"{"processing_time_s": "x", "rate_per_s": 1, "samples": 1}"#,
                "parse",
            ),
            (
                br#"{"processing_time_s": NaN, "rate_per_s": 1, "samples": 1}"#,
                "parse",
            ),
            (
                br#"{"processing_time_s": 0.1, "rate_per_s": 1, "samples": -3}"#,
                "parse",
            ),
            (
                br#"{"processing_time_s": -0.1, "rate_per_s": 1, "samples": 1}"#,
                "invalid",
            ),
            (
                br#"{"processing_time_s": 0.1, "rate_per_s": -5, "samples": 1}"#,
                "invalid",
            ),
            (
                br#"{"processing_time_s": 1e300, "rate_per_s": 1, "samples": 1}"#,
                "invalid",
            ),
            (
                br#"{"processing_time_s": 0.1, "rate_per_s": 1e300, "samples": 1}"#,
                "invalid",
            ),
            (
                br#"{"processing_time_s": 0, "rate_per_s": 1, "samples": 5}"#,
                "invalid",
            ),
            (
                br#"{"processing_time_s": 0.1, "rate_per_s": 1, "samples": 1, "window_s": -1}"#,
                "invalid",
            ),
        ];
        for (body, kind) in cases {
            let e = parse_body(body).unwrap_err();
            assert_eq!(e.kind(), *kind, "{}: {e}", String::from_utf8_lossy(body));
        }
        for reply in [
            &b"HTTP/1.1 500 Oops\r\n\r\n{}"[..],
            b"SSH-2.0\r\n\r\n",
            b"HTTP/1.1 200 OK no end",
        ] {
            assert_eq!(parse_reply(reply).unwrap_err().kind(), "http");
        }
    }

    #[test]
    fn polling_a_dead_or_huge_or_slow_agent_fails_cleanly() {
        use std::net::TcpListener;
        // Nothing listens: connect error.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let dead = l.local_addr().unwrap();
        drop(l);
        let e = poll(dead, Duration::from_millis(200)).unwrap_err();
        assert_eq!(e.kind(), "connect", "{e}");
        // Huge and slow replies.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\n\r\n");
            let _ = s.write_all(&vec![b'9'; 100_000]);
            let (s2, _) = l.accept().unwrap();
            std::thread::sleep(Duration::from_millis(400));
            drop(s2);
        });
        assert_eq!(
            poll(addr, Duration::from_secs(2)).unwrap_err(),
            AgentError::TooLarge
        );
        let start = Instant::now();
        assert_eq!(
            poll(addr, Duration::from_millis(100)).unwrap_err(),
            AgentError::Timeout
        );
        assert!(start.elapsed() < Duration::from_millis(350));
        t.join().unwrap();
    }
}
