//! Prometheus text metrics (`[metrics] listen`, default 127.0.0.1:9100):
//! the controller's per-DIP view (capacity, load, available capacity,
//! weight, class, share of new connections, health, agent errors) and the
//! data plane's counters, at `GET /metrics`.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use weir_dataplane::maps::Maps;

use crate::controller::{Shared, Snapshot};
use crate::http::{Response, Server};
use crate::status::STAT_NAMES;
use crate::telemetry::agent::AgentError;

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn help(o: &mut String, name: &str, kind: &str, text: &str) {
    let _ = writeln!(o, "# HELP {name} {text}\n# TYPE {name} {kind}");
}

/// The exposition text of a controller snapshot and the data plane's
/// counters (either may be missing).
pub fn render(snap: Option<&Snapshot>, maps: Option<&Maps>) -> String {
    let mut o = String::new();
    if let Some(s) = snap {
        help(
            &mut o,
            "weir_controller_ticks_total",
            "counter",
            "Controller intervals run.",
        );
        let _ = writeln!(o, "weir_controller_ticks_total {}", s.ticks);
        help(
            &mut o,
            "weir_controller_tables_published_total",
            "counter",
            "AWFD table versions the controller published.",
        );
        let _ = writeln!(
            o,
            "weir_controller_tables_published_total {}",
            s.tables_published
        );
        help(
            &mut o,
            "weir_controller_entries_written_total",
            "counter",
            "Stage-1/stage-2 map entries those publications wrote.",
        );
        let _ = writeln!(
            o,
            "weir_controller_entries_written_total {}",
            s.entries_written
        );
        help(
            &mut o,
            "weir_vip_table_version",
            "gauge",
            "Active AWFD table version of a VIP.",
        );
        for v in &s.vips {
            let _ = writeln!(
                o,
                "weir_vip_table_version{{vip=\"{}\"}} {}",
                esc(&v.name),
                v.table_version
            );
        }
        type Get = fn(&crate::controller::DipSnapshot) -> Option<f64>;
        let gauges: [(&str, &str, Get); 8] = [
            (
                "weir_dip_capacity",
                "Estimated capacity C = 1 / mean processing time (requests/s).",
                |d| d.capacity,
            ),
            ("weir_dip_load", "Smoothed load R (requests/s).", |d| d.load),
            (
                "weir_dip_available",
                "Available capacity A = C - R (requests/s).",
                |d| d.available,
            ),
            (
                "weir_dip_weight",
                "Weight in the published table (0 = no new connections).",
                |d| Some(f64::from(d.weight)),
            ),
            (
                "weir_dip_class",
                "AWFD priority class k of the DIP (0 = none).",
                |d| Some(f64::from(d.class.unwrap_or(0))),
            ),
            (
                "weir_dip_new_conn_share",
                "Share of the VIP's new connections over the last second.",
                |d| d.share,
            ),
            (
                "weir_dip_healthy",
                "1 healthy, 0 failing its health checks (absent without checks).",
                |d| d.healthy.map(|h| if h { 1.0 } else { 0.0 }),
            ),
            (
                "weir_dip_agent_silent",
                "1 when the DIP's agent missed silent_after polls in a row.",
                |d| Some(if d.agent_silent { 1.0 } else { 0.0 }),
            ),
        ];
        for (name, text, get) in gauges {
            help(&mut o, name, "gauge", text);
            for v in &s.vips {
                for d in &v.dips {
                    if let Some(x) = get(d).filter(|x| x.is_finite()) {
                        let _ = writeln!(
                            o,
                            "{name}{{vip=\"{}\",dip=\"{}:{}\"}} {x}",
                            esc(&v.name),
                            d.address,
                            d.port
                        );
                    }
                }
            }
        }
        help(
            &mut o,
            "weir_dip_agent_errors_total",
            "counter",
            "Failed agent polls by kind.",
        );
        for v in &s.vips {
            for d in &v.dips {
                for kind in AgentError::KINDS {
                    let n = d.agent_errors.get(kind).copied().unwrap_or(0);
                    let _ = writeln!(o, "weir_dip_agent_errors_total{{vip=\"{}\",dip=\"{}:{}\",kind=\"{kind}\"}} {n}", esc(&v.name), d.address, d.port);
                }
            }
        }
        help(
            &mut o,
            "weir_dip_health_failures_total",
            "counter",
            "Failed health checks.",
        );
        for v in &s.vips {
            for d in &v.dips {
                if d.healthy.is_some() {
                    let _ = writeln!(
                        o,
                        "weir_dip_health_failures_total{{vip=\"{}\",dip=\"{}:{}\"}} {}",
                        esc(&v.name),
                        d.address,
                        d.port,
                        d.health_failures
                    );
                }
            }
        }
        if let Some(m) = maps {
            help(
                &mut o,
                "weir_dip_new_conns_total",
                "counter",
                "New connections dispatched to the DIP.",
            );
            for v in &s.vips {
                for d in &v.dips {
                    if let Ok(t) = m.dip_traffic(d.slot) {
                        let _ = writeln!(
                            o,
                            "weir_dip_new_conns_total{{vip=\"{}\",dip=\"{}:{}\"}} {}",
                            esc(&v.name),
                            d.address,
                            d.port,
                            t.new_conns
                        );
                    }
                }
            }
        }
    }
    if let Some(m) = maps {
        if let Ok(stats) = m.stats() {
            help(
                &mut o,
                "weir_packets_total",
                "counter",
                "Data-plane outcome and event counters (enum weir_stat).",
            );
            for (name, v) in STAT_NAMES.iter().zip(stats) {
                let _ = writeln!(o, "weir_packets_total{{counter=\"{name}\"}} {v}");
            }
        }
    }
    o
}

