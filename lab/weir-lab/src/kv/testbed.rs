//! Real memcached and nutcracker processes for tests and benchmarks, on
//! loopback or inside a namespace the caller entered. Every process is
//! killed and reaped on drop, also when a test panics.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// A child process killed on drop.
pub struct Proc {
    child: std::process::Child,
    pub what: String,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts `cmd` (stdio to /dev/null); the process is killed on drop.
    pub fn spawn(mut cmd: Command, what: impl Into<String>) -> Result<Proc> {
        let what = what.into();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {what}"))?;
        Ok(Proc { child, what })
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free TCP port on 127.0.0.1, never one this process was given before:
/// the kernel may hand a closed port out again, and two callers that both
/// bind later would then collide. (Another process can still take it
/// between this call and the bind; good enough for tests.)
pub fn free_port() -> u16 {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..64 {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(0);
        if port != 0 && given.insert(port) {
            return port;
        }
    }
    0
}

/// Wait until `addr` accepts TCP connections.
pub fn wait_listening(addr: SocketAddr, proc_: &mut Proc) -> Result<()> {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
            return Ok(());
        }
        if let Ok(Some(st)) = proc_.child.try_wait() {
            bail!("{} exited ({st}) before listening on {addr}", proc_.what);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    bail!("{} is not listening on {addr} after 5 s", proc_.what)
}

/// memcached's command-line arguments: listen on `listen` (one address or a
/// comma-separated list), TCP `port`, UDP on the same port if `udp`.
pub fn memcached_args(listen: &str, port: u16, udp: bool, threads: u32) -> Vec<String> {
    let udp_port = if udp { port } else { 0 };
    [
        "-l",
        listen,
        "-p",
        &port.to_string(),
        "-U",
        &udp_port.to_string(),
        "-m",
        "64",
        "-t",
        &threads.to_string(),
        "-u",
        "root",
        "-c",
        "4096",
    ]
    .map(String::from)
    .to_vec()
}

/// `memcached` on `ip:port` (TCP, and UDP on the same port if `udp`).
pub fn memcached(ip: &str, port: u16, udp: bool, threads: u32) -> Result<Proc> {
    let child = Command::new("memcached")
        .args(memcached_args(ip, port, udp, threads))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting memcached (apt-get install memcached)")?;
    let mut p = Proc {
        child,
        what: format!("memcached {ip}:{port}"),
    };
    wait_listening(format!("{ip}:{port}").parse()?, &mut p)?;
    Ok(p)
}

/// `nutcracker -c conf`; `listen` is the pool's listen address.
pub fn nutcracker(conf: &Path, listen: SocketAddr, stats_port: u16) -> Result<Proc> {
    let log = conf.with_extension("log");
    let child = Command::new("nutcracker")
        .arg("-c")
        .arg(conf)
        .args(["-a", "127.0.0.1", "-s", &stats_port.to_string(), "-o"])
        .arg(&log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting nutcracker (apt-get install nutcracker)")?;
    let mut p = Proc {
        child,
        what: format!("nutcracker {}", conf.display()),
    };
    wait_listening(listen, &mut p)?;
    Ok(p)
}

/// (key, flags, value) of one retrieved item.
pub type Item = (String, u32, Vec<u8>);

/// A blocking memcached text-protocol client for tests.
pub struct McClient {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl McClient {
    pub fn connect(addr: SocketAddr) -> Result<McClient> {
        let s = TcpStream::connect(addr).with_context(|| format!("connecting {addr}"))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.set_nodelay(true)?;
        Ok(McClient {
            r: BufReader::new(s.try_clone()?),
            w: s,
        })
    }

    pub fn send(&mut self, bytes: &[u8]) -> Result<()> {
        self.w.write_all(bytes)?;
        Ok(())
    }

    pub fn line(&mut self) -> Result<String> {
        let mut l = String::new();
        if self.r.read_line(&mut l)? == 0 {
            bail!("connection closed");
        }
        Ok(l)
    }

    /// Read a retrieval reply: (key, flags, value) items up to END (or an error line).
    pub fn values(&mut self) -> Result<Result<Vec<Item>, String>> {
        let mut out = Vec::new();
        loop {
            let l = self.line()?;
            let t: Vec<&str> = l.split_whitespace().collect();
            match t.first().copied() {
                Some("END") => return Ok(Ok(out)),
                Some("VALUE") if t.len() >= 4 => {
                    let n: usize = t[3].parse()?;
                    let mut v = vec![0; n + 2];
                    self.r.read_exact(&mut v)?;
                    v.truncate(n);
                    out.push((t[1].to_string(), t[2].parse()?, v));
                }
                _ => return Ok(Err(l)),
            }
        }
    }

    /// One command with a one-line reply.
    pub fn cmd(&mut self, c: &str) -> Result<String> {
        self.send(c.as_bytes())?;
        self.line()
    }

    pub fn set(&mut self, key: &str, val: &[u8]) -> Result<String> {
        self.send(format!("set {key} 0 0 {}\r\n", val.len()).as_bytes())?;
        self.send(val)?;
        self.send(b"\r\n")?;
        self.line()
    }

    pub fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>> {
        self.send(format!("get {key}\r\n").as_bytes())?;
        match self.values()? {
            Ok(mut v) => Ok(v.pop().map(|x| x.2)),
            Err(l) => bail!("get {key}: {l}"),
        }
    }
}
