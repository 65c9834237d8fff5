//! The load balancer the workers share: one [`Slb`] (the connection
//! tables, the services and the counters), the hybrid tier's offload
//! policy, and the VIPs last applied, behind one lock.
//!
//! Why shared: a sprayed or spread flow's packets reach every worker, and a
//! connection's replies may reach another worker than its requests, yet the
//! connection must keep its DIP (PCC). One table behind a lock is the
//! simplest scheme that holds: a worker takes the lock once per burst, runs
//! the burst's frames through the table (lookup, dispatch, rewrite: a few
//! hundred nanoseconds a packet) and drains the table's events, and does
//! the rest of its per-packet work (the added cost, sending, the reorder
//! stage) outside it. The price is that the table's own work is serialized
//! across workers; a table sharded by flow hash (one lock per shard) would
//! let it run in parallel, at the cost of a lock per packet or of sorting
//! each burst by shard.

use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard};

use weir_abi::*;
use weir_software_engine::offload::{FastEntry, Offload};
use weir_software_engine::slb::{Event, NextHop, Outcome, Slb};

use crate::tables::Snapshot;
use crate::worker::ToControl;

/// Expired entries removed per housekeeping round at most.
const EXPIRE_BUDGET: usize = 256;

pub struct Balancer {
    pub slb: Slb,
    /// Hybrid: the fast table's offload decision.
    pub offload: Option<Offload<weir_flow_key>>,
    /// The VIPs of the last snapshot applied (to remove the ones that go).
    vips: Vec<weir_vip_key>,
    /// Fast-table writes go to the control thread.
    to_control: Sender<ToControl>,
}

/// The shared balancer.
pub type Shared = Arc<Mutex<Balancer>>;

/// Takes the lock; a worker that panicked holding it left the table as
/// consistent as any packet boundary leaves it.
pub fn lock(b: &Mutex<Balancer>) -> MutexGuard<'_, Balancer> {
    b.lock().unwrap_or_else(|e| e.into_inner())
}

impl Balancer {
    pub fn new(
        slb: Slb,
        offload: Option<Offload<weir_flow_key>>,
        to_control: Sender<ToControl>,
    ) -> Balancer {
        Balancer {
            slb,
            offload,
            vips: Vec::new(),
            to_control,
        }
    }

    /// One frame through the table.
    pub fn process(&mut self, frame: &mut [u8], ingress: u32, now_ns: u64) -> Outcome {
        let outcome = self.slb.process(frame, ingress, now_ns);
        if let (Outcome::Forward(f), Some(o)) = (&outcome, self.offload.as_mut()) {
            o.observe(&f.conn);
        }
        outcome
    }

    /// After every burst: the event queue is bounded.
    pub fn drain_events(&mut self) {
        while let Some(ev) = self.slb.poll_event() {
            self.mirror(ev);
        }
    }

    /// Ages the tables a little.
    pub fn expire(&mut self, now_ns: u64) {
        self.slb.expire(now_ns, EXPIRE_BUDGET);
        self.drain_events();
    }

    /// Hybrid: a connection event of the software table, mirrored into the
    /// fast table as the policy says. The software entry always comes first
    /// (HNLB 4a before 4b), so a packet that races the install still finds
    /// its DIP here.
    fn mirror(&mut self, ev: Event) {
        let Some(offload) = self.offload.as_mut() else {
            return;
        };
        match ev {
            Event::Installed(conn) => {
                if offload.admit() {
                    let _ = self.to_control.send(ToControl::Install(conn));
                }
            }
            Event::Closed(key) => {
                let rkey = self.reverse_key_of(&key);
                let _ = self.to_control.send(ToControl::Remove(key, rkey));
            }
            // The connection is gone from the software table: its event
            // carries the reverse key.
            Event::Removed { key, reverse, .. } => {
                let _ = self.to_control.send(ToControl::Remove(key, reverse));
            }
        }
    }

    /// Hybrid: one plan over the fast table's current view.
    pub fn plan(&mut self, now_ns: u64, view: &[FastEntry<weir_flow_key>]) {
        let Balancer { slb, offload, .. } = self;
        let Some(offload) = offload.as_mut() else {
            return;
        };
        // Offloaded connections send nothing through this table: keep
        // their software entries as fresh as their fast ones.
        for e in view {
            let _ = slb.refresh(&e.key, e.last_seen_ns);
        }
        let plan = offload.plan(now_ns, view);
        for key in plan.demote {
            let rkey = self.reverse_key_of(&key);
            let _ = self.to_control.send(ToControl::Remove(key, rkey));
        }
        for key in plan.promote {
            if let Some(conn) = self.slb.connection(&key) {
                let _ = self.to_control.send(ToControl::Install(conn));
            }
        }
    }

    fn reverse_key_of(&self, key: &weir_flow_key) -> Option<weir_flow_key> {
        self.slb
            .connection(key)
            .and_then(|c| c.reverse.map(|(k, _)| k))
    }

