//! The report of `weir-lab bench xdp`: rows, verdicts against the targets, the
//! JSON shape and the text table.

use super::*;

/// One measured row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub family: Family,
    /// "hit" or "miss".
    pub path: &'static str,
    pub mode: Mode,
    /// Connections installed when measured.
    pub conns: u64,
    /// "hot" (one packet repeated), "hot1" (one connection, one repetition
    /// per call) or "spread" (one repetition per call, random connections).
    pub measure: &'static str,
    /// weir_lb, ns per packet: median, min and max over runs.
    pub ns_median: f64,
    pub ns_min: f64,
    pub ns_max: f64,
    /// xdp_floor measured next to it, ns per packet, median over runs.
    pub floor_ns_median: f64,
    /// Per-run ratio weir_lb / floor: median, min and max.
    pub ratio_median: f64,
    pub ratio_min: f64,
    pub ratio_max: f64,
    /// ns_median of this row / ns_median of the hit row with the fewest
    /// connections (same mode and measure).
    pub over_hit_min: Option<f64>,
    pub runs: u32,
    /// Repetitions per test_run call.
    pub repeat: u32,
    /// test_run calls per run.
    pub calls_per_run: u32,
    /// Distinct connections the measurement cycled over.
    pub distinct_keys: u32,
    /// Share of the calls on a connection no packet had used since the
    /// fill, which dated it past every refresh interval (spread rows of a
    /// table large enough: 1.0).
    pub idle_share: f64,
    /// With `--baseline`: the same row's ns_median there, and this row's
    /// ns_median over it (above SLOWER_THAN: printed as slower).
    pub baseline_ns: Option<f64>,
    pub over_baseline: Option<f64>,
}

/// A row whose ns_median exceeds its baseline's by more than this factor is
/// printed as slower (runs on a shared machine move by a few percent).
pub const SLOWER_THAN: f64 = 1.05;

/// The size of the measured `weir_lb` as the kernel holds it.
#[derive(Debug, Clone, Serialize)]
pub struct ProgramSize {
    /// What weir_lb was loaded to carry (weir_dataplane::features), as
    /// "dsr, nat, ..."; None for another program.
    pub features: Option<String>,
    /// Translated (verified, rewritten) BPF instructions, in bytes (8 each).
    pub xlated_bytes: usize,
    /// Native code the JIT made of them, in bytes.
    pub jited_bytes: usize,
    /// The same of the baseline's program, with `--baseline`.
    pub baseline_xlated_bytes: Option<usize>,
    pub baseline_jited_bytes: Option<usize>,
}

/// Figures checked against the targets of issue 2.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub family: Family,
    pub mode: Mode,
    pub measure: &'static str,
    pub hit_min_conns: u64,
    pub hit_max_conns: u64,
    /// hit path with the fewest connections / floor (target <= 2.0).
    pub hit_min_over_floor: f64,
    pub hit_min_over_floor_ok: bool,
    /// hit path with the most connections / with the fewest (target <= 1.5).
    pub hit_max_over_hit_min: f64,
    pub hit_max_over_hit_min_ok: bool,
}

/// An encapsulating mode's hit path against dsr's (issue 12's target),
/// measured interleaved with it on the smallest table.
#[derive(Debug, Clone, Serialize)]
pub struct EncapVerdict {
    pub family: Family,
    pub mode: Mode,
    pub measure: &'static str,
    pub conns: u64,
    /// Median over runs of the mode's ns, and of dsr's.
    pub ns: f64,
    pub dsr_ns: f64,
    /// Median over runs of the per-run ratio to dsr (target <= 1.1).
    pub over_dsr: f64,
    pub over_dsr_ok: bool,
}