/// Serves `/metrics` on `addr` until dropped.
pub fn serve(addr: SocketAddr, shared: Arc<Shared>, pin_dir: &Path) -> Result<Server> {
    let maps = Mutex::new(Maps::pinned(pin_dir).ok());
    Server::start(addr, move |path| match path {
        "/metrics" => {
            let snap = shared.snapshot();
            let maps = maps.lock().unwrap_or_else(|e| e.into_inner());
            Response::new(
                200,
                "text/plain; version=0.0.4",
                render(snap.as_ref(), maps.as_ref()),
            )
        }
        _ => Response::not_found(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{OnSilent, PolicyName, TelemetryKind};
    use crate::controller::{DipSnapshot, VipSnapshot};

    #[test]
    fn exposition_has_one_line_per_dip_and_skips_unknowns() {
        let d = DipSnapshot {
            slot: 3,
            address: "10.0.0.2".into(),
            port: 8080,
            capacity: Some(500.0),
            load: Some(100.0),
            available: Some(400.0),
            weight: 4,
            class: Some(4),
            share: None,
            healthy: Some(true),
            health_checks: 9,
            health_failures: 1,
            agent_misses: 0,
            agent_silent: false,
            agent_errors: [("parse".to_string(), 2)].into_iter().collect(),
            last_error: None,
        };
        let s = Snapshot {
            policy: PolicyName::Awfd,
            m: 4,
            update_interval_ms: 100,
            telemetry: Some(TelemetryKind::Agent),
            on_agent_silent: OnSilent::Keep,
            at_unix_ms: 0,
            ticks: 7,
            tables_published: 2,
            entries_written: 5,
            vips: vec![VipSnapshot {
                name: "we\"b".into(),
                vip_id: 0,
                table_version: 12,
                dips: vec![d],
            }],
        };
        let t = render(Some(&s), None);
        assert!(
            t.contains("weir_dip_capacity{vip=\"we\\\"b\",dip=\"10.0.0.2:8080\"} 500\n"),
            "{t}"
        );
        assert!(t.contains("weir_dip_weight{vip=\"we\\\"b\",dip=\"10.0.0.2:8080\"} 4\n"));
        assert!(t.contains("kind=\"parse\"} 2\n"));
        assert!(t.contains("kind=\"timeout\"} 0\n"));
        assert!(t.contains("weir_vip_table_version{vip=\"we\\\"b\"} 12\n"));
        assert!(
            !t.contains("weir_dip_new_conn_share{"),
            "unknown share is not exported"
        );
        for line in t.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
