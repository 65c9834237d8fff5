//! What the demo measured, per run (AWFD or static) and per phase (before
//! and after the slowdown): the share of new connections each backend got,
//! response times and failures. Printed as a table, written as JSON.

use serde::Serialize;

use super::load::Conn;
use crate::text_table::aligned;

/// One backend's new connections in a phase.
#[derive(Debug, Clone, Serialize)]
pub struct BackendShare {
    pub backend: String,
    pub connections: usize,
    /// Its fraction of the phase's answered connections.
    pub share: f64,
}

/// One phase of one run.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    /// "before" or "after" the slowdown.
    pub phase: String,
    /// Connections opened in the phase that got at least one answer.
    pub connections: usize,
    pub backends: Vec<BackendShare>,
    /// Response times of the phase's answered requests, ms.
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub requests: usize,
    /// Requests that got no answer (connect failed, timed out, reset).
    pub failed_requests: usize,
    /// Connections answered by two backends.
    pub moved_connections: usize,
}

/// One run: the same load over the same backends under one way of
/// splitting it.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// "awfd" (the controller, with the backends' agents) or "static"
    /// (equal weights, no controller).
    pub policy: String,
    pub phases: Vec<Phase>,
}

/// A lab backend and its service time per request.
#[derive(Debug, Clone, Serialize)]
pub struct BackendSetup {
    pub backend: String,
    pub service_ms: f64,
    /// Its service time after the slowdown (the slowed backend's only).
    pub slowed_to_ms: Option<f64>,
}

/// Everything `out/demo.json` holds.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub backends: Vec<BackendSetup>,
    pub slowed_backend: String,
    /// Seconds of load before the measured phases (not counted).
    pub warmup_s: f64,
    pub before_s: f64,
    pub after_s: f64,
    pub client_threads: usize,
    pub requests_per_connection: usize,
    pub runs: Vec<Run>,
    pub wall_s: f64,
}

/// The phase of the connections opened in [from_s, to_s).
pub fn phase(name: &str, conns: &[Conn], backends: &[String], from_s: f64, to_s: f64) -> Phase {
    let mine: Vec<&Conn> = conns
        .iter()
        .filter(|c| c.start_s >= from_s && c.start_s < to_s)
        .collect();
    let answered: Vec<&Conn> = mine
        .iter()
        .copied()
        .filter(|c| c.backend().is_some())
        .collect();
    let shares = backends
        .iter()
        .map(|b| {
            let n = answered.iter().filter(|c| c.backend() == Some(b)).count();
            BackendShare {
                backend: b.clone(),
                connections: n,
                share: n as f64 / answered.len().max(1) as f64,
            }
        })
        .collect();
    let mut times: Vec<f64> = mine
        .iter()
        .flat_map(|c| c.answered.iter().map(|(_, t)| t.as_secs_f64() * 1e3))
        .collect();
    times.sort_by(f64::total_cmp);
    Phase {
        phase: name.to_string(),
        connections: answered.len(),
        backends: shares,
        p50_ms: quantile(&times, 0.50),
        p99_ms: quantile(&times, 0.99),
        requests: times.len(),
        failed_requests: mine.iter().filter(|c| c.error.is_some()).count(),
        moved_connections: mine.iter().filter(|c| c.moved()).count(),
    }
}

/// The `q` quantile of sorted `v` (nearest rank); 0 when empty.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

fn pct(x: f64) -> String {
    format!("{:.0}%", 100.0 * x)
}

/// The two tables: shares of new connections side by side, then response
/// times and failures per run and phase.
pub fn table(r: &Report) -> String {
    let mut header = vec!["phase".to_string(), "backend".to_string()];
    header.extend(r.runs.iter().map(|run| format!("{} share", run.policy)));
    let mut rows = Vec::new();
    let phases = r.runs.first().map_or(0, |run| run.phases.len());
    for p in 0..phases {
        for (i, b) in r.backends.iter().enumerate() {
            let mut row = vec![r.runs[0].phases[p].phase.clone(), b.backend.clone()];
            row.extend(
                r.runs
                    .iter()
                    .map(|run| pct(run.phases[p].backends[i].share)),
            );
            rows.push(row);
        }
    }
    let shares = aligned(&header, &rows);
    let header = [
        "run",
        "phase",
        "connections",
        "requests",
        "p50 ms",
        "p99 ms",
        "failed",
        "moved",
    ];
    let rows: Vec<Vec<String>> = r
        .runs
        .iter()
        .flat_map(|run| {
            run.phases.iter().map(|p| {
                vec![
                    run.policy.clone(),
                    p.phase.clone(),
                    p.connections.to_string(),
                    p.requests.to_string(),
                    format!("{:.1}", p.p50_ms),
                    format!("{:.1}", p.p99_ms),
                    p.failed_requests.to_string(),
                    p.moved_connections.to_string(),
                ]
            })
        })
        .collect();
    format!(
        "share of new connections per backend ({} slowed down between the phases):\n{shares}\n\
         response times and failures:\n{}",
        r.slowed_backend,
        aligned(&header, &rows)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn conn(start_s: f64, backends: &[&str], ms: u64, error: bool) -> Conn {
        Conn {
            start_s,
            answered: backends
                .iter()
                .map(|b| (b.to_string(), Duration::from_millis(ms)))
                .collect(),
            error: error.then(|| "reset".to_string()),
        }
    }

    #[test]
    fn a_phase_counts_only_its_connections() {
        let names: Vec<String> = ["b1", "b2"].iter().map(|s| s.to_string()).collect();
        let conns = vec![
            conn(0.5, &["b1", "b1"], 2, false),
            conn(1.0, &["b1"], 4, false),
            conn(1.5, &["b2", "b2"], 10, false),
            conn(1.7, &["b2", "b1"], 10, false),
            conn(1.8, &[], 0, true),
            conn(3.0, &["b2"], 100, false),
        ];
        let p = phase("before", &conns, &names, 1.0, 3.0);
        assert_eq!(p.connections, 3);
        assert_eq!(p.backends[0].connections, 1);
        assert_eq!(p.backends[1].connections, 2);
        assert!((p.backends[1].share - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(p.requests, 5);
        assert_eq!((p.p50_ms, p.p99_ms), (10.0, 10.0));
        assert_eq!((p.failed_requests, p.moved_connections), (1, 1));
        let empty = phase("after", &conns, &names, 10.0, 20.0);
        assert_eq!((empty.connections, empty.p99_ms), (0, 0.0));
        assert_eq!(empty.backends[0].share, 0.0);
    }
}