/// A QUIC short header routed by connection ID against a UDP datagram
/// hitting its 5-tuple entry, interleaved on the smallest table (quic.rs).
#[derive(Debug, Clone, Serialize)]
pub struct QuicVerdict {
    pub family: Family,
    pub mode: Mode,
    pub measure: &'static str,
    /// Median over runs, ns per packet.
    pub udp_hit_ns: f64,
    pub cid_routed_ns: f64,
    /// Median over runs of the per-run ratio (target <= 1.2).
    pub over_udp_hit: f64,
    pub over_udp_hit_ok: bool,
}

/// One row of `--compare-lru`: the same measure on the largest table with
/// shared and with per-CPU LRU lists, at equal capacity, interleaved.
#[derive(Debug, Clone, Serialize)]
pub struct LruRow {
    pub family: Family,
    /// "hit" or "miss".
    pub path: &'static str,
    pub mode: Mode,
    pub conns: u64,
    /// "hot", "spread" or "allcpus".
    pub measure: &'static str,
    /// Median over runs, ns per packet, of each layout.
    pub shared_ns: f64,
    pub per_cpu_ns: f64,
    /// Per-run ratio per-cpu / shared: median, min and max.
    pub per_cpu_over_shared: f64,
    pub ratio_min: f64,
    pub ratio_max: f64,
    pub runs: u32,
}

/// Everything `--json` writes.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub bench: &'static str,
    pub kernel: String,
    pub cpus: usize,
    pub method: Vec<&'static str>,
    pub config: Config,
    pub targets: Targets,
    /// weir_lb's size (the same program in every instance).
    pub program: ProgramSize,
    /// The JSON report the rows were compared with (`--baseline`).
    pub baseline: Option<String>,
    pub rows: Vec<Row>,
    pub verdicts: Vec<Verdict>,
    pub encap_verdicts: Vec<EncapVerdict>,
    pub quic_verdicts: Vec<QuicVerdict>,
    /// Empty unless `--compare-lru`.
    pub lru_comparison: Vec<LruRow>,
    pub fill_seconds: f64,
    pub total_seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Config {
    pub repeat: u32,
    pub runs: u32,
    pub keys: u32,
    pub spread: u32,
    pub sizes: Vec<u32>,
    pub families: Vec<Family>,
    pub modes: Vec<Mode>,
    pub next_hop: NextHopSource,
    pub lru: Lru,
    pub compare_lru: bool,
    pub seed: u64,
    pub conn_capacity: u32,
    pub half_open_capacity: u32,
    /// Entries in the half-open table before the miss path's SYNs (filled
    /// to its capacity, as a flood leaves it; an LRU may hold a few less).
    pub half_open_before_misses: usize,
    /// Frame length of the IPv4 packets, and of the IPv6 ones.
    pub frame_bytes: usize,
    pub frame_bytes_v6: usize,
    pub packet: &'static str,
    /// The ingress ifindex test_run gave the program (read back from a reverse-NAT entry).
    pub test_run_ingress_ifindex: u32,
    pub loopback_ifindex: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct Targets {
    pub hit1_over_floor_max: f64,
    pub hit1m_over_hit1_max: f64,
    pub encap_hit_over_dsr_max: f64,
    pub quic_routed_over_udp_hit_max: f64,
}

/// (min, median, max).
pub(in crate::bench) fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let med = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    (s[0], med, s[n - 1])
}

