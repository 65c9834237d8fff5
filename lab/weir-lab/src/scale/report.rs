//! The scale experiment's results: a text table, JSON, and an SVG figure
//! (broken connections, failed new connections and recovery per event,
//! sync on against off).

use std::fmt::Write as _;

use serde::Serialize;
use weir_plot::{Axis, Bar, Bars, Figure, Panel, Style};

use crate::scale::scenario::RunResult;

/// The targets of the issue, to judge the measurements by.
pub const SYNC_WINDOW_GOAL_MS: f64 = 10.0;
pub const INTERVAL_MS: f64 = 100.0;

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

/// The text table.
pub fn table(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<5} {:<13} {:>7} {:>8} {:>8} {:>6} {:>11} {:>9} {:>7} {:>8} {:>8}",
        "sync",
        "event",
        "at (s)",
        "broken",
        "young",
        "after",
        "new failed",
        "recover",
        "join",
        "learnt",
        "leader"
    );
    for run in &r.runs {
        for e in &run.events {
            let _ = writeln!(
                o,
                "{:<5} {:<13} {:>7.1} {:>8} {:>8} {:>6} {:>11} {:>8.2}s {:>7} {:>8} {:>8}",
                if run.sync { "on" } else { "off" },
                e.name,
                e.at_s,
                e.broken_older,
                e.broken_younger,
                e.broken_after,
                format!("{}/{}", e.new_conn_failures, e.new_conns),
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
    let _ = writeln!(
        o,
        "broken: established connections that broke or changed backend after the event, \
         older than the sync window at it; young: younger; after: opened after the event. \
         recover: from the event to the last failure it caused."
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
        title: "weir-lab scale: node loss, addition and leader loss behind ECMP".into(),
        subtitle: Some(format!(
            "3 nodes, load-aware tables (AWFD m=4, 100 ms); sync window p99 {} ms",
            opt(r.targets.sync_window_ms, 2)
        )),
        panels: vec![
            panel("established connections broken", "connections", &|e| {
                (e.broken_older + e.broken_younger) as f64
            }),
            panel("new connections failed", "connections", &|e| {
                e.new_conn_failures as f64
            }),
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
        size: (1100, 1700),
    }
}
