//! Results of `weir lab spotlight`: per-run figures, per-cell means with
//! standard errors, the text table, and a hand-written SVG in the style of
//! Spotlight's Fig. 11 (mean FCT and throughput per policy at one update
//! interval, mean FCT against the update interval).

use std::fmt::Write;

use serde::Serialize;

use super::workload::{ClientRun, Outcome};

/// The paper's testbed claims (Spotlight V-B, Fig. 11a/b, 100 ms updates):
/// AWFD m = 4 against ECMP.
pub const PAPER_FCT_CHANGE: f64 = -0.09;
pub const PAPER_THROUGHPUT_CHANGE: f64 = 0.07;

/// A dispatch policy of the experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Policy {
    /// Equal static weights, no controller at all.
    Static,
    /// The controller's ECMP (AWFD with m = 0).
    Ecmp,
    /// Least congested first (AWFD with m = 1).
    Lcf,
    /// AWFD with maximum weight m.
    Awfd { m: u32 },
}

impl Policy {
    /// `static`, `ecmp`, `lcf`, `awfd<m>` (also `awfd-<m>`, `awfd=<m>`).
    pub fn parse(s: &str) -> Option<Policy> {
        let s = s.trim().to_ascii_lowercase();
        match s.as_str() {
            "static" => Some(Policy::Static),
            "ecmp" | "awfd0" => Some(Policy::Ecmp),
            "lcf" | "awfd1" => Some(Policy::Lcf),
            _ => {
                let m: u32 = s
                    .strip_prefix("awfd")?
                    .trim_start_matches(['-', '='])
                    .parse()
                    .ok()?;
                match m {
                    0 => Some(Policy::Ecmp),
                    1 => Some(Policy::Lcf),
                    2..=16 => Some(Policy::Awfd { m }),
                    _ => None,
                }
            }
        }
    }

    pub fn label(&self) -> String {
        match self {
            Policy::Static => "static (equal)".into(),
            Policy::Ecmp => "ECMP (m=0)".into(),
            Policy::Lcf => "LCF (m=1)".into(),
            Policy::Awfd { m } => format!("AWFD m={m}"),
        }
    }

    /// AWFD's m for this policy (Spotlight's x axis).
    pub fn m(&self) -> u32 {
        match self {
            Policy::Static | Policy::Ecmp => 0,
            Policy::Lcf => 1,
            Policy::Awfd { m } => *m,
        }
    }

    /// ECMP does not react to load, so its result does not depend on the
    /// update interval; it runs once per repetition.
    pub fn polls(&self) -> bool {
        matches!(self, Policy::Lcf | Policy::Awfd { .. })
    }

    /// The baselines the others are compared with.
    pub fn is_ecmp(&self) -> bool {
        matches!(self, Policy::Static | Policy::Ecmp)
    }
}

/// Everything measured in one run.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    pub policy: Policy,
    pub label: String,
    /// None for policies that do not poll.
    pub interval_ms: Option<u64>,
    pub rep: usize,
    pub seed: u64,
    /// Requests in the schedule, and those that arrived in the measured window.
    pub requests: usize,
    pub measured: usize,
    pub done: usize,
    /// Reset or cut short after being established: PCC violations.
    pub pcc_violations: usize,
    pub connect_failed: usize,
    pub bad_response: usize,
    /// Still open at the drain deadline (their FCT counts as the time they
    /// had run: a lower bound).
    pub unfinished: usize,
    pub mean_fct_s: f64,
    pub p50_fct_s: f64,
    pub p99_fct_s: f64,
    /// MB/s (10^6 bytes) received by the client in the measured window.
    pub throughput_mb_s: f64,
    /// Share of the measured requests' bytes served by the fast backends.
    pub fast_share: f64,
    /// Requests per backend (1-based order).
    pub per_backend: Vec<usize>,
    /// The client's worst lag behind its schedule, seconds.
    pub max_start_lag_s: f64,
    /// First few errors, for the report.
    pub errors: Vec<String>,
    pub wall_s: f64,
    /// What the controller did in this run (None without a controller).
    pub controller: Option<ControllerStats>,
}

