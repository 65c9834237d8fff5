//! Text tables, CSV and the SVG plot of simulation results.

use std::fmt::Write;

use weir_core::dispatch::Policy;
use weir_plot::{self as plot, Axis, Bar, Bars, Figure, Lines, Panel, Series, Style};

use crate::sweep::{fmt_ms, Point};

/// Omega of each policy: bars (whiskers over seeds) at a single update
/// interval, or one line per policy against the interval (log scale) for a
/// sweep of intervals.
pub fn points_figure(
    points: &[Point],
    policies: &[Policy],
    intervals_ms: &[f64],
    subtitle: String,
) -> Figure {
    let y = Axis::new("overall service utilization Ω");
    let spread = |p: &Point| (p.omega_max - p.omega_min) / 2.0;
    let panel = if let [ms] = intervals_ms {
        Panel::Bars(Bars {
            title: format!("update interval {} ms", fmt_ms(*ms)),
            y,
            bars: policies
                .iter()
                .enumerate()
                .filter_map(|(k, pol)| {
                    let name = pol.to_string();
                    let p = points.iter().find(|p| p.policy == name)?;
                    Some(Bar {
                        label: name,
                        value: p.omega,
                        err: Some(spread(p)),
                        style: Style::solid(k),
                    })
                })
                .collect(),
        })
    } else {
        Panel::Lines(Lines {
            title: String::new(),
            x: Axis::new("update interval (ms, log scale)")
                .log()
                .ticks(intervals_ms.iter().map(|&ms| (ms, fmt_ms(ms))).collect()),
            y,
            series: policies
                .iter()
                .enumerate()
                .map(|(k, pol)| {
                    let name = pol.to_string();
                    Series {
                        points: points
                            .iter()
                            .filter(|p| p.policy == name)
                            .map(|p| plot::Point::with_err(p.interval_ms, p.omega, spread(p)))
                            .collect(),
                        style: Style {
                            color: k,
                            dashed: pol.interval_independent(),
                        },
                        name,
                    }
                })
                .collect(),
        })
    };
    Figure {
        title: "Service utilization of the dispatch policies".into(),
        subtitle: Some(subtitle),
        panels: vec![panel],
        columns: 1,
        size: (860, 500),
    }
}

/// One row per point: policy, interval, Omega (min..max over seeds), served,
/// and Omega per VIP.
pub fn points_table(points: &[Point]) -> String {
    let vips = points.first().map_or(0, |p| p.omega_per_vip.len());
    let mut s = String::new();
    let _ = write!(
        s,
        "{:<10} {:>11} {:>8} {:>17} {:>7}",
        "policy", "interval_ms", "omega", "min..max", "served"
    );
    for j in 0..vips {
        let _ = write!(s, " {:>7}", format!("vip{j}"));
    }
    s.push('\n');
    for p in points {
        let _ = write!(
            s,
            "{:<10} {:>11} {:>8.4} {:>17} {:>7.4}",
            p.policy,
            fmt_ms(p.interval_ms),
            p.omega,
            format!("{:.4}..{:.4}", p.omega_min, p.omega_max),
            p.served
        );
        for o in &p.omega_per_vip {
            let _ = write!(s, " {o:>7.4}");
        }
        s.push('\n');
    }
    s
}

/// CSV of points with the same columns as [`points_table`].
pub fn points_csv(points: &[Point]) -> String {
    let vips = points.first().map_or(0, |p| p.omega_per_vip.len());
    let mut s = String::from("policy,interval_ms,omega,omega_min,omega_max,served,seeds");
    for j in 0..vips {
        let _ = write!(s, ",omega_vip{j}");
    }
    s.push('\n');
    for p in points {
        let _ = write!(
            s,
            "{},{},{:.6},{:.6},{:.6},{:.6},{}",
            p.policy, p.interval_ms, p.omega, p.omega_min, p.omega_max, p.served, p.seeds
        );
        for o in &p.omega_per_vip {
            let _ = write!(s, ",{o:.6}");
        }
        s.push('\n');
    }
    s
}

/// A matrix view: one row per interval, one column per policy (Fig. 7).
pub fn matrix_table(points: &[Point], policies: &[String], intervals: &[f64]) -> String {
    let mut s = String::new();
    let _ = write!(s, "{:>11}", "interval_ms");
    for p in policies {
        let _ = write!(s, " {p:>10}");
    }
    s.push('\n');
    for &iv in intervals {
        let _ = write!(s, "{:>11}", fmt_ms(iv));
        for p in policies {
            match points
                .iter()
                .find(|x| &x.policy == p && x.interval_ms == iv)
            {
                Some(x) => {
                    let _ = write!(s, " {:>10.4}", x.omega);
                }
                None => {
                    let _ = write!(s, " {:>10}", "-");
                }
            }
        }
        s.push('\n');
    }
    s
}