/// The text table.
pub fn render(report: &Report) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "weir-lab bench xdp: BPF_PROG_TEST_RUN, {}-byte IPv4/TCP (v4) and {}-byte IPv6/TCP (v6) \
         frames, kernel {}, {} CPUs",
        report.config.frame_bytes, report.config.frame_bytes_v6, report.kernel, report.cpus
    );
    let _ = writeln!(
        s,
        "FIB on, the DIP's next hop {}",
        match report.config.next_hop {
            NextHopSource::Resolved => "resolved into its slot (weir serve's default)",
            NextHopSource::Fib => "not resolved: a FIB lookup per packet",
        }
    );
    let _ = writeln!(
        s,
        "connection tables' LRU: {}",
        match report.config.lru {
            Lru::Shared => "shared (one list for all CPUs, weir serve's default)",
            Lru::PerCpu => "per-cpu (one list per CPU, BPF_F_NO_COMMON_LRU)",
        }
    );
    let _ = writeln!(
        s,
        "hot = one packet x{} per call (runs cycle over {} random installed connections); \
         spread = {} calls x1 repetition, each a random connection; hot1 = {} calls x1 \
         repetition on one connection (ipip and gue have no hot: test_run does not restore \
         the packet they grow)",
        report.config.repeat, report.config.keys, report.config.spread, report.config.spread
    );
    let _ = writeln!(
        s,
        "medians over {} runs; every table size has its own weir_lb, run in rotating order with the floor xdp_floor (swap MACs, XDP_TX);\n\
         ns are the kernel's (hot: whole ns, truncated); test_run does not carry out XDP_TX or XDP_REDIRECT; x hit(1) = median per-run ns / ns with the fewest connections",
        report.config.runs
    );
    let p = &report.program;
    let _ = writeln!(
        s,
        "weir_lb (carrying {}): {} bytes translated ({} instructions), {} bytes jited{}",
        p.features.as_deref().unwrap_or("-"),
        p.xlated_bytes,
        p.xlated_bytes / 8,
        p.jited_bytes,
        match (p.baseline_xlated_bytes, p.baseline_jited_bytes) {
            (Some(x), Some(j)) => format!("; baseline {x} translated, {j} jited"),
            _ => String::new(),
        }
    );
    let _ = writeln!(
        s,
        "hit spread rows: every connection idle since the fill (past every refresh interval) \
         while the table has such left (idle column); miss rows: SYNs into a half-open table \
         of {} entries that a flood left full ({} entries before the first SYN)",
        report.config.half_open_capacity, report.config.half_open_before_misses
    );
    if let Some(b) = &report.baseline {
        let _ = writeln!(
            s,
            "vs base = ns / ns of the same row in {b}; SLOWER above {SLOWER_THAN:.2}x"
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<3} {:<5} {:<4} {:>9} {:<7} {:>9} {:>17} {:>9} {:>8} {:>15} {:>8} {:>5} {:>13}",
        "fam",
        "path",
        "mode",
        "conns",
        "measure",
        "ns/pkt",
        "min..max",
        "floor ns",
        "x floor",
        "x floor range",
        "x hit(1)",
        "idle",
        "vs base"
    );
    let mut rows: Vec<&Row> = report.rows.iter().collect();
    rows.sort_by_key(|r| (r.measure, r.mode.name(), r.path, r.family, r.conns));
    let mut last = ("", "");
    for r in rows {
        if (r.measure, r.mode.name()) != last && last != ("", "") {
            let _ = writeln!(s);
        }
        last = (r.measure, r.mode.name());
        let _ = writeln!(
            s,
            "{:<3} {:<5} {:<4} {:>9} {:<7} {:>9.1} {:>17} {:>9.1} {:>7.2}x {:>15} {:>8} {:>5.2} {:>13}",
            r.family.name(),
            r.path,
            r.mode.name(),
            r.conns,
            r.measure,
            r.ns_median,
            format!("{:.1}..{:.1}", r.ns_min, r.ns_max),
            r.floor_ns_median,
            r.ratio_median,
            format!("{:.2}..{:.2}", r.ratio_min, r.ratio_max),
            r.over_hit_min
                .filter(|_| r.path == "hit")
                .map_or("-".to_string(), |x| format!("{x:.2}x")),
            r.idle_share,
            baseline_cell(r.over_baseline),
        );
    }
    let _ = writeln!(s);
    for v in &report.verdicts {
        let _ = writeln!(
            s,
            "target {} {} {:<6}: hit({}) = {:.2}x floor (<= {:.1}: {}), hit({})/hit({}) = {:.2} (<= {:.1}: {})",
            v.family.name(),
            v.mode.name(),
            v.measure,
            v.hit_min_conns,
            v.hit_min_over_floor,
            report.targets.hit1_over_floor_max,
            if v.hit_min_over_floor_ok { "met" } else { "MISSED" },
            v.hit_max_conns,
            v.hit_min_conns,
            v.hit_max_over_hit_min,
            report.targets.hit1m_over_hit1_max,
            if v.hit_max_over_hit_min_ok { "met" } else { "MISSED" },
        );
    }
    for v in &report.encap_verdicts {
        let _ = writeln!(
            s,
            "target {} {} {:<6}: hit({}) = {:.1} ns, {:.3}x dsr's {:.1} ns in the same runs (<= {:.1}: {})",
            v.family.name(),
            v.mode.name(),
            v.measure,
            v.conns,
            v.ns,
            v.over_dsr,
            v.dsr_ns,
            report.targets.encap_hit_over_dsr_max,
            if v.over_dsr_ok { "met" } else { "MISSED" },
        );
    }
    for v in &report.quic_verdicts {
        let _ = writeln!(
            s,
            "target {} {} {:<6}: QUIC CID-routed short header = {:.1} ns, {:.3}x a UDP 5-tuple hit's {:.1} ns in the same runs (<= {:.1}: {})",
            v.family.name(),
            v.mode.name(),
            v.measure,
            v.cid_routed_ns,
            v.over_udp_hit,
            v.udp_hit_ns,
            report.targets.quic_routed_over_udp_hit_max,
            if v.over_udp_hit_ok { "met" } else { "MISSED" },
        );
    }
    if !report.lru_comparison.is_empty() {
        let _ = writeln!(
            s,
            "\nLRU layouts at equal capacity ({} entries, filled evenly from every CPU), interleaved in the same runs:",
            report.config.conn_capacity
        );
        let _ = writeln!(
            s,
            "{:<3} {:<5} {:<4} {:>9} {:<7} {:>10} {:>11} {:>17} {:>13}",
            "fam",
            "path",
            "mode",
            "conns",
            "measure",
            "shared ns",
            "per-cpu ns",
            "per-cpu/shared",
            "range"
        );
        for r in &report.lru_comparison {
            let _ = writeln!(
                s,
                "{:<3} {:<5} {:<4} {:>9} {:<7} {:>10.1} {:>11.1} {:>16.2}x {:>13}",
                r.family.name(),
                r.path,
                r.mode.name(),
                r.conns,
                r.measure,
                r.shared_ns,
                r.per_cpu_ns,
                r.per_cpu_over_shared,
                format!("{:.2}..{:.2}", r.ratio_min, r.ratio_max),
            );
        }
    }
    s
}

