//! `weir dip add|remove|weight|drain`: DIP changes through the running
//! daemon's management API. The API's address comes from the daemon's run
//! record (`<run dir>/serve.json`) unless `--api` names it; the token from
//! the running configuration's `[api]` unless `--token-file` gives it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use weir_config::Config;
use weir_control::api::edit::{DipRef, NewDip};
use weir_control::api::{reachable, Changed};
use weir_control::run_record::{RunRecord, DEFAULT_RUN_DIR};
use weir_http::client::{Call, Method};

#[derive(Args, Debug)]
pub struct DipArgs {
    #[command(subcommand)]
    pub cmd: DipCmd,
    /// The API's address (default: the running daemon's, from its run record).
    #[arg(long, global = true, value_name = "IP:PORT")]
    pub api: Option<SocketAddr>,
    /// The running daemon's run directory.
    #[arg(long, global = true, default_value = DEFAULT_RUN_DIR)]
    pub run_dir: PathBuf,
    /// A file holding the API token (default: the running configuration's
    /// [api] token or token_file).
    #[arg(long, global = true, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum DipCmd {
    /// Add a DIP to a VIP; it gets new connections at once.
    Add {
        vip: String,
        /// ADDRESS, or ADDRESS:PORT for a nat DIP on another port than the VIP's.
        dip: String,
        #[arg(long)]
        weight: Option<u32>,
        /// Next-hop MAC when the FIB has no neighbour entry.
        #[arg(long)]
        mac: Option<String>,
        /// Where the DIP's `weir agent` answers (IP:PORT).
        #[arg(long)]
        agent: Option<SocketAddr>,
        /// QUIC VIP: the server ID (hex) the DIP's connection IDs carry.
        #[arg(long)]
        server_id: Option<String>,
    },
    /// Remove a DIP from its VIP; its established connections end.
    Remove { vip: String, dip: String },
    /// Set a DIP's weight (0 drains it).
    Weight {
        vip: String,
        dip: String,
        weight: u32,
    },
    /// Drain a DIP: no new connections, established ones stay (weight 0).
    Drain { vip: String, dip: String },
}

/// Runs a `weir dip` command; prints what the daemon did.
pub fn run(args: &DipArgs) -> Result<()> {
    let (addr, token) = target(args.api, &args.run_dir, args.token_file.as_deref())?;
    let dip_path = |vip: &str, dip: &str| -> Result<String> {
        let d: DipRef = dip.parse().map_err(anyhow::Error::msg)?;
        Ok(format!(
            "/api/v1/vips/{}/dips/{}",
            encode(vip),
            encode(&d.to_string())
        ))
    };
    let call = match &args.cmd {
        DipCmd::Add {
            vip,
            dip,
            weight,
            mac,
            agent,
            server_id,
        } => {
            let d: DipRef = dip.parse().map_err(anyhow::Error::msg)?;
            let new = NewDip {
                address: d.address,
                port: d.port,
                weight: *weight,
                mac: mac.clone(),
                agent: *agent,
                server_id: server_id.clone(),
            };
            (
                Method::POST,
                format!("/api/v1/vips/{}/dips", encode(vip)),
                Some(serde_json::to_value(new)?),
            )
        }
        DipCmd::Remove { vip, dip } => (Method::DELETE, dip_path(vip, dip)?, None),
        DipCmd::Weight { vip, dip, weight } => (
            Method::PUT,
            format!("{}/weight", dip_path(vip, dip)?),
            Some(serde_json::json!({ "weight": weight })),
        ),
        DipCmd::Drain { vip, dip } => {
            (Method::POST, format!("{}/drain", dip_path(vip, dip)?), None)
        }
    };
    let (method, path, body) = call;
    let changed = send(addr, token.as_deref(), method, &path, body)?;
    match changed.vip.and_then(|v| v.table_version) {
        Some(t) => println!("{}; table version {t}", changed.message),
        None => println!("{}", changed.message),
    }
    Ok(())
}

