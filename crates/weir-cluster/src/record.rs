//! A VIP's table as the leader publishes it: the AWFD table with its DIPs
//! named by identity (address and NAT port), not by slot.
//!
//! DIP slots are per node: `apply` hands them out in the order DIPs arrive,
//! so nodes with different histories (a restart, a reload) number the same
//! DIP differently. The data plane picks `members[rehash(hash) % n]` in a
//! class, so what must agree across nodes is each class's member *order*
//! by identity. The leader records its table's classes in order; every
//! node (the leader included) translates each member to its own slot in the
//! same position. Two nodes then send every new flow to the same DIP,
//! whatever their slots; `tests::nodes_with_different_slots_dispatch_alike`
//! proves it.

use std::collections::HashMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use weir_core::dispatch::awfd::{AwfdTable, DipId, PriorityClass};

/// A DIP by what it is: its address, and its NAT port (0: the VIP's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DipRef {
    pub address: IpAddr,
    /// Host order; 0 keeps the VIP's port (dsr, or nat without a port).
    #[serde(default)]
    pub nat_port: u16,
}

/// One priority class: its weight and its members, in dispatch order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassRecord {
    pub weight: u32,
    pub members: Vec<DipRef>,
}

/// What a VIP is on the wire: a node checks it against its own VIP of the
/// same name before it applies a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VipRef {
    pub address: IpAddr,
    pub port: u16,
    /// IP protocol number (6 TCP, 17 UDP).
    pub protocol: u8,
}

/// A VIP's table version, as stored under `<prefix>/tables/<vip name>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableRecord {
    pub vip: String,
    pub vip_ref: VipRef,
    /// The cluster's version of this VIP's table; it goes up by one with
    /// each publication, also across leaders.
    pub version: u32,
    /// Non-empty classes in descending weight, as [`AwfdTable::classes`].
    pub classes: Vec<ClassRecord>,
    /// The node that published it.
    pub leader: String,
    pub published_unix_ms: u64,
}

/// Why a node cannot apply a record: its configuration differs from the
/// leader's. The node keeps its current table and says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skew {
    /// The record names a DIP this node does not have (live) in that VIP.
    UnknownDip(DipRef),
    /// A DIP of this node that the leader's slot map did not know.
    UnknownSlot(DipId),
    /// The record's VIP is another address, port or protocol here.
    OtherVip { here: VipRef, there: VipRef },
    /// The record's table is not a valid table (overflow, too many classes).
    Invalid(String),
}

impl std::fmt::Display for Skew {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skew::UnknownDip(d) => write!(
                f,
                "the leader's table names DIP {}{} that this node does not have; give every node \
                 the same VIPs and DIPs",
                d.address,
                port_suffix(d.nat_port)
            ),
            Skew::UnknownSlot(s) => write!(f, "DIP slot {s} has no identity"),
            Skew::OtherVip { here, there } => write!(
                f,
                "the VIP is {}:{} ({}) here but {}:{} ({}) on the leader; give every node the same \
                 VIPs",
                here.address, here.port, here.protocol, there.address, there.port, there.protocol
            ),
            Skew::Invalid(m) => write!(f, "the leader's table is invalid: {m}"),
        }
    }
}

fn port_suffix(p: u16) -> String {
    if p == 0 {
        String::new()
    } else {
        format!(" port {p}")
    }
}

impl TableRecord {
    /// The record of `table`, whose members are this node's slots, named
    /// through `identity`.
    pub fn of_table(
        table: &AwfdTable,
        identity: impl Fn(DipId) -> Option<DipRef>,
    ) -> Result<Vec<ClassRecord>, Skew> {
        table
            .classes
            .iter()
            .map(|c| {
                Ok(ClassRecord {
                    weight: c.weight,
                    members: c
                        .members
                        .iter()
                        .map(|&s| identity(s).ok_or(Skew::UnknownSlot(s)))
                        .collect::<Result<_, _>>()?,
                })
            })
            .collect()
    }

    /// This node's table for the record: each member becomes the local slot
    /// of the same DIP, in the same position.
    pub fn to_table(&self, slots: &HashMap<DipRef, DipId>) -> Result<AwfdTable, Skew> {
        let mut classes = Vec::with_capacity(self.classes.len());
        let mut bounds = Vec::with_capacity(self.classes.len());
        let mut total: u32 = 0;
        let mut last = u32::MAX;
        if self.classes.len() > weir_abi::WEIR_MAX_CLASSES as usize {
            return Err(Skew::Invalid(format!("{} classes", self.classes.len())));
        }
        for c in &self.classes {
            if c.weight == 0 || c.weight >= last || c.members.is_empty() {
                return Err(Skew::Invalid(
                    "classes must have weights above 0, in descending order, and members".into(),
                ));
            }
            if c.members.len() > weir_abi::WEIR_MAX_CLASS_MEMBERS as usize {
                return Err(Skew::Invalid(format!(
                    "{} members in a class",
                    c.members.len()
                )));
            }
            last = c.weight;
            let members = c
                .members
                .iter()
                .map(|d| slots.get(d).copied().ok_or(Skew::UnknownDip(*d)))
                .collect::<Result<Vec<_>, _>>()?;
            total = c
                .weight
                .checked_mul(members.len() as u32)
                .and_then(|m| total.checked_add(m))
                .ok_or_else(|| Skew::Invalid("the weights overflow".into()))?;
            bounds.push(total);
            classes.push(PriorityClass {
                weight: c.weight,
                members,
            });
        }
        Ok(AwfdTable { classes, bounds })
    }

