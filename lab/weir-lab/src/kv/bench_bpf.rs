//! `weir-lab bench kv-bpf`: BPF run time of the XDP memcached switch per path,
//! through BPF_PROG_TEST_RUN: a forwarded `get` in an fnv1a_64 and in an md5
//! pool by key length (md5 runs one 64-byte block per 64 bytes of key), a
//! forwarded `set`, and a cache-hit reply. Medians of many single runs, all
//! paths interleaved in every round so machine noise hits them alike. The
//! figures include the kernel's timer reads around one run; test_run does
//! not transmit, so no driver cost is in them.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use clap::Args;
use libbpf_rs::ProgramInput;
use serde::Serialize;
use weir_core::wire::Frame;
use weir_dataplane::testrun::XdpAction;
use weir_kv::route::{DistKind, Distribution, HashKind, Server};
use weir_kv::xdp::{self, KvLoadOptions, LoadedKv, ServerAddr};
use weir_progress::Progress;

const PORT: u16 = 11211;
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 8, 0, 2);
const VIP: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
const SERVERS: usize = 3;

#[derive(Debug, Clone, Args)]
pub struct KvBpfBenchArgs {
    /// Single runs per path (the median is reported).
    #[arg(long, default_value_t = 5001)]
    pub runs: usize,
    /// Key lengths of the forwarded gets (1..=250).
    #[arg(long, value_delimiter = ',', default_value = "10,60,120,250")]
    pub key_lengths: Vec<usize>,
    /// Write the rows as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub path: String,
    pub hash: String,
    pub key_bytes: usize,
    pub ns_median: f64,
    pub ns_p10: f64,
    pub ns_p90: f64,
}

struct Path {
    row: Row,
    pool: usize,
    frame: Vec<u8>,
    want: XdpAction,
    ns: Vec<f64>,
}

pub fn run(args: &KvBpfBenchArgs) -> Result<()> {
    ensure!(args.runs >= 1, "--runs must be at least 1");
    for &l in &args.key_lengths {
        ensure!(
            (1..=250).contains(&l),
            "--key-lengths: {l} is not 1..=250 (memcached keys)"
        );
    }
    let pools = [HashKind::Fnv1a_64, HashKind::Md5]
        .map(pool)
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    let hot = b"hot";
    install(&pools[0], hot, &[b'v'; 32])?;
    let mut paths = Vec::new();
    for &len in &args.key_lengths {
        let key: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
        for (p, hash) in ["fnv1a_64", "md5"].iter().enumerate() {
            paths.push(path(
                "get, forwarded",
                hash,
                len,
                p,
                &[b"get ", &key[..], b"\r\n"].concat(),
                XdpAction::Tx,
            ));
        }
    }
    paths.push(path(
        "set, forwarded",
        "fnv1a_64",
        4,
        0,
        b"set cold 0 0 3\r\nabc\r\n",
        XdpAction::Tx,
    ));
    paths.push(path(
        "get, cache hit (32 B value)",
        "fnv1a_64",
        hot.len(),
        0,
        b"get hot\r\n",
        XdpAction::Tx,
    ));

    let progress = Progress::bar("weir-lab bench kv-bpf", args.runs as u64);
    progress.set_message(format!("{} paths per round", paths.len()));
    for _ in 0..args.runs {
        for p in &mut paths {
            let (action, ns) = once(&pools[p.pool], &p.frame)?;
            ensure!(
                action == p.want,
                "{}: XDP returned {action:?}, not {:?}",
                p.row.path,
                p.want
            );
            p.ns.push(ns);
        }
        progress.inc(1);
    }
    progress.finish(format!("{} rounds of {} paths", args.runs, paths.len()));
    let stats = pools[0].stats()?;
    ensure!(
        stats.by_name("cache_tx").unwrap_or(0) >= args.runs as u64,
        "the cache-hit path was not answered from the cache"
    );
    let rows: Vec<Row> = paths
        .into_iter()
        .map(|mut p| {
            p.ns.sort_by(f64::total_cmp);
            let q = |f: f64| p.ns[((p.ns.len() - 1) as f64 * f) as usize];
            Row {
                ns_median: q(0.5),
                ns_p10: q(0.1),
                ns_p90: q(0.9),
                ..p.row
            }
        })
        .collect();
    println!(
        "{:<30} {:<9} {:>9} {:>10} {:>10} {:>10}",
        "path", "hash", "key B", "median ns", "p10 ns", "p90 ns"
    );
    for r in &rows {
        println!(
            "{:<30} {:<9} {:>9} {:>10.0} {:>10.0} {:>10.0}",
            r.path, r.hash, r.key_bytes, r.ns_median, r.ns_p10, r.ns_p90
        );
    }
    if let Some(f) = &args.json {
        let doc = serde_json::json!({ "bench": "kv-bpf", "runs": args.runs, "rows": rows });
        std::fs::write(f, serde_json::to_vec_pretty(&doc)?)
            .with_context(|| format!("writing {}", f.display()))?;
    }
    Ok(())
}