    /// Brings the load balancer's services in line with the maps, then
    /// sets the next hops resolved with them, under one lock: a DIP at a
    /// new address is never seen without its next hop. A slot whose
    /// address stays keeps its next hop whatever else changed (its weight
    /// above all, which reloads and the controller change all the time).
    pub fn apply_snapshot(
        &mut self,
        snapshot: &Snapshot,
        local: Vec<std::net::IpAddr>,
        next_hops: &[(u32, Option<NextHop>)],
    ) -> Result<(), String> {
        let services = self.slb.services_mut();
        for (id, dip) in &snapshot.dips {
            services
                .set_dip(*id, *dip)
                .map_err(|e| format!("DIP slot {id}: {e}"))?;
        }
        for (id, hop) in next_hops {
            services
                .set_next_hop(*id, *hop)
                .map_err(|e| format!("next hop of DIP slot {id}: {e}"))?;
        }
        let current: Vec<weir_vip_key> = snapshot.vips.iter().map(|v| v.key).collect();
        for v in &snapshot.vips {
            services
                .set_vip(v.key, v.vip)
                .map_err(|e| format!("VIP {}: {e}", v.vip.vip_id))?;
            let stale = services
                .table(v.vip.vip_id)
                .is_none_or(|(version, _)| version != v.version);
            if stale {
                services
                    .publish_table(v.vip.vip_id, v.version, Arc::new(v.table.clone()))
                    .map_err(|e| e.to_string())?;
            }
        }
        for gone in self.vips.iter().filter(|k| !current.contains(k)) {
            services.remove_vip(gone);
        }
        self.vips = current;
        services.set_nat_endpoints(snapshot.nat_endpoints.iter().copied());
        services.set_local_addrs(local);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::VipTable;
    use weir_core::dispatch::awfd::AwfdTable;
    use weir_core::flow::addr_words;

    const HOP: NextHop = NextHop {
        ifindex: 4,
        mac: [2, 0, 0, 0, 0, 4],
    };

    fn balancer() -> Balancer {
        let slb = Slb::new(weir_software_engine::slb::Config {
            conn_capacity: 64,
            half_open_capacity: 64,
            max_vips: 2,
            max_dips: 4,
            ..Default::default()
        })
        .unwrap();
        Balancer::new(slb, None, std::sync::mpsc::channel().0)
    }

    /// One nat VIP over DIP slots 0 and 1 at `addrs` with `weights`, table
    /// `version`.
    fn snapshot(addrs: [&str; 2], weights: [u32; 2], version: u32) -> Snapshot {
        let (vaddr, vfamily) = addr_words("10.0.0.100".parse().unwrap());
        let dips: Vec<(u32, weir_dip)> = (0..2)
            .map(|i| {
                let (addr, family) = addr_words(addrs[i].parse().unwrap());
                let dip = weir_dip {
                    addr,
                    family,
                    flags: WEIR_DIP_F_LIVE,
                    gen: 1,
                    weight: weights[i],
                    ..Default::default()
                };
                (i as u32, dip)
            })
            .collect();
        let pairs: Vec<(u32, u32)> = dips.iter().map(|(id, d)| (*id, d.weight)).collect();
        Snapshot {
            vips: vec![VipTable {
                key: weir_vip_key {
                    addr: vaddr,
                    port: 80u16.to_be(),
                    proto: 6,
                    family: vfamily,
                },
                vip: weir_vip {
                    vip_id: 0,
                    mode: WEIR_MODE_NAT as u8,
                    ..Default::default()
                },
                version,
                table: AwfdTable::from_weights(&pairs).unwrap(),
            }],
            dips,
            nat_endpoints: Vec::new(),
        }
    }

    fn next_hop(b: &Balancer, id: u32) -> Option<NextHop> {
        b.slb.services().dip(id).unwrap().next_hop
    }

    #[test]
    fn a_weight_change_keeps_the_next_hops_an_address_change_drops_one() {
        let mut b = balancer();
        let addrs = ["10.1.0.2", "10.1.0.3"];
        b.apply_snapshot(&snapshot(addrs, [1, 1], 1), Vec::new(), &[(0, Some(HOP))])
            .unwrap();
        assert_eq!(next_hop(&b, 0), Some(HOP), "resolved with the snapshot");
        assert_eq!(next_hop(&b, 1), None);
        assert_eq!(b.slb.services().unresolved_dips(), 1);
        b.apply_snapshot(&snapshot(addrs, [1, 1], 1), Vec::new(), &[(1, Some(HOP))])
            .unwrap();
        assert_eq!(b.slb.services().unresolved_dips(), 0);

        // Reloads and the controller: new weights, new tables, no next hops.
        for (version, weights) in [(2, [3, 1]), (3, [0, 2]), (4, [4, 4])] {
            b.apply_snapshot(&snapshot(addrs, weights, version), Vec::new(), &[])
                .unwrap();
            assert_eq!(b.slb.services().dip(0).unwrap().dip.weight, weights[0]);
            assert_eq!(b.slb.services().table(0).unwrap().0, version);
            assert_eq!(
                (next_hop(&b, 0), next_hop(&b, 1)),
                (Some(HOP), Some(HOP)),
                "weights {weights:?}"
            );
        }

        // Slot 1 now holds another address: unresolved until its own next
        // hop comes, which the control thread sends with the snapshot.
        let moved = ["10.1.0.2", "10.1.0.9"];
        b.apply_snapshot(&snapshot(moved, [4, 4], 5), Vec::new(), &[])
            .unwrap();
        assert_eq!((next_hop(&b, 0), next_hop(&b, 1)), (Some(HOP), None));
        let other = NextHop { ifindex: 5, ..HOP };
        b.apply_snapshot(&snapshot(moved, [4, 4], 5), Vec::new(), &[(1, Some(other))])
            .unwrap();
        assert_eq!(next_hop(&b, 1), Some(other));
    }

    #[test]
    fn a_bad_slot_is_named() {
        let mut b = balancer();
        let e = b
            .apply_snapshot(
                &snapshot(["10.1.0.2", "10.1.0.3"], [1, 1], 1),
                Vec::new(),
                &[(7, Some(HOP))],
            )
            .unwrap_err();
        assert!(
            e.starts_with("next hop of DIP slot 7: DIP slot 7 is not below max_dips (4)"),
            "{e}"
        );
    }
}