    /// The weight each DIP has in this record (absent: 0).
    pub fn weights(&self) -> HashMap<DipRef, u32> {
        self.classes
            .iter()
            .flat_map(|c| c.members.iter().map(move |d| (*d, c.weight)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dip(i: u8) -> DipRef {
        DipRef {
            address: IpAddr::from([10, 77, i, 2]),
            nat_port: 0,
        }
    }

    fn record(classes: Vec<ClassRecord>) -> TableRecord {
        TableRecord {
            vip: "web".into(),
            vip_ref: VipRef {
                address: IpAddr::from([10, 77, 100, 2]),
                port: 80,
                protocol: 6,
            },
            version: 7,
            classes,
            leader: "a".into(),
            published_unix_ms: 0,
        }
    }

    #[test]
    fn nodes_with_different_slots_dispatch_alike() {
        // Node A numbers DIPs 1..=6 as slots 0..=5; node B got them in
        // another order, with gaps (a reload removed and re-added some).
        let a_slot: HashMap<DipRef, DipId> = (1..=6).map(|i| (dip(i), i as u32 - 1)).collect();
        let b_slot: HashMap<DipRef, DipId> = [(1, 9), (2, 3), (3, 0), (4, 7), (5, 1), (6, 40)]
            .into_iter()
            .map(|(i, s)| (dip(i), s))
            .collect();
        let weights = [4, 4, 2, 2, 1, 0];
        let pairs: Vec<(DipId, u32)> = (1..=6)
            .map(|i| (a_slot[&dip(i)], weights[i as usize - 1]))
            .collect();
        let leader = AwfdTable::from_weights(&pairs).unwrap();
        let a_id: HashMap<DipId, DipRef> = a_slot.iter().map(|(d, s)| (*s, *d)).collect();
        let b_id: HashMap<DipId, DipRef> = b_slot.iter().map(|(d, s)| (*s, *d)).collect();
        let rec = record(TableRecord::of_table(&leader, |s| a_id.get(&s).copied()).unwrap());
        let on_a = rec.to_table(&a_slot).unwrap();
        let on_b = rec.to_table(&b_slot).unwrap();
        assert_eq!(on_a, leader, "the leader's own translation is its table");
        assert_eq!(on_b.bounds, leader.bounds);
        // Built from B's slots directly, the table would sort its members
        // by B's numbers and disagree: the record's order is what matters.
        let naive = AwfdTable::from_weights(
            &(1..=6)
                .map(|i| (b_slot[&dip(i)], weights[i as usize - 1]))
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let mut naive_disagrees = 0;
        let mut h: u32 = 0x9e37_79b9;
        for _ in 0..200_000 {
            h = h.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let a = a_id[&on_a.select(h).unwrap()];
            assert_eq!(b_id[&on_b.select(h).unwrap()], a, "hash {h:#x}");
            naive_disagrees += usize::from(b_id[&naive.select(h).unwrap()] != a);
        }
        assert!(
            naive_disagrees > 0,
            "the test would not notice a slot-ordered table"
        );
        // The data plane's encoding agrees too.
        assert_eq!(on_a.ranges(), on_b.ranges());
        assert_eq!(rec.weights()[&dip(1)], 4);
        assert!(!rec.weights().contains_key(&dip(6)));
    }

    #[test]
    fn a_record_this_node_cannot_apply_says_why() {
        let slots: HashMap<DipRef, DipId> = [(dip(1), 0)].into_iter().collect();
        let unknown = record(vec![ClassRecord {
            weight: 1,
            members: vec![dip(2)],
        }]);
        assert_eq!(unknown.to_table(&slots), Err(Skew::UnknownDip(dip(2))));
        assert!(Skew::UnknownDip(dip(2)).to_string().contains("10.77.2.2"));
        let ascending = record(vec![
            ClassRecord {
                weight: 1,
                members: vec![dip(1)],
            },
            ClassRecord {
                weight: 2,
                members: vec![dip(1)],
            },
        ]);
        assert!(matches!(ascending.to_table(&slots), Err(Skew::Invalid(_))));
        let overflow = record(vec![ClassRecord {
            weight: u32::MAX,
            members: vec![dip(1), dip(1)],
        }]);
        assert!(matches!(overflow.to_table(&slots), Err(Skew::Invalid(_))));
        assert_eq!(
            record(vec![]).to_table(&slots).unwrap(),
            AwfdTable::default()
        );
    }

    #[test]
    fn records_round_trip_as_json() {
        let rec = record(vec![ClassRecord {
            weight: 3,
            members: vec![
                dip(1),
                DipRef {
                    address: "fd00::5".parse().unwrap(),
                    nat_port: 8080,
                },
            ],
        }]);
        let text = serde_json::to_string(&rec).unwrap();
        assert_eq!(serde_json::from_str::<TableRecord>(&text).unwrap(), rec);
    }
}