/// The "vs base" cell of a row: its ratio to the baseline, marked SLOWER
/// above SLOWER_THAN; "-" without a baseline row.
fn baseline_cell(over_baseline: Option<f64>) -> String {
    match over_baseline {
        Some(x) if x > SLOWER_THAN => format!("{x:.2}x SLOWER"),
        Some(x) => format!("{x:.2}x"),
        None => "-".to_string(),
    }
}

/// Compares `report` with an earlier report's JSON: each row with the row
/// of the same family, path, mode, table size and measure there, and the
/// program's size.
pub(super) fn compare_with_baseline(report: &mut Report, path: &std::path::Path) -> Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let base: serde_json::Value = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not JSON; --baseline takes a file that `weir-lab bench xdp --json` wrote",
            path.display()
        )
    })?;
    let rows = base["rows"].as_array().with_context(|| {
        format!(
            "{} has no \"rows\"; --baseline takes a file that `weir-lab bench xdp --json` wrote",
            path.display()
        )
    })?;
    let key = |v: &serde_json::Value| {
        (
            v["family"].as_str().map(str::to_string),
            v["path"].as_str().map(str::to_string),
            v["mode"].as_str().map(str::to_string),
            v["conns"].as_u64(),
            v["measure"].as_str().map(str::to_string),
        )
    };
    for row in &mut report.rows {
        let mine = serde_json::to_value(&*row)?;
        if let Some(b) = rows.iter().find(|b| key(b) == key(&mine)) {
            if let Some(ns) = b["ns_median"].as_f64().filter(|&ns| ns > 0.0) {
                row.baseline_ns = Some(ns);
                row.over_baseline = Some(row.ns_median / ns);
            }
        }
    }
    let size = |k: &str| base["program"][k].as_u64().map(|v| v as usize);
    report.program.baseline_xlated_bytes = size("xlated_bytes");
    report.program.baseline_jited_bytes = size("jited_bytes");
    report.baseline = Some(path.display().to_string());
    Ok(())
}

