//! Text tables and CSV for simulation results.

use std::fmt::Write;

use crate::sweep::{fmt_ms, Point};

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
