//! The scale experiment's results: a text table, JSON, and an SVG figure
//! (broken connections, failed new connections and recovery per event,
//! sync on against off).

use std::fmt::Write as _;

use serde::Serialize;
use weir_plot::{Axis, Bar, Bars, Figure, Panel, Style};

use crate::scale::scenario::{EventResult, RunResult};
use crate::scale::topology::{HEALTH_FALL, HEALTH_INTERVAL_MS};

/// The targets, to judge the measurements by.
pub const SYNC_WINDOW_GOAL_MS: f64 = 10.0;
pub const INTERVAL_MS: f64 = 100.0;
/// A node killed, cut off or drained is out of the router's route within
/// this (BFD 300 ms x 3 is the slowest path).
pub const ROUTE_OUT_GOAL_S: f64 = 1.0;
/// BGP's part of a withdrawal: the speaker's gate period (200 ms), BIRD's
/// update, FRR's best path and zebra's install.
pub const BGP_UPDATE_BUDGET_S: f64 = 0.5;

/// A VIP whose DIPs all fail on one node is out of the route within the
/// health checker's verdict (`fall` intervals) plus BGP's update.
pub fn dip_withdraw_goal_s() -> f64 {
    (HEALTH_FALL * HEALTH_INTERVAL_MS) as f64 / 1000.0 + BGP_UPDATE_BUDGET_S
}

/// One target of the BGP events, judged on the run with sync on.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub target: String,
    pub measured: String,
    pub met: Option<bool>,
}

/// Everything `--json` writes.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub runs: Vec<RunResult>,
    pub targets: Targets,
}

/// Each target, met or missed, as measured with sync on.
#[derive(Debug, Clone, Serialize)]
pub struct Targets {
    /// Broken connections older than the sync window, all events.
    pub broken_older_than_window: Option<usize>,
    pub sync_window_ms: Option<f64>,
    pub sync_window_met: Option<bool>,
    pub apply_delay_max_ms: Option<f64>,
    pub apply_within_interval: Option<bool>,
    /// The router's and the connections' targets per event.
    pub checks: Vec<Check>,
}

fn events<'a>(run: &'a RunResult, names: &'a [&str]) -> impl Iterator<Item = &'a EventResult> {
    run.events.iter().filter(|e| names.contains(&e.name))
}

/// The slowest `route` of `names`' events; None if one was never seen.
fn slowest(run: &RunResult, names: &[&str], route: fn(&EventResult) -> Option<f64>) -> Option<f64> {
    events(run, names)
        .map(route)
        .try_fold(0.0f64, |m, x| Some(m.max(x?)))
}

fn seconds(x: Option<f64>) -> String {
    x.map_or("never (within 12 s)".into(), |s| format!("{s:.3} s"))
}

/// The targets of the BGP events, on the run `on` (sync on).
fn checks(on: &RunResult) -> Vec<Check> {
    let mut out = Vec::new();
    for (names, what) in [
        (&["kill -9", "leader kill -9"][..], "kill -9"),
        (&["link cut"][..], "link cut"),
    ] {
        let s = slowest(on, names, |e| e.route_out_s);
        out.push(Check {
            target: format!("{what}: out of the router's route within {ROUTE_OUT_GOAL_S} s"),
            measured: seconds(s),
            met: Some(s.is_some_and(|s| s <= ROUTE_OUT_GOAL_S)),
        });
        let older: usize = events(on, names).map(|e| e.broken_older).sum();
        out.push(Check {
            target: format!("{what}: 0 established connections older than the sync window broken"),
            measured: older.to_string(),
            met: Some(older == 0),
        });
        let failed: usize = events(on, names).map(|e| e.failed_after_converged).sum();
        out.push(Check {
            target: format!("{what}: 0 new connections failed after the router converged"),
            measured: failed.to_string(),
            met: Some(failed == 0),
        });
    }
    let drain = &["drain", "undrain"][..];
    let broken: usize = events(on, drain)
        .map(|e| e.broken_older + e.broken_younger + e.broken_after)
        .sum();
    let failed: usize = events(on, drain).map(|e| e.new_conn_failures).sum();
    let s = slowest(on, &["drain"], |e| e.route_out_s);
    out.push(Check {
        target: format!(
            "drain: 0 broken, 0 new connections failed, out of the route within {ROUTE_OUT_GOAL_S} s"
        ),
        measured: format!("{broken} broken, {failed} failed, out in {}", seconds(s)),
        met: Some(broken == 0 && failed == 0 && s.is_some_and(|s| s <= ROUTE_OUT_GOAL_S)),
    });
    let up = &["rolling upgrade"][..];
    let withdrawn: usize = events(on, up).filter_map(|e| e.withdrawals).sum();
    let broken: usize = events(on, up)
        .map(|e| e.broken_older + e.broken_younger + e.broken_after)
        .sum();
    out.push(Check {
        target: "rolling upgrade (--takeover): no route withdrawn, 0 broken".into(),
        measured: format!("{withdrawn} withdrawn, {broken} broken"),
        met: Some(withdrawn == 0 && broken == 0),
    });
    let goal = dip_withdraw_goal_s();
    let s = slowest(on, &["DIP failure"], |e| e.route_out_s);
    out.push(Check {
        target: format!(
            "DIP failure on one node: out of the route within {HEALTH_FALL} x {HEALTH_INTERVAL_MS} ms \
             + {BGP_UPDATE_BUDGET_S} s ({goal:.1} s)"
        ),
        measured: seconds(s),
        met: Some(s.is_some_and(|s| s <= goal)),
    });
    out
}

