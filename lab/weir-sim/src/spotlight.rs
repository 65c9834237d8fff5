//! Spotlight Fig. 7 (Omega against update interval, one line per policy)
//! and Fig. 9 (Omega of AWFD against m at one interval).

use std::collections::HashMap;
use std::path::Path;

use anyhow::Context;
use serde::Serialize;
use weir_core::dispatch::{MaxWeight, Policy};
use weir_plot::{self as plot, Axis, Figure, Lines, Panel, Series, Style};

use crate::model::PoolParams;
use crate::report::{matrix_table, points_csv, points_table};
use crate::sweep::{aggregate, fmt_ms, run_jobs, Job, Point, Scenario};
use crate::trace::{SyntheticParams, TraceStats};

/// How Omega is defined, stored in the JSON output.
pub const OMEGA_DEFINITION: &str = "Omega_j = (integral over the window W of sum_i min(D_i(t), C_i) dt) / (C_j * |W|), \
where D_i(t) is the traffic requested from DIP i of VIP j by the flows it serves, C_i its capacity, \
C_j = sum_i C_i; overall Omega = sum_j integral / (sum_j C_j * |W|). W runs from the warm-up to the \
last arrival. An overloaded DIP shares C_i max-min fairly, so it carries exactly C_i.";

/// Everything `weir-lab sim spotlight` varies.
#[derive(Debug, Clone, Serialize)]
pub struct SpotlightConfig {
    pub trace: SyntheticParams,
    pub pool: PoolParams,
    /// Independent traces (seeds trace.seed, trace.seed + 1, ...), averaged.
    pub runs: usize,
    /// Fig. 7 policies.
    pub policies: Vec<Policy>,
    /// Fig. 7 update intervals, seconds.
    pub intervals: Vec<f64>,
    /// Fig. 9 values of m.
    pub ms: Vec<MaxWeight>,
    /// Fig. 9 update interval, seconds.
    pub fig9_interval: f64,
    pub threads: usize,
}

impl Default for SpotlightConfig {
    fn default() -> Self {
        SpotlightConfig {
            trace: SyntheticParams::default(),
            pool: PoolParams::default(),
            runs: 3,
            policies: default_policies(),
            intervals: default_intervals(),
            ms: default_ms(),
            fig9_interval: 0.5,
            threads: 0,
        }
    }
}

pub fn default_policies() -> Vec<Policy> {
    vec![
        Policy::Ecmp,
        Policy::Lcf,
        Policy::Awfd(MaxWeight::Finite(4)),
        Policy::Awfd(MaxWeight::Finite(16)),
        Policy::Weighted,
        Policy::Optimum,
    ]
}

/// 1 ms to 2 s, roughly 1-2-5 per decade.
pub fn default_intervals() -> Vec<f64> {
    [
        1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0,
    ]
    .iter()
    .map(|ms| ms / 1e3)
    .collect()
}

/// m = 1..16 and infinity.
pub fn default_ms() -> Vec<MaxWeight> {
    (1..=16)
        .map(MaxWeight::Finite)
        .chain([MaxWeight::Infinite])
        .collect()
}

/// One Fig. 9 point.
#[derive(Debug, Clone, Serialize)]
pub struct MPoint {
    pub m: String,
    #[serde(flatten)]
    pub point: Point,
}

/// The results of `weir-lab sim spotlight`.
#[derive(Debug, Clone, Serialize)]
pub struct SpotlightReport {
    pub generator: String,
    pub omega_definition: String,
    pub config: SpotlightConfig,
    pub seeds: Vec<u64>,
    pub trace_stats: Vec<TraceStats>,
    pub fig7: Vec<Point>,
    pub fig9: Vec<MPoint>,
}

/// Builds the scenarios (one per seed).
pub fn scenarios(
    trace: &SyntheticParams,
    pool: &PoolParams,
    runs: usize,
) -> anyhow::Result<Vec<Scenario>> {
    (0..runs.max(1) as u64)
        .map(|k| {
            let p = SyntheticParams {
                seed: trace.seed.wrapping_add(k),
                ..trace.clone()
            };
            let t = p.generate()?;
            let pool = pool.build(&t)?;
            Ok(Scenario {
                seed: p.seed,
                trace: t,
                pool,
            })
        })
        .collect()
}