/// The controller's own counters at the end of a run (from its
/// `controller.json`).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ControllerStats {
    pub ticks: u64,
    pub tables_published: u64,
    /// Failed agent polls (timeouts, refused, bad replies), all DIPs.
    pub agent_errors: u64,
}

impl ControllerStats {
    /// Reads the counters from `controller.json`'s JSON.
    pub fn from_json(v: &serde_json::Value) -> ControllerStats {
        let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
        let agent_errors = v["vips"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|vip| vip["dips"].as_array().into_iter().flatten())
            .flat_map(|d| d["agent_errors"].as_object().into_iter().flatten())
            .map(|(_, c)| n(c))
            .sum();
        ControllerStats {
            ticks: n(&v["ticks"]),
            tables_published: n(&v["tables_published"]),
            agent_errors,
        }
    }
}

/// Turns a client run into a result. Flows that arrive in
/// `[warmup, warmup + measure)` count; `fast` is the number of fast
/// backends (indices 1..=fast).
#[allow(clippy::too_many_arguments)]
pub fn summarize(
    policy: Policy,
    interval_ms: Option<u64>,
    rep: usize,
    seed: u64,
    run: &ClientRun,
    warmup: f64,
    measure: f64,
    fast: usize,
    backends: usize,
    wall_s: f64,
) -> RunResult {
    let in_window = |at: f64| at >= warmup && at < warmup + measure;
    let mut fcts = Vec::new();
    let (mut done, mut broken, mut connect_failed, mut bad, mut unfinished) = (0, 0, 0, 0, 0);
    let (mut fast_bytes, mut all_bytes) = (0u64, 0u64);
    let mut per_backend = vec![0usize; backends];
    let mut errors = Vec::new();
    let mut measured = 0;
    for f in &run.flows {
        // Violations count over the whole run, not just the window.
        match f.outcome {
            Outcome::Broken => broken += 1,
            Outcome::ConnectFailed => connect_failed += 1,
            Outcome::BadResponse => bad += 1,
            _ => {}
        }
        if let (Some(e), true) = (&f.error, errors.len() < 5) {
            if f.outcome != Outcome::Unfinished {
                errors.push(e.clone());
            }
        }
        if !in_window(f.req.at) {
            continue;
        }
        measured += 1;
        if let Some(b) = f.backend.filter(|b| (1..=backends).contains(b)) {
            per_backend[b - 1] += 1;
        }
        match f.outcome {
            Outcome::Done => {
                done += 1;
                fcts.push(f.fct);
                all_bytes += f.req.size;
                if f.backend.is_some_and(|b| b <= fast) {
                    fast_bytes += f.req.size;
                }
            }
            Outcome::Unfinished => {
                unfinished += 1;
                fcts.push(f.fct);
            }
            _ => {}
        }
    }
    fcts.sort_by(|a, b| a.total_cmp(b));
    RunResult {
        policy,
        label: policy.label(),
        interval_ms,
        rep,
        seed,
        requests: run.flows.len(),
        measured,
        done,
        pcc_violations: broken,
        connect_failed,
        bad_response: bad,
        unfinished,
        mean_fct_s: mean(&fcts),
        p50_fct_s: quantile(&fcts, 0.50),
        p99_fct_s: quantile(&fcts, 0.99),
        throughput_mb_s: run.window_bytes as f64 / run.window_s / 1e6,
        fast_share: if all_bytes > 0 {
            fast_bytes as f64 / all_bytes as f64
        } else {
            0.0
        },
        per_backend,
        max_start_lag_s: run.max_start_lag,
        errors,
        wall_s,
        controller: None,
    }
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Nearest-rank quantile of sorted values.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Mean and standard error of the mean (sd / sqrt(n); 0 for one value).
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct MeanSe {
    pub mean: f64,
    pub se: f64,
    pub n: usize,
}

impl MeanSe {
    pub fn of(v: &[f64]) -> MeanSe {
        let v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
        let n = v.len();
        if n == 0 {
            return MeanSe {
                mean: f64::NAN,
                se: f64::NAN,
                n,
            };
        }
        let m = v.iter().sum::<f64>() / n as f64;
        let se = if n > 1 {
            (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
                / (n as f64).sqrt()
        } else {
            0.0
        };
        MeanSe { mean: m, se, n }
    }
}

/// One (policy, interval) cell over its repetitions.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub policy: Policy,
    pub label: String,
    pub m: u32,
    pub interval_ms: Option<u64>,
    pub runs: usize,
    pub mean_fct_s: MeanSe,
    pub p99_fct_s: MeanSe,
    pub throughput_mb_s: MeanSe,
    pub fast_share: MeanSe,
    /// Relative change against the ECMP baseline of the same repetitions
    /// (mean of per-repetition ratios - 1); None without a baseline.
    pub mean_fct_vs_ecmp: Option<MeanSe>,
    pub throughput_vs_ecmp: Option<MeanSe>,
    pub pcc_violations: usize,
    pub connect_failed: usize,
    pub unfinished: usize,
}

/// Groups runs into cells, in the order cells first appear.
pub fn cells(runs: &[RunResult]) -> Vec<Cell> {
    let mut keys: Vec<(Policy, Option<u64>)> = Vec::new();
    for r in runs {
        if !keys.contains(&(r.policy, r.interval_ms)) {
            keys.push((r.policy, r.interval_ms));
        }
    }
    // The controller's ECMP if it ran, else equal static weights.
    let baseline = |rep: usize| {
        let of = |p: Policy| runs.iter().find(|r| r.policy == p && r.rep == rep);
        of(Policy::Ecmp).or_else(|| of(Policy::Static))
    };
    keys.into_iter()
        .map(|(policy, interval_ms)| {
            let rs: Vec<&RunResult> = runs
                .iter()
                .filter(|r| r.policy == policy && r.interval_ms == interval_ms)
                .collect();
            let col =
                |f: &dyn Fn(&RunResult) -> f64| -> Vec<f64> { rs.iter().map(|r| f(r)).collect() };
            let vs = |f: &dyn Fn(&RunResult) -> f64| -> Option<MeanSe> {
                let v: Vec<f64> = rs
                    .iter()
                    .filter_map(|r| baseline(r.rep).map(|b| f(r) / f(b) - 1.0))
                    .collect();
                (!v.is_empty()).then(|| MeanSe::of(&v))
            };
            Cell {
                policy,
                label: policy.label(),
                m: policy.m(),
                interval_ms,
                runs: rs.len(),
                mean_fct_s: MeanSe::of(&col(&|r| r.mean_fct_s)),
                p99_fct_s: MeanSe::of(&col(&|r| r.p99_fct_s)),
                throughput_mb_s: MeanSe::of(&col(&|r| r.throughput_mb_s)),
                fast_share: MeanSe::of(&col(&|r| r.fast_share)),
                mean_fct_vs_ecmp: vs(&|r| r.mean_fct_s),
                throughput_vs_ecmp: vs(&|r| r.throughput_mb_s),
                pcc_violations: rs.iter().map(|r| r.pcc_violations).sum(),
                connect_failed: rs.iter().map(|r| r.connect_failed).sum(),
                unfinished: rs.iter().map(|r| r.unfinished).sum(),
            }
        })
        .collect()
}

fn pm(m: &MeanSe, scale: f64, prec: usize) -> String {
    if !m.mean.is_finite() {
        return "-".into();
    }
    format!("{:.prec$} ± {:.prec$}", m.mean * scale, m.se * scale)
}

fn pct(m: &Option<MeanSe>) -> String {
    match m {
        Some(m) if m.mean.is_finite() => format!("{:+.1}% ± {:.1}", m.mean * 100.0, m.se * 100.0),
        _ => "-".into(),
    }
}

fn interval_label(i: Option<u64>) -> String {
    i.map_or("-".into(), |ms| format!("{ms} ms"))
}

/// The text table, one row per cell.
pub fn table(cells: &[Cell]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<14} {:>8} {:>4} {:>17} {:>19} {:>15} {:>15} {:>15} {:>6} {:>4} {:>6}",
        "policy",
        "interval",
        "runs",
        "mean FCT ms",
        "p99 FCT ms",
        "thr MB/s",
        "FCT vs ECMP",
        "thr vs ECMP",
        "fast",
        "PCC",
        "unfin"
    );
    for c in cells {
        let _ = writeln!(
            s,
            "{:<14} {:>8} {:>4} {:>17} {:>19} {:>15} {:>15} {:>15} {:>6.3} {:>4} {:>6}",
            c.label,
            interval_label(c.interval_ms),
            c.runs,
            pm(&c.mean_fct_s, 1e3, 1),
            pm(&c.p99_fct_s, 1e3, 0),
            pm(&c.throughput_mb_s, 1.0, 2),
            pct(&c.mean_fct_vs_ecmp),
            pct(&c.throughput_vs_ecmp),
            c.fast_share.mean,
            c.pcc_violations,
            c.unfinished
        );
    }
    s
}