impl Report {
    pub fn new(runs: Vec<RunResult>) -> Report {
        let on = runs.iter().find(|r| r.sync);
        let targets = Targets {
            broken_older_than_window: on.map(|r| r.events.iter().map(|e| e.broken_older).sum()),
            sync_window_ms: on.and_then(|r| r.sync_window_ms),
            sync_window_met: on
                .and_then(|r| r.sync_window_ms)
                .map(|w| w < SYNC_WINDOW_GOAL_MS),
            apply_delay_max_ms: runs
                .iter()
                .filter_map(|r| r.apply_delay_max_ms)
                .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x)))),
            apply_within_interval: None,
            checks: on.map(checks).unwrap_or_default(),
        };
        let targets = Targets {
            apply_within_interval: targets.apply_delay_max_ms.map(|d| d <= INTERVAL_MS),
            ..targets
        };
        Report { runs, targets }
    }
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".into(), |v| format!("{v:.digits$}"))
}

fn met(x: Option<bool>) -> &'static str {
    match x {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "not measured",
    }
}

/// How the router's route followed an event.
fn route(e: &EventResult) -> String {
    match (e.route_out_s, e.route_in_s, e.withdrawals) {
        (Some(s), _, _) => format!("out {s:.2}s"),
        (_, Some(s), _) => format!("in {s:.2}s"),
        (_, _, Some(n)) => format!("{n} wd"),
        _ if e.node.is_some() => "never".into(),
        _ => "-".into(),
    }
}

/// The text table.
pub fn table(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<5} {:<15} {:<4} {:>6} {:>10} {:>6} {:>5} {:>5} {:>10} {:>9} {:>8} {:>6} {:>6} {:>6}",
        "sync",
        "event",
        "node",
        "at (s)",
        "route",
        "broken",
        "young",
        "after",
        "new failed",
        "converged",
        "recover",
        "join",
        "learnt",
        "leader"
    );
    for run in &r.runs {
        for e in &run.events {
            let _ = writeln!(
                o,
                "{:<5} {:<15} {:<4} {:>6.1} {:>10} {:>6} {:>5} {:>5} {:>10} {:>9} {:>7.2}s {:>6} {:>6} {:>6}",
                if run.sync { "on" } else { "off" },
                e.name,
                e.node.as_deref().unwrap_or("all"),
                e.at_s,
                route(e),
                e.broken_older,
                e.broken_younger,
                e.broken_after,
                format!("{}/{}", e.new_conn_failures, e.new_conns),
                e.failed_after_converged,
                e.recover_s,
                e.join_s.map_or("-".into(), |s| format!("{s:.2}s")),
                e.learnt.map_or("-".into(), |n| n.to_string()),
                e.leader_moved_s.map_or("-".into(), |s| format!("{s:.2}s")),
            );
        }
        let _ = writeln!(
            o,
            "{:<5} {} long-lived and {} new connections; tables: {:.1} versions/s, applied \
             within {} ms of publication; sync lag p50 {} ms, p99 (the sync window) {} ms, \
             max {} ms",
            if run.sync { "on" } else { "off" },
            run.long_lived,
            run.new_conns,
            run.versions_per_s,
            opt(run.apply_delay_max_ms, 0),
            opt(run.sync_lag_p50_ms, 3),
            opt(run.sync_window_ms, 3),
            opt(run.sync_lag_max_ms, 3),
        );
    }
    let t = &r.targets;
    let _ = writeln!(
        o,
        "\ntargets (sync on): 0 broken connections older than the sync window: {} ({}); \
         sync window < {SYNC_WINDOW_GOAL_MS} ms: {} ({} ms); every node applies a version \
         within one interval ({INTERVAL_MS} ms): {} ({} ms)",
        met(t.broken_older_than_window.map(|n| n == 0)),
        t.broken_older_than_window
            .map_or("-".into(), |n| n.to_string()),
        met(t.sync_window_met),
        opt(t.sync_window_ms, 3),
        met(t.apply_within_interval),
        opt(t.apply_delay_max_ms, 0),
    );
    for c in &t.checks {
        let _ = writeln!(o, "  {}: {} ({})", c.target, met(c.met), c.measured);
    }
    let _ = writeln!(
        o,
        "route: from the event to the first read (every 10 ms) of the router's kernel route \
         without the node (out) or with it (in); for the upgrade, route changes that withdrew \
         a next hop (wd). broken: established connections that broke or changed backend after \
         the event, older than the sync window at it; young: younger; after: opened after the \
         event. converged: new connections that failed after the route had followed the \
         event. recover: from the event to the last failure it caused."
    );
    o
}