/// Runs both sweeps.
pub fn run(cfg: &SpotlightConfig, progress: bool) -> anyhow::Result<SpotlightReport> {
    for &iv in cfg.intervals.iter().chain([&cfg.fig9_interval]) {
        anyhow::ensure!(
            iv.is_finite() && iv > 0.0,
            "update intervals must be > 0 ms, got {} ms",
            iv * 1e3
        );
    }
    let sc = scenarios(&cfg.trace, &cfg.pool, cfg.runs)?;
    let mut jobs: Vec<Job> = Vec::new();
    let mut index: HashMap<(usize, String, u64), usize> = HashMap::new();
    let mut want = |s: usize, policy: Policy, interval: f64, jobs: &mut Vec<Job>| -> usize {
        // Interval-free policies run once, at the first interval.
        let interval = if policy.interval_independent() {
            cfg.intervals.first().copied().unwrap_or(interval)
        } else {
            interval
        };
        *index
            .entry((s, policy.to_string(), interval.to_bits()))
            .or_insert_with(|| {
                jobs.push(Job {
                    scenario: s,
                    policy,
                    interval,
                });
                jobs.len() - 1
            })
    };
    let mut fig7_refs = Vec::new();
    for &p in &cfg.policies {
        for &iv in &cfg.intervals {
            for s in 0..sc.len() {
                fig7_refs.push((p, iv, want(s, p, iv, &mut jobs)));
            }
        }
    }
    let mut fig9_refs = Vec::new();
    for &m in &cfg.ms {
        let p = Policy::Awfd(m);
        for s in 0..sc.len() {
            fig9_refs.push((m, want(s, p, cfg.fig9_interval, &mut jobs)));
        }
    }
    let results = run_jobs(&sc, &jobs, crate::sweep::threads(cfg.threads), progress);
    let fig7_runs: Vec<_> = fig7_refs
        .iter()
        .map(|&(p, iv, k)| {
            let mut r = results[k].clone();
            r.policy = p.to_string();
            r.interval_ms = iv * 1e3;
            r
        })
        .collect();
    let fig9: Vec<MPoint> = cfg
        .ms
        .iter()
        .map(|&m| {
            let runs: Vec<_> = fig9_refs
                .iter()
                .filter(|r| r.0 == m)
                .map(|r| results[r.1].clone())
                .collect();
            let mut point = aggregate(&runs).remove(0);
            point.interval_ms = cfg.fig9_interval * 1e3;
            MPoint {
                m: m.to_string(),
                point,
            }
        })
        .collect();
    Ok(SpotlightReport {
        generator: "weir-lab sim spotlight".into(),
        omega_definition: OMEGA_DEFINITION.into(),
        config: cfg.clone(),
        seeds: sc.iter().map(|s| s.seed).collect(),
        trace_stats: sc.iter().map(|s| s.trace.stats()).collect(),
        fig7: aggregate(&fig7_runs),
        fig9,
    })
}

impl SpotlightReport {
    /// Both figures as text tables.
    pub fn text(&self) -> String {
        let policies: Vec<String> = self.config.policies.iter().map(|p| p.to_string()).collect();
        let intervals: Vec<f64> = self.config.intervals.iter().map(|s| s * 1e3).collect();
        let mut s = format!(
            "Fig. 7: Omega vs update interval ({} flows, {} seed(s), load {})\n",
            self.config.trace.flows,
            self.seeds.len(),
            self.config.pool.load
        );
        s += &matrix_table(&self.fig7, &policies, &intervals);
        s += &format!(
            "\nFig. 9: AWFD Omega vs m at {} ms\n{:>5} {:>8} {:>17}\n",
            fmt_ms(self.config.fig9_interval * 1e3),
            "m",
            "omega",
            "min..max"
        );
        for p in &self.fig9 {
            s += &format!(
                "{:>5} {:>8.4} {:>17}\n",
                p.m,
                p.point.omega,
                format!("{:.4}..{:.4}", p.point.omega_min, p.point.omega_max)
            );
        }
        s
    }

    /// Fig. 7: Omega against the update interval (log scale), one line per
    /// policy; policies that do not poll are dashed (flat by construction).
    pub fn fig7(&self) -> Figure {
        let series = self
            .config
            .policies
            .iter()
            .enumerate()
            .map(|(k, p)| {
                let name = p.to_string();
                Series {
                    points: self
                        .fig7
                        .iter()
                        .filter(|x| x.policy == name)
                        .map(|x| plot::Point::new(x.interval_ms, x.omega))
                        .collect(),
                    style: Style {
                        color: k,
                        dashed: p.interval_independent(),
                    },
                    name,
                }
            })
            .collect();
        let ticks = self
            .config
            .intervals
            .iter()
            .map(|s| (s * 1e3, fmt_ms(s * 1e3)))
            .collect();
        Figure {
            title: "Service utilization vs update interval (cf. Spotlight Fig. 7)".into(),
            subtitle: Some(self.subtitle()),
            panels: vec![Panel::Lines(Lines {
                title: String::new(),
                x: Axis::new("update interval (ms, log scale)")
                    .log()
                    .ticks(ticks),
                y: Axis::new("overall service utilization Ω"),
                series,
            })],
            columns: 1,
            size: (860, 500),
        }
    }

