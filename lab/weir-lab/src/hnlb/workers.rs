//! The software tier's worker reports, as `weir status --json` shows them
//! under `workers` (a list of `weir_software::WorkerStats`). The lab reads
//! them the way `weir status` does, from the file `weir serve` rewrites
//! every second (`weir_control::tier::read_workers`): sampling four times a
//! second through a `weir status` process would take CPU from the worker
//! it measures.
//!
//! - [`windows`]: each worker's last utilization window (HNLB eq. 1-3).
//! - [`Ledger`]: where the workers' packets went, counters summed over
//!   workers and sockets, so a row can say where its losses happened.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::Value;
use weir_control::status::STAT_NAMES;
use weir_software_engine::utilization::{CostModel, QueueBursts, Utilization};

/// The workers' last reports.
pub fn read(run_dir: &Path) -> Result<Value> {
    weir_control::tier::read_workers(run_dir).with_context(|| {
        format!(
            "weir serve wrote no worker report ({}); is the software tier running?",
            weir_control::tier::workers_file(run_dir).display()
        )
    })
}

/// Every worker's last window.
pub fn windows(workers: &Value) -> Result<Vec<Utilization>> {
    list(workers)?
        .iter()
        .filter(|w| !w["utilization"].is_null())
        .map(|w| window(&w["utilization"]).with_context(|| format!("worker {w}")))
        .collect()
}

fn list(workers: &Value) -> Result<&Vec<Value>> {
    workers
        .as_array()
        .context("the worker report is not a list of workers")
}

fn count(v: &Value, key: &str) -> Result<u64> {
    v[key]
        .as_u64()
        .with_context(|| format!("{key} is not a count"))
}

/// A window, as `weir_software_engine::utilization::Utilization` serializes.
fn window(v: &Value) -> Result<Utilization> {
    let q = &v["busiest_queue"];
    let cost = match &v["cost"] {
        Value::Null => None,
        c => Some(CostModel {
            burst_cycles: c["burst_cycles"].as_f64().context("cost.burst_cycles")?,
            packet_cycles: c["packet_cycles"].as_f64().context("cost.packet_cycles")?,
        }),
    };
    Ok(Utilization {
        max_burst: u32::try_from(count(v, "max_burst")?).context("max_burst")?,
        cycles: count(v, "cycles")?,
        busy_cycles: count(v, "busy_cycles")?,
        polls: count(v, "polls")?,
        bursts: count(v, "bursts")?,
        packets: count(v, "packets")?,
        busiest_queue: QueueBursts {
            queue: usize::try_from(count(q, "queue")?).context("busiest_queue.queue")?,
            bursts: count(q, "bursts")?,
            packets: count(q, "packets")?,
        },
        cost,
    })
}

/// Where the workers' packets went: sums over workers and their sockets.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Ledger {
    /// Packets the sockets received and sent.
    pub rx_packets: u64,
    pub tx_packets: u64,
    /// Kernel (XDP_STATISTICS): arrivals that found the RX ring full, and
    /// the fill ring empty (no frame to copy into).
    pub rx_ring_full: u64,
    pub fill_ring_empty: u64,
    /// Frames to forward that found the TX ring full.
    pub tx_ring_full: u64,
    /// Frames for another interface that found its ring or frames
    /// exhausted, for an interface with no socket, or that the load
    /// balancer would have passed to a kernel.
    pub cross_dropped: u64,
    pub no_egress_socket: u64,
    pub pass_dropped: u64,
    /// The workers' load balancer's drop counters (weir_lb's names), the
    /// ones that are not zero.
    pub lb_drops: BTreeMap<String, u64>,
    /// Hybrid: fast-table entries at the end, and the offload's moves.
    pub fast_table_occupancy: Option<u64>,
    pub promoted: u64,
    pub demoted: u64,
}

impl Ledger {
    /// The counters of `workers` (the occupancy as it stands).
    pub fn of(workers: &Value) -> Result<Ledger> {
        let mut l = Ledger::default();
        for w in list(workers)? {
            for s in w["sockets"].as_array().context("sockets")? {
                l.rx_packets += count(s, "rx_packets")?;
                l.tx_packets += count(s, "tx_packets")?;
                l.rx_ring_full += count(s, "rx_ring_full")?;
                l.fill_ring_empty += count(s, "fill_ring_empty")?;
                l.tx_ring_full += count(s, "tx_ring_full")?;
            }
            let c = &w["counters"];
            l.cross_dropped += count(c, "cross_dropped")?;
            l.no_egress_socket += count(c, "no_egress_socket")?;
            l.pass_dropped += count(c, "pass_dropped")?;
            let slb = w["slb"].as_array().context("slb")?;
            for (name, v) in STAT_NAMES.iter().zip(slb) {
                let v = v.as_u64().context("slb counter")?;
                if name.starts_with("drop_") && v > 0 {
                    *l.lb_drops.entry(name.to_string()).or_default() += v;
                }
            }
            let o = &w["offload"];
            if !o.is_null() {
                *l.fast_table_occupancy.get_or_insert(0) += count(o, "occupancy")?;
                l.promoted += count(o, "promoted")?;
                l.demoted += ["demoted_idle", "demoted_closed", "demoted_light"]
                    .iter()
                    .map(|k| count(o, k))
                    .sum::<Result<u64>>()?;
            }
        }
        Ok(l)
    }