/// Bars per event and sync mode: broken connections, failed new
/// connections, recovery time.
pub fn figure(r: &Report) -> Figure {
    let bars = |get: &dyn Fn(&crate::scale::scenario::EventResult) -> f64| -> Vec<Bar> {
        let mut out = Vec::new();
        for run in &r.runs {
            for e in &run.events {
                out.push(Bar {
                    label: format!(
                        "{} {}",
                        e.name,
                        if run.sync { "(sync)" } else { "(no sync)" }
                    ),
                    value: get(e),
                    err: None,
                    style: Style::solid(usize::from(!run.sync)),
                });
            }
        }
        out
    };
    // Counts of zero everywhere still get a readable axis from 0 to 1.
    let panel =
        |title: &str, y: &str, get: &dyn Fn(&crate::scale::scenario::EventResult) -> f64| {
            Panel::Bars(Bars {
                title: title.into(),
                y: Axis::new(y).from_zero().span(0.0, 1.0),
                bars: bars(get),
            })
        };
    // How long the cluster took: a node to be ready, another to lead.
    let mut took = Vec::new();
    for run in &r.runs {
        for e in &run.events {
            let what = if e.leader_moved_s.is_some() {
                "new leader"
            } else {
                "ready"
            };
            if let Some(s) = e.join_s.or(e.leader_moved_s) {
                took.push(Bar {
                    label: format!(
                        "{}: {what} {}",
                        e.name,
                        if run.sync { "(sync)" } else { "(no sync)" }
                    ),
                    value: s,
                    err: None,
                    style: Style::solid(usize::from(!run.sync)),
                });
            }
        }
    }
    Figure {
        title: "weir-lab scale: node loss, addition, drain, upgrade and leader loss behind \
                FRR's BGP ECMP"
            .into(),
        subtitle: Some(format!(
            "3-4 nodes, BGP with BFD 300 ms x 3, load-aware tables (AWFD m=4, 100 ms); \
             sync window p99 {} ms",
            opt(r.targets.sync_window_ms, 2)
        )),
        panels: vec![
            panel("established connections broken", "connections", &|e| {
                (e.broken_older + e.broken_younger) as f64
            }),
            panel("new connections failed", "connections", &|e| {
                e.new_conn_failures as f64
            }),
            panel(
                "the router's route follows (node out of it, or in it)",
                "seconds",
                &|e| e.route_out_s.or(e.route_in_s).unwrap_or(0.0),
            ),
            panel("time to recover", "seconds", &|e| e.recover_s),
            Panel::Bars(Bars {
                title: "a joining node ready (start to attach); another node leading after the \
                        leader's death"
                    .into(),
                y: Axis::new("seconds").from_zero(),
                bars: took,
            }),
        ],
        columns: 1,
        size: (1100, 2100),
    }
}