/// The paper's claim next to ours at `interval` (AWFD m=4 vs ECMP).
pub fn paper_comparison(cells: &[Cell], interval: u64) -> String {
    let ours = cells
        .iter()
        .find(|c| c.policy == Policy::Awfd { m: 4 } && c.interval_ms == Some(interval));
    let mut s = format!(
        "AWFD m=4 vs ECMP at {interval} ms updates:\n  Spotlight V-B (paper): mean FCT {:+.0}%, throughput {:+.0}%\n",
        PAPER_FCT_CHANGE * 100.0,
        PAPER_THROUGHPUT_CHANGE * 100.0
    );
    match ours {
        Some(c) => {
            let _ = writeln!(
                s,
                "  this run:              mean FCT {}, throughput {} (mean ± se of per-repetition ratios)",
                pct(&c.mean_fct_vs_ecmp),
                pct(&c.throughput_vs_ecmp)
            );
        }
        None => s.push_str("  this run:              (AWFD m=4 at this interval was not run)\n"),
    }
    s
}

// ---------------------------------------------------------------- SVG

const PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A "nice" axis top and step for values in [0, max].
fn nice_axis(max: f64) -> (f64, f64) {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|k| k * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    ((max / step).ceil() * step, step)
}

fn fmt_tick(v: f64, step: f64) -> String {
    if step >= 1.0 {
        format!("{v:.0}")
    } else if step >= 0.1 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Reads one figure of a cell.
type Metric = dyn Fn(&Cell) -> MeanSe;

/// A panel's frame: axes, grid and labels; returns the y mapping.
struct Panel {
    x: f64,
    y: f64,
    w: f64,
    h: f64,
    top: f64,
}

impl Panel {
    fn py(&self, v: f64) -> f64 {
        self.y + self.h * (1.0 - (v / self.top).clamp(0.0, 1.05))
    }

    /// Draws the frame of a panel at `(x, y, w, h)` whose values reach `ymax`.
    fn frame(s: &mut String, rect: [f64; 4], title: &str, ylabel: &str, ymax: f64) -> Panel {
        let [x, y, w, h] = rect;
        let (top, step) = nice_axis(ymax * 1.08);
        let p = Panel { x, y, w, h, top };
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="13">{}</text>"#,
            x + w / 2.0,
            y - 10.0,
            esc(title)
        );
        let mut v = 0.0;
        while v <= top + step * 0.01 {
            let yy = p.py(v);
            let _ = writeln!(
                s,
                r##"<line x1="{x}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#e0e0e0"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                x + w,
                x - 6.0,
                yy + 4.0,
                fmt_tick(v, step)
            );
            v += step;
        }
        let _ = writeln!(
            s,
            r#"<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="none" stroke="black"/>"#
        );
        let (lx, ly) = (x - 48.0, y + h / 2.0);
        let _ = writeln!(
            s,
            r#"<text x="{lx:.1}" y="{ly:.1}" text-anchor="middle" transform="rotate(-90 {lx:.1} {ly:.1})">{}</text>"#,
            esc(ylabel)
        );
        p
    }

    fn error_bar(&self, s: &mut String, cx: f64, m: &MeanSe, scale: f64) {
        if !(m.se.is_finite() && m.se > 0.0) {
            return;
        }
        let (lo, hi) = (
            self.py((m.mean - m.se) * scale),
            self.py((m.mean + m.se) * scale),
        );
        let _ = writeln!(
            s,
            r#"<path d="M{cx:.1},{lo:.1}V{hi:.1}M{:.1},{lo:.1}H{:.1}M{:.1},{hi:.1}H{:.1}" stroke="black" fill="none"/>"#,
            cx - 4.0,
            cx + 4.0,
            cx - 4.0,
            cx + 4.0
        );
    }
}

