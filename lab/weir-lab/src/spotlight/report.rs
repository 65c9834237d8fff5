//! Results of `weir-lab spotlight`: per-run figures, per-cell means with
//! standard errors, the text table, and a figure in the style of Spotlight's
//! Fig. 11 (mean FCT and throughput per policy at one update interval, mean
//! FCT against the update interval).

use std::fmt::Write;

use serde::Serialize;
use weir_plot::{self as plot, Axis, Bar, Bars, Figure, Lines, Panel, Series, Style};

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

// ------------------------------------------------------------- the figure

/// The figure: (a) mean FCT, (b) p99 FCT and (c) throughput per policy at
/// `interval`, as bars with standard-error whiskers; (d) mean FCT against
/// the update interval, one line per policy (dashed: not polled, so flat).
/// A policy keeps its color in every panel.
pub fn figure(cells: &[Cell], interval: u64, subtitle: &str) -> Figure {
    let mut policies: Vec<Policy> = Vec::new();
    for c in cells {
        if !policies.contains(&c.policy) {
            policies.push(c.policy);
        }
    }
    let style_of = |p: Policy| Style {
        color: policies.iter().position(|q| *q == p).unwrap_or(0),
        dashed: !p.polls(),
    };
    let at: Vec<&Cell> = cells
        .iter()
        .filter(|c| c.interval_ms.is_none() || c.interval_ms == Some(interval))
        .collect();
    let bars = |title: &str, unit: &str, value: &dyn Fn(&Cell) -> MeanSe, scale: f64| {
        Panel::Bars(Bars {
            title: format!("{title}, {interval} ms updates"),
            y: Axis::new(unit),
            bars: at
                .iter()
                .map(|c| {
                    let m = value(c);
                    Bar {
                        label: c.label.clone(),
                        value: m.mean * scale,
                        err: Some(m.se * scale),
                        style: Style::solid(style_of(c.policy).color),
                    }
                })
                .collect(),
        })
    };
    let mut intervals: Vec<u64> = cells.iter().filter_map(|c| c.interval_ms).collect();
    intervals.sort_unstable();
    intervals.dedup();
    // Intervals sit evenly spaced, one slot each, like the paper's x axis.
    let slot = |k: usize| k as f64 + 0.5;
    let point = |k: usize, c: &Cell| {
        plot::Point::with_err(slot(k), c.mean_fct_s.mean * 1e3, c.mean_fct_s.se * 1e3)
    };
    let series = policies
        .iter()
        .map(|pol| {
            let points = if pol.polls() {
                intervals
                    .iter()
                    .enumerate()
                    .filter_map(|(k, iv)| {
                        cells
                            .iter()
                            .find(|x| x.policy == *pol && x.interval_ms == Some(*iv))
                            .map(|x| point(k, x))
                    })
                    .collect()
            } else {
                // Not polled: one value, drawn flat across the intervals.
                match cells.iter().find(|x| x.policy == *pol) {
                    Some(x) if !intervals.is_empty() => {
                        vec![point(0, x), point(intervals.len() - 1, x)]
                    }
                    _ => Vec::new(),
                }
            };
            Series {
                name: pol.label(),
                style: style_of(*pol),
                points,
            }
        })
        .collect();
    // Half a slot of room on each side, as the bars have.
    let x = Axis::new("update interval")
        .ticks(
            intervals
                .iter()
                .enumerate()
                .map(|(k, iv)| (slot(k), format!("{iv} ms")))
                .collect(),
        )
        .span(0.0, intervals.len().max(1) as f64);
    Figure {
        title: "weir-lab spotlight: flow completion time and throughput (mean ± standard error)"
            .into(),
        subtitle: Some(subtitle.into()),
        panels: vec![
            bars("(a) mean FCT", "ms", &|c| c.mean_fct_s, 1e3),
            bars("(b) p99 FCT", "ms", &|c| c.p99_fct_s, 1e3),
            bars(
                "(c) aggregate throughput",
                "MB/s",
                &|c| c.throughput_mb_s,
                1.0,
            ),
            Panel::Lines(Lines {
                title: "(d) mean FCT vs update interval".into(),
                x,
                y: Axis::new("ms").from_zero(),
                series,
            }),
        ],
        columns: 2,
        size: (1100, 820),
    }
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
        let fig = figure(&cs, 100, "test & more");
        assert_eq!(fig.subtitle.as_deref(), Some("test & more"));
        let Panel::Lines(d) = &fig.panels[3] else {
            panic!("(d) is a line chart")
        };
        // ECMP flat (dashed) across the one interval, AWFD at it.
        assert_eq!(d.series.len(), 2);
        assert!(d.series[0].style.dashed && !d.series[1].style.dashed);
        assert_eq!(d.series[1].points[0].y, 1350.0);
        let Panel::Bars(a) = &fig.panels[0] else {
            panic!("(a) is a bar chart")
        };
        assert_eq!(a.bars.len(), 2);
        assert_eq!(a.bars[1].label, "AWFD m=4");
        let svg = fig.svg().unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("test &amp; more"));
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
}