    /// What happened between `before` and `self`.
    pub fn since(&self, before: &Ledger) -> Ledger {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        Ledger {
            rx_packets: d(self.rx_packets, before.rx_packets),
            tx_packets: d(self.tx_packets, before.tx_packets),
            rx_ring_full: d(self.rx_ring_full, before.rx_ring_full),
            fill_ring_empty: d(self.fill_ring_empty, before.fill_ring_empty),
            tx_ring_full: d(self.tx_ring_full, before.tx_ring_full),
            cross_dropped: d(self.cross_dropped, before.cross_dropped),
            no_egress_socket: d(self.no_egress_socket, before.no_egress_socket),
            pass_dropped: d(self.pass_dropped, before.pass_dropped),
            lb_drops: self
                .lb_drops
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        d(*v, before.lb_drops.get(k).copied().unwrap_or(0)),
                    )
                })
                .filter(|(_, v)| *v > 0)
                .collect(),
            fast_table_occupancy: self.fast_table_occupancy,
            promoted: d(self.promoted, before.promoted),
            demoted: d(self.demoted, before.demoted),
        }
    }

    /// Packets the load balancer in the workers dropped.
    pub fn lb_dropped(&self) -> u64 {
        self.lb_drops.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn worker(rx: u64, ring_full: u64, no_route: u64, occupancy: u64) -> Value {
        let mut slb = vec![0u64; STAT_NAMES.len()];
        let i = STAT_NAMES
            .iter()
            .position(|n| *n == "drop_no_route")
            .unwrap();
        slb[i] = no_route;
        json!({
            "cpu": 1,
            "counters": { "cross_sent": rx, "cross_dropped": 1, "no_egress_socket": 0, "pass_dropped": 0 },
            "slb": slb,
            "utilization": null,
            "offload": { "occupancy": occupancy, "capacity": 8192, "observed": 0, "admitted": 0,
                         "promoted": 5, "demoted_idle": 1, "demoted_closed": 0, "demoted_light": 2 },
            "sockets": [
                { "interface": "wc0", "queue": 0, "rx_packets": rx, "rx_bursts": 1, "tx_packets": 0,
                  "tx_ring_full": 0, "rx_dropped": 0, "rx_ring_full": ring_full, "fill_ring_empty": 3 },
                { "interface": "wb1", "queue": 0, "rx_packets": 0, "rx_bursts": 0, "tx_packets": rx,
                  "tx_ring_full": 0, "rx_dropped": 0, "rx_ring_full": 0, "fill_ring_empty": 0 }
            ]
        })
    }

    #[test]
    fn a_ledger_sums_sockets_and_names_the_load_balancers_drops() {
        let l = Ledger::of(&json!([worker(100, 7, 4, 10)])).unwrap();
        assert_eq!((l.rx_packets, l.tx_packets, l.rx_ring_full), (100, 100, 7));
        assert_eq!((l.fill_ring_empty, l.cross_dropped), (3, 1));
        assert_eq!(
            l.lb_drops,
            BTreeMap::from([("drop_no_route".to_string(), 4)])
        );
        assert_eq!(
            (l.fast_table_occupancy, l.promoted, l.demoted),
            (Some(10), 5, 3)
        );
    }

    #[test]
    fn a_ledger_since_another_is_the_difference() {
        let before = Ledger::of(&json!([worker(100, 7, 4, 10)])).unwrap();
        let after = Ledger::of(&json!([worker(250, 9, 4, 12)])).unwrap();
        let d = after.since(&before);
        assert_eq!((d.rx_packets, d.tx_packets, d.rx_ring_full), (150, 150, 2));
        assert!(d.lb_drops.is_empty(), "{d:?}");
        assert_eq!(d.lb_dropped(), 0);
        // The occupancy is a level, not a count.
        assert_eq!((d.fast_table_occupancy, d.promoted), (Some(12), 0));
    }

    #[test]
    fn a_window_reads_back_from_its_json() {
        let w = Utilization {
            max_burst: 64,
            cycles: 1000,
            busy_cycles: 400,
            polls: 20,
            bursts: 10,
            packets: 320,
            busiest_queue: QueueBursts {
                queue: 0,
                bursts: 10,
                packets: 320,
            },
            cost: Some(CostModel {
                burst_cycles: 300.0,
                packet_cycles: 40.5,
            }),
        };
        assert_eq!(
            windows(&json!([{ "cpu": 1, "utilization": w }])).unwrap(),
            vec![w]
        );
        assert!(windows(&json!([{ "cpu": 1, "utilization": null }]))
            .unwrap()
            .is_empty());
        assert!(windows(&json!({})).is_err());
    }
}