/// One write to the daemon's API; its refusal as an error in its words.
pub(crate) fn send(
    addr: SocketAddr,
    token: Option<&str>,
    method: Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> Result<Changed> {
    let mut c = Call::new(method, path).token(token);
    if let Some(b) = body {
        c = c.json(b);
    }
    let reply = c.send(addr).map_err(|e| {
        anyhow::anyhow!(
            "{e:#}: is weir serve running with its API on {addr}? (its log says where the API \
             listens; [api] listen in its configuration)"
        )
    })?;
    if !(200..300).contains(&reply.status) {
        // The daemon's message; any other answer (a proxy's page) as it came.
        let said = reply
            .json()
            .ok()
            .and_then(|v| v["error"].as_str().map(String::from))
            .unwrap_or_else(|| reply.body.trim().to_string());
        bail!("weir serve refused the change: {said} ({})", reply.status);
    }
    serde_json::from_value(reply.json()?).context("decoding the API's answer")
}

/// A path segment: VIP names and IPv6 DIPs carry characters a path may not.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b':' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The API's address and the token to send: `api` or the running daemon's
/// (recorded in `run_dir`); the token from `token_file` or its configuration.
pub(crate) fn target(
    api: Option<SocketAddr>,
    run_dir: &Path,
    token_file: Option<&Path>,
) -> Result<(SocketAddr, Option<String>)> {
    let record = RunRecord::read(run_dir);
    let addr = match (api, &record) {
        (Some(a), _) => a,
        (None, Err(e)) => bail!("{e:#}"),
        (None, Ok(r)) => {
            if !weir_sys::process::alive(r.pid) {
                bail!(
                    "weir serve (pid {}) recorded in {} is not running; start it",
                    r.pid,
                    run_dir.display()
                );
            }
            r.api.with_context(|| {
                format!(
                    "weir serve (pid {}) runs without its API ([api] listen = \"off\" in {}, or \
                     it could not listen: see its log)",
                    r.pid,
                    r.config.display()
                )
            })?
        }
    };
    let token = match (token_file, record.ok()) {
        (Some(f), _) => Some(read_token(f)?),
        (None, Some(r)) => match Config::load(&r.config) {
            Ok(cfg) => cfg.api.token().map_err(anyhow::Error::msg)?,
            // Without the file, try without a token: the API says if it wants one.
            Err(_) => None,
        },
        (None, None) => None,
    };
    Ok((reachable(addr), token))
}

fn read_token(f: &Path) -> Result<String> {
    let t = std::fs::read_to_string(f).with_context(|| format!("--token-file {}", f.display()))?;
    match t.trim() {
        "" => bail!("--token-file {} is empty", f.display()),
        t => Ok(t.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(encode("web"), "web");
        assert_eq!(encode("[fd00::1]:80"), "%5Bfd00::1%5D:80");
        assert_eq!(encode("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn without_a_daemon_the_error_says_so() {
        let dir = std::env::temp_dir().join(format!("weir-dip-cli-{}", std::process::id()));
        let args = DipArgs {
            cmd: DipCmd::Drain {
                vip: "web".into(),
                dip: "10.0.0.1".into(),
            },
            api: None,
            run_dir: dir.clone(),
            token_file: None,
        };
        let e = format!("{:#}", run(&args).unwrap_err());
        assert!(
            e.contains("no running weir recorded") && e.contains("weir serve"),
            "{e}"
        );
        // A record whose daemon is gone.
        std::fs::create_dir_all(&dir).unwrap();
        let rec = RunRecord {
            pid: u32::MAX / 2,
            config: dir.join("weir.toml"),
            pin_dir: dir.join("pins"),
            interfaces: vec![],
            api: Some("127.0.0.1:9".parse().unwrap()),
        };
        std::fs::write(RunRecord::path(&dir), serde_json::to_vec(&rec).unwrap()).unwrap();
        let e = format!("{:#}", run(&args).unwrap_err());
        assert!(e.contains("is not running; start it"), "{e}");
        // --api to a port where nothing listens.
        let args = DipArgs {
            api: Some("127.0.0.1:9".parse().unwrap()),
            ..args
        };
        let e = format!("{:#}", run(&args).unwrap_err());
        assert!(
            e.contains("is weir serve running with its API on 127.0.0.1:9"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