    /// Fig. 9: AWFD's Omega against m at one interval. m = infinity has no
    /// place on the axis: it is a dashed level drawn up to a tick "∞" two
    /// steps past the largest finite m.
    pub fn fig9(&self) -> Figure {
        // "inf" parses as an f64 too, hence the finiteness filter.
        let finite_m = |m: &str| m.parse::<f64>().ok().filter(|m| m.is_finite());
        let finite: Vec<plot::Point> = self
            .fig9
            .iter()
            .filter_map(|p| finite_m(&p.m).map(|m| plot::Point::new(m, p.point.omega)))
            .collect();
        let max_m = finite.iter().map(|p| p.x).fold(1.0, f64::max);
        let mut series = vec![Series {
            name: "AWFD(m)".into(),
            points: finite,
            style: Style::solid(0),
        }];
        let mut ticks: Vec<(f64, String)> = self
            .fig9
            .iter()
            .filter_map(|p| finite_m(&p.m).map(|m| (m, p.m.clone())))
            .collect();
        if let Some(inf) = self.fig9.iter().find(|p| p.m == "inf") {
            let x = max_m + 2.0;
            series.push(Series {
                name: "m = ∞ (weighted)".into(),
                points: vec![
                    plot::Point::new(1.0, inf.point.omega),
                    plot::Point::new(x, inf.point.omega),
                ],
                style: Style::dashed(1),
            });
            ticks.push((x, "∞".into()));
        }
        Figure {
            title: format!(
                "AWFD service utilization vs m at {} ms (cf. Spotlight Fig. 9)",
                fmt_ms(self.config.fig9_interval * 1e3)
            ),
            subtitle: Some(self.subtitle()),
            panels: vec![Panel::Lines(Lines {
                title: String::new(),
                x: Axis::new("maximum weight m").ticks(ticks),
                y: Axis::new("overall service utilization Ω"),
                series,
            })],
            columns: 1,
            size: (860, 500),
        }
    }

    /// The trace and pool under both figures.
    fn subtitle(&self) -> String {
        format!(
            "{} flows, {} seed(s) averaged, load {}",
            self.config.trace.flows,
            self.seeds.len(),
            self.config.pool.load
        )
    }

    /// Writes spotlight.json, fig7.{csv,svg}, fig9.{csv,svg} into `dir`.
    pub fn write(&self, dir: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let mut fig9_csv = String::from("m,");
        let pts: Vec<Point> = self.fig9.iter().map(|p| p.point.clone()).collect();
        let body = points_csv(&pts);
        let mut lines = body.lines();
        fig9_csv += lines.next().unwrap_or("");
        fig9_csv.push('\n');
        for (p, l) in self.fig9.iter().zip(lines) {
            fig9_csv += &format!("{},{l}\n", p.m);
        }
        let files = [
            ("spotlight.json", serde_json::to_string_pretty(self)? + "\n"),
            ("fig7.csv", points_csv(&self.fig7)),
            ("fig7.svg", self.fig7().svg()?),
            ("fig9.csv", fig9_csv),
            ("fig9.svg", self.fig9().svg()?),
            ("fig7.txt", points_table(&self.fig7)),
        ];
        let mut out = Vec::new();
        for (name, text) in files {
            let p = dir.join(name);
            std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))?;
            out.push(p);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_sweep_writes_every_output() {
        let cfg = SpotlightConfig {
            trace: SyntheticParams {
                flows: 4000,
                ..Default::default()
            },
            pool: PoolParams {
                warmup: Some(1.0),
                ..Default::default()
            },
            runs: 2,
            intervals: vec![0.001, 0.1, 1.0],
            ms: vec![
                MaxWeight::Finite(1),
                MaxWeight::Finite(4),
                MaxWeight::Infinite,
            ],
            threads: 2,
            ..Default::default()
        };
        let r = run(&cfg, false).unwrap();
        assert_eq!(r.fig7.len(), cfg.policies.len() * 3);
        assert_eq!(r.fig9.len(), 3);
        assert!(r
            .fig7
            .iter()
            .all(|p| p.seeds == 2 && p.omega > 0.0 && p.omega <= 1.0 + 1e-9));
        // Interval-free policies are flat.
        let ecmp: Vec<f64> = r
            .fig7
            .iter()
            .filter(|p| p.policy == "ecmp")
            .map(|p| p.omega)
            .collect();
        assert!(ecmp.windows(2).all(|w| w[0] == w[1]));
        // Deterministic.
        let again = run(&cfg, false).unwrap();
        assert_eq!(
            serde_json::to_string(&r.fig7).unwrap(),
            serde_json::to_string(&again.fig7).unwrap()
        );
        // Every plotted coordinate is finite (m = inf once broke the x axis):
        // m = inf is a line to the finite stand-in x = max m + 2, labelled ∞.
        for fig in [r.fig7(), r.fig9()] {
            let svg = fig.svg().unwrap();
            assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        }
        let Panel::Lines(fig9) = &r.fig9().panels[0] else {
            panic!("fig. 9 is a line chart")
        };
        let inf = &fig9.series[1];
        assert_eq!(inf.points.last().unwrap().x, 6.0);
        assert!(fig9.x.ticks.contains(&(6.0, "∞".into())));
        assert!(fig9.x.ticks.contains(&(4.0, "4".into())));
        let svg = r.fig9().svg().unwrap();
        assert!(svg.contains("\n∞\n") && svg.contains("\n4\n"), "{svg}");
        let dir = std::env::temp_dir().join(format!("weir-sim-test-{}", std::process::id()));
        let files = r.write(&dir).unwrap();
        for f in &files {
            assert!(std::fs::metadata(f).unwrap().len() > 0);
        }
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("spotlight.json")).unwrap())
                .unwrap();
        assert_eq!(json["fig9"][2]["m"], "inf");
        assert!(r.text().contains("Fig. 9"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