/// The translated and jited size of `prog`, from the kernel's program info.
pub(in crate::bench) fn program_size(prog: &ProgramMut<'_>) -> Result<ProgramSize> {
    use libbpf_rs::query::{ProgInfoIter, ProgInfoQueryOptions};
    use std::os::fd::AsFd;
    let id = libbpf_rs::Program::id_from_fd(prog.as_fd()).context("reading weir_lb's id")?;
    let opts = ProgInfoQueryOptions::default()
        .include_xlated_prog_insns(true)
        .include_jited_prog_insns(true);
    let info = ProgInfoIter::with_query_opts(opts)
        .find(|p| p.id == id)
        .context("weir_lb is not among the kernel's programs")?;
    Ok(ProgramSize {
        features: None,
        xlated_bytes: info.xlated_prog_insns.len(),
        jited_bytes: info.jited_prog_insns.len(),
        baseline_xlated_bytes: None,
        baseline_jited_bytes: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_slower_than_its_baseline_is_marked() {
        assert_eq!(baseline_cell(None), "-");
        assert_eq!(baseline_cell(Some(0.5)), "0.50x");
        assert_eq!(baseline_cell(Some(SLOWER_THAN)), "1.05x");
        assert_eq!(baseline_cell(Some(1.2)), "1.20x SLOWER");
    }

    #[test]
    fn a_baseline_that_is_no_report_is_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("weir-bench-base-{}", std::process::id()));
        std::fs::write(&dir, "{\"bench\": \"xdp\"}").unwrap();
        let mut report = Report {
            bench: "xdp",
            kernel: String::new(),
            cpus: 1,
            method: Vec::new(),
            config: Config {
                repeat: 1,
                runs: 1,
                keys: 1,
                spread: 1,
                sizes: vec![1],
                families: vec![Family::V4],
                modes: vec![Mode::Nat],
                next_hop: NextHopSource::Resolved,
                lru: Lru::Shared,
                compare_lru: false,
                seed: 0,
                conn_capacity: 1,
                half_open_capacity: 1,
                half_open_before_misses: 0,
                frame_bytes: 64,
                frame_bytes_v6: 84,
                packet: "",
                test_run_ingress_ifindex: 1,
                loopback_ifindex: 1,
            },
            targets: Targets {
                hit1_over_floor_max: 0.0,
                hit1m_over_hit1_max: 0.0,
                encap_hit_over_dsr_max: 0.0,
                quic_routed_over_udp_hit_max: 0.0,
            },
            program: ProgramSize {
                features: None,
                xlated_bytes: 8,
                jited_bytes: 8,
                baseline_xlated_bytes: None,
                baseline_jited_bytes: None,
            },
            baseline: None,
            rows: Vec::new(),
            verdicts: Vec::new(),
            encap_verdicts: Vec::new(),
            quic_verdicts: Vec::new(),
            lru_comparison: Vec::new(),
            fill_seconds: 0.0,
            total_seconds: 0.0,
        };
        let err = compare_with_baseline(&mut report, &dir).unwrap_err();
        std::fs::remove_file(&dir).unwrap();
        let msg = format!("{err:#}");
        assert!(msg.contains("has no \"rows\""), "{msg}");
        assert!(msg.contains("--baseline"), "{msg}");
    }
}