/// Bars, one per cell, with standard-error whiskers.
fn bars(
    s: &mut String,
    p: &Panel,
    cells: &[&Cell],
    value: &dyn Fn(&Cell) -> MeanSe,
    scale: f64,
    color: &dyn Fn(&Cell) -> &'static str,
) {
    let n = cells.len().max(1) as f64;
    let slot = p.w / n;
    for (k, c) in cells.iter().enumerate() {
        let m = value(c);
        if !m.mean.is_finite() {
            continue;
        }
        let cx = p.x + slot * (k as f64 + 0.5);
        let bw = slot * 0.6;
        let top = p.py(m.mean * scale);
        let _ = writeln!(
            s,
            r#"<rect x="{:.1}" y="{top:.1}" width="{bw:.1}" height="{:.1}" fill="{}"><title>{}: {:.3} ± {:.3}</title></rect>"#,
            cx - bw / 2.0,
            p.y + p.h - top,
            color(c),
            esc(&c.label),
            m.mean * scale,
            m.se * scale
        );
        p.error_bar(s, cx, &m, scale);
        let _ = writeln!(
            s,
            r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="11">{}</text>"#,
            p.y + p.h + 16.0,
            esc(&c.label)
        );
    }
}

/// The figure: (a) mean FCT, (b) p99 FCT and (c) throughput per policy at
/// `interval`, (d) mean FCT against the update interval.
pub fn svg(cells: &[Cell], interval: u64, subtitle: &str) -> String {
    let (w, h) = (1000.0, 760.0);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">weir lab spotlight: flow completion time and throughput (mean ± standard error)</text>"#,
        w / 2.0
    );
    let _ = writeln!(
        s,
        r##"<text x="{}" y="40" text-anchor="middle" font-size="11" fill="#555">{}</text>"##,
        w / 2.0,
        esc(subtitle)
    );
    // Color per policy, stable across panels.
    let mut policies: Vec<Policy> = Vec::new();
    for c in cells {
        if !policies.contains(&c.policy) {
            policies.push(c.policy);
        }
    }
    let color_of =
        |p: Policy| PALETTE[policies.iter().position(|q| *q == p).unwrap_or(0) % PALETTE.len()];
    let at: Vec<&Cell> = cells
        .iter()
        .filter(|c| c.interval_ms.is_none() || c.interval_ms == Some(interval))
        .collect();
    let max_of = |f: &dyn Fn(&Cell) -> MeanSe, scale: f64| {
        at.iter()
            .map(|c| {
                let m = f(c);
                (m.mean + m.se.max(0.0)) * scale
            })
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max)
    };
    let (pw, ph) = (370.0, 230.0);
    let panels: [(f64, f64, &str, &str, &Metric, f64); 3] = [
        (
            90.0,
            90.0,
            "(a) mean FCT",
            "ms",
            &|c: &Cell| c.mean_fct_s,
            1e3,
        ),
        (
            580.0,
            90.0,
            "(b) p99 FCT",
            "ms",
            &|c: &Cell| c.p99_fct_s,
            1e3,
        ),
        (
            90.0,
            440.0,
            "(c) aggregate throughput",
            "MB/s",
            &|c: &Cell| c.throughput_mb_s,
            1.0,
        ),
    ];
    for (x, y, title, unit, f, scale) in panels {
        let p = Panel::frame(
            &mut s,
            [x, y, pw, ph],
            &format!("{title}, {interval} ms updates"),
            unit,
            max_of(f, scale),
        );
        bars(&mut s, &p, &at, f, scale, &|c: &Cell| color_of(c.policy));
    }
    // (d) mean FCT against the interval.
    let mut intervals: Vec<u64> = cells.iter().filter_map(|c| c.interval_ms).collect();
    intervals.sort_unstable();
    intervals.dedup();
    let ymax = cells
        .iter()
        .map(|c| (c.mean_fct_s.mean + c.mean_fct_s.se.max(0.0)) * 1e3)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let p = Panel::frame(
        &mut s,
        [580.0, 440.0, pw, ph],
        "(d) mean FCT vs update interval",
        "ms",
        ymax,
    );
    let nx = intervals.len().max(1) as f64;
    let px = |k: usize| p.x + p.w * (k as f64 + 0.5) / nx;
    for (k, iv) in intervals.iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{iv} ms</text>"#,
            px(k),
            p.y + p.h + 16.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">update interval</text>"#,
        p.x + p.w / 2.0,
        p.y + p.h + 34.0
    );
    for (li, pol) in policies.iter().enumerate() {
        let c = color_of(*pol);
        let pts: Vec<(f64, MeanSe)> = if pol.polls() {
            intervals
                .iter()
                .enumerate()
                .filter_map(|(k, iv)| {
                    cells
                        .iter()
                        .find(|x| x.policy == *pol && x.interval_ms == Some(*iv))
                        .map(|x| (px(k), x.mean_fct_s))
                })
                .collect()
        } else {
            // Not polled: one value, drawn flat across the intervals.
            match cells.iter().find(|x| x.policy == *pol) {
                Some(x) if !intervals.is_empty() => vec![
                    (px(0), x.mean_fct_s),
                    (px(intervals.len() - 1), x.mean_fct_s),
                ],
                _ => Vec::new(),
            }
        };
        let dash = if pol.polls() {
            ""
        } else {
            r#" stroke-dasharray="6 4""#
        };
        let line: Vec<String> = pts
            .iter()
            .filter(|(_, m)| m.mean.is_finite())
            .map(|(x, m)| format!("{x:.1},{:.1}", p.py(m.mean * 1e3)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"{dash}/>"#,
            line.join(" ")
        );
        for (x, m) in &pts {
            if m.mean.is_finite() {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{x:.1}" cy="{:.1}" r="3" fill="{c}"><title>{}: {:.1} ± {:.1} ms</title></circle>"#,
                    p.py(m.mean * 1e3),
                    esc(&pol.label()),
                    m.mean * 1e3,
                    m.se * 1e3
                );
                p.error_bar(&mut s, *x, m, 1e3);
            }
        }
        // Legend under the figure.
        let lx = 90.0 + 170.0 * li as f64;
        let ly = h - 24.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="6"{dash}/><text x="{}" y="{}">{}</text>"#,
            lx + 24.0,
            lx + 30.0,
            ly + 4.0,
            esc(&pol.label())
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse() {
        assert_eq!(Policy::parse("ecmp"), Some(Policy::Ecmp));
        assert_eq!(Policy::parse("awfd0"), Some(Policy::Ecmp));
        assert_eq!(Policy::parse("LCF"), Some(Policy::Lcf));
        assert_eq!(Policy::parse("awfd4"), Some(Policy::Awfd { m: 4 }));
        assert_eq!(Policy::parse("awfd-2"), Some(Policy::Awfd { m: 2 }));
        assert_eq!(Policy::parse("awfd=16"), Some(Policy::Awfd { m: 16 }));
        assert_eq!(Policy::parse("awfd17"), None);
        assert_eq!(Policy::parse("static"), Some(Policy::Static));
        assert_eq!(Policy::parse("rr"), None);
    }

    #[test]
    fn mean_se_and_quantiles() {
        let m = MeanSe::of(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(m.mean, 2.5);
        // sd = sqrt(5/3), se = sd / 2
        assert!((m.se - (5.0f64 / 3.0).sqrt() / 2.0).abs() < 1e-12);
        assert_eq!(MeanSe::of(&[7.0]).se, 0.0);
        assert!(MeanSe::of(&[]).mean.is_nan());
        let v: Vec<f64> = (1..=100).map(|x| x as f64).collect();
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
        assert_eq!(quantile(&[3.0], 0.99), 3.0);
    }

    fn run(policy: Policy, interval: Option<u64>, rep: usize, fct: f64, thr: f64) -> RunResult {
        RunResult {
            policy,
            label: policy.label(),
            interval_ms: interval,
            rep,
            seed: rep as u64,
            requests: 10,
            measured: 10,
            done: 10,
            pcc_violations: 0,
            connect_failed: 0,
            bad_response: 0,
            unfinished: 0,
            mean_fct_s: fct,
            p50_fct_s: fct,
            p99_fct_s: fct * 4.0,
            throughput_mb_s: thr,
            fast_share: 0.5,
            per_backend: vec![5, 5],
            max_start_lag_s: 0.0,
            errors: vec![],
            wall_s: 1.0,
            controller: None,
        }
    }

    #[test]
    fn cells_compare_against_ecmp_per_repetition() {
        let runs = vec![
            run(Policy::Ecmp, None, 0, 1.0, 10.0),
            run(Policy::Awfd { m: 4 }, Some(100), 0, 0.9, 11.0),
            run(Policy::Ecmp, None, 1, 2.0, 10.0),
            run(Policy::Awfd { m: 4 }, Some(100), 1, 1.8, 10.0),
        ];
        let cs = cells(&runs);
        assert_eq!(cs.len(), 2);
        let a = &cs[1];
        assert_eq!(a.runs, 2);
        let f = a.mean_fct_vs_ecmp.unwrap();
        assert!((f.mean + 0.1).abs() < 1e-9 && f.se.abs() < 1e-9, "{f:?}");
        let t = a.throughput_vs_ecmp.unwrap();
        assert!((t.mean - 0.05).abs() < 1e-9);
        let text = table(&cs);
        assert!(
            text.contains("AWFD m=4") && text.contains("-10.0%"),
            "{text}"
        );
        let cmp = paper_comparison(&cs, 100);
        assert!(cmp.contains("-9%") && cmp.contains("-10.0%"), "{cmp}");
        let svg = svg(&cs, 100, "test & more");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("test &amp; more"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(!svg.contains("NaN"));
    }

    #[test]
    fn controller_stats_from_its_json() {
        let v = serde_json::json!({
            "ticks": 90, "tables_published": 40,
            "vips": [{"dips": [
                {"agent_errors": {"timeout": 2, "refused": 1}},
                {"agent_errors": {}},
                {"agent_errors": {"timeout": 4}}
            ]}]
        });
        assert_eq!(
            ControllerStats::from_json(&v),
            ControllerStats {
                ticks: 90,
                tables_published: 40,
                agent_errors: 7
            }
        );
        assert_eq!(
            ControllerStats::from_json(&serde_json::json!({})),
            ControllerStats::default()
        );
    }

    #[test]
    fn nice_axes() {
        assert_eq!(nice_axis(9.0), (10.0, 2.0));
        assert_eq!(nice_axis(430.0), (500.0, 100.0));
        assert_eq!(nice_axis(0.0), (1.0, 0.2));
    }
}