fn path(
    what: &str,
    hash: &str,
    key_bytes: usize,
    pool: usize,
    body: &[u8],
    want: XdpAction,
) -> Path {
    let mut payload = vec![0x12, 0x34, 0, 0, 0, 1, 0, 0]; // request id, seq 0, total 1
    payload.extend_from_slice(body);
    Path {
        row: Row {
            path: what.into(),
            hash: hash.into(),
            key_bytes,
            ns_median: 0.0,
            ns_p10: 0.0,
            ns_p90: 0.0,
        },
        pool,
        frame: udp_frame(&payload),
        want,
        ns: Vec::new(),
    }
}

/// A pool of three servers with ketama, caching on, no sampling.
fn pool(hash: HashKind) -> Result<LoadedKv> {
    let servers: Vec<Server> = (0..SERVERS)
        .map(|i| Server {
            addr: format!("10.9.1.{}", i + 1),
            port: PORT,
            weight: 1,
            name: None,
        })
        .collect();
    let dist = Distribution::build(DistKind::Ketama, hash, &servers)?;
    let kv = xdp::load(&KvLoadOptions {
        port: PORT,
        hash,
        dist: DistKind::Ketama,
        sample_every: 0,
        write_settle: Duration::ZERO,
        ..Default::default()
    })
    .context("loading weir_kv (the bench needs root)")?;
    let addrs: Vec<ServerAddr> = (0..SERVERS)
        .map(|i| {
            let mut s = ServerAddr::new(
                IpAddr::V4(Ipv4Addr::new(10, 9, 1, i as u8 + 1)),
                PORT,
                [2, 0, 0, 0, 0x10, i as u8],
            );
            s.live = true;
            s
        })
        .collect();
    kv.set_servers(&addrs)?;
    kv.set_distribution(&dist)?;
    Ok(kv)
}

fn install(kv: &LoadedKv, key: &[u8], value: &[u8]) -> Result<()> {
    let cache = kv.cache();
    let ticket = cache
        .ticket(key)?
        .context("no cache ticket for the hot key")?;
    ensure!(
        cache.put(&ticket, 0, value, None)?,
        "installing the hot key raced a write"
    );
    Ok(())
}

fn once(kv: &LoadedKv, frame: &[u8]) -> Result<(XdpAction, f64)> {
    let mut out = vec![0u8; frame.len() + 2048];
    let o = kv.skel.progs.weir_kv.test_run(ProgramInput {
        data_in: Some(frame),
        data_out: Some(&mut out),
        repeat: 1,
        ..Default::default()
    })?;
    let action = XdpAction::from_raw(o.return_value).context("weir_kv returned no XDP action")?;
    Ok((action, o.duration.as_nanos() as f64))
}

/// Ethernet + IPv4 (checksummed) + UDP (checksum 0: none, as IPv4 allows).
fn udp_frame(payload: &[u8]) -> Vec<u8> {
    Frame::udp(CLIENT.into(), 40000, VIP.into(), PORT)
        .macs([2, 0, 0, 0, 0, 0xcc], [2, 0, 0, 0, 0, 0xaa])
        .payload(payload)
        .zero_udp_csum()
        .bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_carry_a_valid_ipv4_header() {
        let f = udp_frame(b"\x12\x34\0\0\0\x01\0\0get k\r\n");
        assert_eq!(
            weir_core::csum::checksum(&f[14..34], 0),
            0,
            "a correct IPv4 header sums to zero"
        );
        assert_eq!(
            usize::from(u16::from_be_bytes([f[16], f[17]])),
            f.len() - 14
        );
        assert_eq!(&f[36..38], &PORT.to_be_bytes());
    }
}
