//! What the software load balancer balances: VIPs, DIP slots, each VIP's
//! current AWFD table and version, the interfaces it sends by, nat DIP
//! endpoints and local addresses. The same values the control plane writes
//! into weir_lb's maps (`weir_vip_key`/`weir_vip`, `weir_dip`,
//! `AwfdTable`, `weir_endpoint`), so one apply feeds both tiers.
//!
//! Every update is O(1) (a table is shared, not copied) and keeps PCC: a
//! connection entry names its DIP slot and generation, and stays on that
//! DIP for as long as the slot is live with that generation, whatever the
//! tables say.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use weir_abi::*;

use weir_core::dispatch::awfd::{AwfdTable, DipId};
use weir_core::flow::addr_words;
use weir_core::hotkeys::SeededHash;

use super::packet::{IPPROTO_TCP, IPPROTO_UDP};

/// The next hop of a DIP when it is not the DIP's configured MAC on the
/// interface the packet came in by: what the worker resolved (FIB and
/// neighbour table), as weir_lb's `bpf_fib_lookup` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextHop {
    pub ifindex: u32,
    pub mac: [u8; 6],
}

/// Whether two DIP entries route alike: the kernel's route and neighbour
/// lookup that gives a [`NextHop`] takes the DIP's address (and family)
/// and nothing else of the entry. weir_lb's own resolved next hop
/// (`weir_dip.nh`) is not part of it either: it is the XDP tier's copy of
/// the same answer.
fn same_route(a: &weir_dip, b: &weir_dip) -> bool {
    a.family == b.family && a.addr == b.addr
}

/// A DIP slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DipSlot {
    pub dip: weir_dip,
    pub next_hop: Option<NextHop>,
}

impl DipSlot {
    pub fn is_live(&self) -> bool {
        self.dip.flags & WEIR_DIP_F_LIVE != 0
    }
}

/// A VIP's current table: version and the table the controller built.
#[derive(Debug, Clone)]
struct Published {
    version: u32,
    table: Arc<AwfdTable>,
}

/// Why an update was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceError {
    VipId {
        id: u32,
        max_vips: u32,
    },
    DipId {
        id: u32,
        max_dips: u32,
    },
    Family {
        what: &'static str,
        family: u8,
    },
    Proto(u8),
    Mode(u8),
    /// The table does not fit the data plane's layout, so XDP could not
    /// hold it and the two tiers would disagree.
    Table {
        vip_id: u32,
        reason: String,
    },
}

impl fmt::Display for ServiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServiceError::VipId { id, max_vips } => write!(
                f,
                "VIP id {id} is not below max_vips ({max_vips}); raise max_vips or reuse a lower id"
            ),
            ServiceError::DipId { id, max_dips } => write!(
                f,
                "DIP slot {id} is not below max_dips ({max_dips}); raise max_dips or reuse a lower slot"
            ),
            ServiceError::Family { what, family } => write!(
                f,
                "{what} has address family {family}; it must be {WEIR_AF_INET} (IPv4) or {WEIR_AF_INET6} (IPv6)"
            ),
            ServiceError::Proto(p) => {
                write!(f, "VIP protocol {p}; it must be 6 (TCP) or 17 (UDP)")
            }
            ServiceError::Mode(m) => write!(
                f,
                "VIP mode {m}; it must be {WEIR_MODE_NAT} (nat) or {WEIR_MODE_DSR} (dsr)"
            ),
            ServiceError::Table { vip_id, reason } => {
                write!(f, "table of VIP {vip_id}: {reason}")
            }
        }
    }
}

impl std::error::Error for ServiceError {}

fn check_family(what: &'static str, family: u8) -> Result<(), ServiceError> {
    match u32::from(family) {
        WEIR_AF_INET | WEIR_AF_INET6 => Ok(()),
        _ => Err(ServiceError::Family { what, family }),
    }
}

/// The VIP map's hash: its keys are the operator's (a few hundred at
/// most), so a fast unkeyed hash is enough; a sender only chooses lookups.
const VIP_HASH: SeededHash = SeededHash(0x7669_7073);

#[derive(Debug, Clone)]
pub struct Services {
    max_vips: u32,
    vips: HashMap<weir_vip_key, weir_vip, SeededHash>,
    dips: Vec<DipSlot>,
    tables: Vec<Option<Published>>,
    /// (ifindex, MAC): a handful, searched in order.
    ifaces: Vec<(u32, [u8; 6])>,
    nat_endpoints: HashSet<weir_endpoint>,
    local: HashSet<([u32; 4], u8)>,
}

impl Services {
    pub fn new(max_vips: u32, max_dips: u32) -> Services {
        Services {
            max_vips,
            vips: HashMap::with_hasher(VIP_HASH),
            dips: vec![DipSlot::default(); max_dips as usize],
            tables: vec![None; max_vips as usize],
            ifaces: Vec::new(),
            nat_endpoints: HashSet::new(),
            local: HashSet::new(),
        }
    }

    /// Adds or changes a VIP (weir_lb's `vips` map).
    pub fn set_vip(&mut self, key: weir_vip_key, vip: weir_vip) -> Result<(), ServiceError> {
        check_family("VIP", key.family)?;
        if key.proto != IPPROTO_TCP && key.proto != IPPROTO_UDP {
            return Err(ServiceError::Proto(key.proto));
        }
        if u32::from(vip.mode) != WEIR_MODE_NAT && u32::from(vip.mode) != WEIR_MODE_DSR {
            return Err(ServiceError::Mode(vip.mode));
        }
        if vip.vip_id >= self.max_vips {
            return Err(ServiceError::VipId {
                id: vip.vip_id,
                max_vips: self.max_vips,
            });
        }
        self.vips.insert(key, vip);
        Ok(())
    }

    /// Removes a VIP. Its connections stay until they expire; its packets
    /// are no longer balanced.
    pub fn remove_vip(&mut self, key: &weir_vip_key) -> Option<weir_vip> {
        self.vips.remove(key)
    }

    pub fn vip(&self, key: &weir_vip_key) -> Option<&weir_vip> {
        self.vips.get(key)
    }

    /// Writes a DIP slot (weir_lb's `dips` array). A new DIP is written
    /// live before a table names it; a removed one loses `WEIR_DIP_F_LIVE`
    /// after the tables dropped it, and a reassigned slot gets a new
    /// generation, so the connections of the old one are redispatched.
    ///
    /// The slot keeps its resolved next hop as long as it routes to the
    /// same place (see [`same_route`]): weights, flags, generation, port
    /// and configured MAC change what is dispatched, not where a packet
    /// goes, and clearing the next hop on them would blackhole the DIP
    /// until it is resolved again. A new address clears it: its owner
    /// must resolve the slot again.
    pub fn set_dip(&mut self, id: DipId, dip: weir_dip) -> Result<(), ServiceError> {
        check_family("DIP", dip.family)?;
        let max_dips = self.dips.len() as u32;
        let slot = self
            .dips
            .get_mut(id as usize)
            .ok_or(ServiceError::DipId { id, max_dips })?;
        let next_hop = slot.next_hop.filter(|_| same_route(&slot.dip, &dip));
        *slot = DipSlot { dip, next_hop };
        Ok(())
    }

    /// Sets (or with `None` clears) the resolved next hop of a DIP slot.
    pub fn set_next_hop(
        &mut self,
        id: DipId,
        next_hop: Option<NextHop>,
    ) -> Result<(), ServiceError> {
        let max_dips = self.dips.len() as u32;
        let slot = self
            .dips
            .get_mut(id as usize)
            .ok_or(ServiceError::DipId { id, max_dips })?;
        slot.next_hop = next_hop;
        Ok(())
    }

    pub fn dip(&self, id: DipId) -> Option<&DipSlot> {
        self.dips.get(id as usize)
    }

    /// Live DIP slots without a resolved next hop.
    pub fn unresolved_dips(&self) -> usize {
        self.dips
            .iter()
            .filter(|d| d.is_live() && d.next_hop.is_none())
            .count()
    }

    /// The slot if it still holds the DIP a connection was dispatched to
    /// (conntrack.h's `conn_dip`).
    pub fn dip_of(&self, id: DipId, gen: u32) -> Option<&DipSlot> {
        self.dip(id).filter(|d| d.is_live() && d.dip.gen == gen)
    }

    /// Makes `table` the VIP's current table as `version` (the one its
    /// `table_version` word names in weir_lb). The table must fit the data
    /// plane's layout ([`AwfdTable::from_weights`] builds only such).
    pub fn publish_table(
        &mut self,
        vip_id: u32,
        version: u32,
        table: Arc<AwfdTable>,
    ) -> Result<(), ServiceError> {
        let max_vips = self.max_vips;
        if vip_id >= max_vips {
            return Err(ServiceError::VipId {
                id: vip_id,
                max_vips,
            });
        }
        let bad = |reason: String| ServiceError::Table { vip_id, reason };
        if table.classes.len() > WEIR_MAX_CLASSES as usize {
            return Err(bad(format!(
                "{} priority classes, the data plane holds {WEIR_MAX_CLASSES}",
                table.classes.len()
            )));
        }
        if let Some(c) = table
            .classes
            .iter()
            .find(|c| c.members.len() > WEIR_MAX_CLASS_MEMBERS as usize || c.members.is_empty())
        {
            return Err(bad(format!(
                "class of weight {} has {} members, a class holds 1 to {WEIR_MAX_CLASS_MEMBERS}",
                c.weight,
                c.members.len()
            )));
        }
        self.tables[vip_id as usize] = Some(Published { version, table });
        Ok(())
    }

    /// The VIP's current table and its version.
    pub fn table(&self, vip_id: u32) -> Option<(u32, &AwfdTable)> {
        let p = self.tables.get(vip_id as usize)?.as_ref()?;
        Some((p.version, &p.table))
    }

    /// An interface the load balancer sends by, with its MAC (weir_lb's
    /// `ifaces` and `tx_ports`).
    pub fn set_interface(&mut self, ifindex: u32, mac: [u8; 6]) {
        self.remove_interface(ifindex);
        self.ifaces.push((ifindex, mac));
    }

    pub fn remove_interface(&mut self, ifindex: u32) {
        self.ifaces.retain(|(i, _)| *i != ifindex);
    }

    pub fn interface_mac(&self, ifindex: u32) -> Option<[u8; 6]> {
        self.ifaces
            .iter()
            .find_map(|&(i, mac)| (i == ifindex).then_some(mac))
    }

    /// The service endpoints of nat DIPs (weir_lb's `nat_endpoints`): a
    /// reply from one of them with no connection is never sent on.
    pub fn set_nat_endpoints(&mut self, endpoints: impl IntoIterator<Item = weir_endpoint>) {
        self.nat_endpoints = endpoints.into_iter().collect();
    }

    pub fn is_nat_endpoint(&self, ep: &weir_endpoint) -> bool {
        self.nat_endpoints.contains(ep)
    }

    /// This host's own addresses: a nat DIP's packet to one of them with no
    /// connection (a health check's answer) goes to the kernel, where
    /// weir_lb asks the FIB whether the kernel would forward it.
    pub fn set_local_addrs(&mut self, addrs: impl IntoIterator<Item = IpAddr>) {
        self.local = addrs.into_iter().map(addr_words).collect();
    }

    pub fn is_local(&self, addr: &[u32; 4], family: u8) -> bool {
        self.local.contains(&(*addr, family))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::dispatch::awfd::PriorityClass;

    fn vip_key(proto: u8, family: u8) -> weir_vip_key {
        weir_vip_key {
            port: 80u16.to_be(),
            proto,
            family,
            ..Default::default()
        }
    }

    #[test]
    fn bad_updates_say_what_is_wrong() {
        let mut s = Services::new(4, 8);
        let vip = |id, mode| weir_vip {
            vip_id: id,
            mode,
            ..Default::default()
        };
        assert_eq!(
            s.set_vip(vip_key(6, 3), vip(0, 0)),
            Err(ServiceError::Family {
                what: "VIP",
                family: 3
            })
        );
        assert_eq!(
            s.set_vip(vip_key(1, 2), vip(0, 0)),
            Err(ServiceError::Proto(1))
        );
        assert_eq!(
            s.set_vip(vip_key(6, 2), vip(0, 2)),
            Err(ServiceError::Mode(2))
        );
        let e = s.set_vip(vip_key(6, 2), vip(4, 0)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "VIP id 4 is not below max_vips (4); raise max_vips or reuse a lower id"
        );
        s.set_vip(vip_key(17, 10), vip(3, 1)).unwrap();
        assert_eq!(s.vip(&vip_key(17, 10)).unwrap().vip_id, 3);
        let dip = weir_dip {
            family: 2,
            ..Default::default()
        };
        assert_eq!(
            s.set_dip(8, dip),
            Err(ServiceError::DipId { id: 8, max_dips: 8 })
        );
        assert!(s.set_dip(1, weir_dip::default()).is_err(), "family 0");
        let wide = AwfdTable {
            classes: vec![PriorityClass {
                weight: 1,
                members: (0..=WEIR_MAX_CLASS_MEMBERS).collect(),
            }],
            bounds: vec![WEIR_MAX_CLASS_MEMBERS + 1],
        };
        let e = s.publish_table(0, 1, Arc::new(wide)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "table of VIP 0: class of weight 1 has 257 members, a class holds 1 to 256"
        );
        assert!(s
            .publish_table(9, 1, Arc::new(AwfdTable::default()))
            .is_err());
    }

    #[test]
    fn pcc_needs_a_live_slot_of_the_same_generation() {
        let mut s = Services::new(1, 4);
        let live = |gen| weir_dip {
            family: 2,
            flags: WEIR_DIP_F_LIVE,
            gen,
            ..Default::default()
        };
        s.set_dip(2, live(1)).unwrap();
        assert!(s.dip_of(2, 1).is_some());
        assert!(s.dip_of(2, 2).is_none());
        s.set_dip(2, live(2)).unwrap();
        assert!(s.dip_of(2, 1).is_none());
        s.set_dip(
            2,
            weir_dip {
                flags: 0,
                ..live(2)
            },
        )
        .unwrap();
        assert!(s.dip_of(2, 2).is_none());
        assert!(s.dip_of(9, 1).is_none());
    }

    #[test]
    fn a_slot_keeps_its_next_hop_until_its_address_changes() {
        let mut s = Services::new(1, 4);
        let (addr, family) = addr_words("10.1.0.2".parse().unwrap());
        let dip = weir_dip {
            addr,
            family,
            flags: WEIR_DIP_F_LIVE,
            gen: 1,
            weight: 1,
            ..Default::default()
        };
        let hop = NextHop {
            ifindex: 3,
            mac: [1; 6],
        };
        s.set_dip(2, dip).unwrap();
        assert_eq!(s.unresolved_dips(), 1);
        s.set_next_hop(2, Some(hop)).unwrap();
        assert_eq!(s.unresolved_dips(), 0);

        // What dispatch needs changes; where the DIP is does not.
        let mut changed = dip;
        for change in [
            (|d: &mut weir_dip| d.weight = 4) as fn(&mut weir_dip),
            |d| d.weight = 0,
            |d| d.flags = 0,
            |d| d.flags = WEIR_DIP_F_LIVE,
            |d| d.gen = 2,
            |d| d.port = 8080u16.to_be(),
            |d| (d.mac_set, d.mac) = (1, [7; 6]),
            |d| d.vip_id = 1,
            // weir_lb's copy of the next hop, written by its resolver.
            |d| d.nh.ifindex = 9,
        ] {
            change(&mut changed);
            s.set_dip(2, changed).unwrap();
            assert_eq!(s.dip(2).unwrap().dip, changed);
            assert_eq!(s.dip(2).unwrap().next_hop, Some(hop), "{changed:?}");
        }

        // Another address routes elsewhere: resolve it anew.
        let (other, _) = addr_words("10.1.0.3".parse().unwrap());
        s.set_dip(
            2,
            weir_dip {
                addr: other,
                ..changed
            },
        )
        .unwrap();
        assert_eq!(s.dip(2).unwrap().next_hop, None);
        assert_eq!(s.unresolved_dips(), 1);

        // So does the same words in the other family.
        s.set_next_hop(2, Some(hop)).unwrap();
        s.set_dip(
            2,
            weir_dip {
                addr: other,
                family: WEIR_AF_INET6 as u8,
                ..changed
            },
        )
        .unwrap();
        assert_eq!(s.dip(2).unwrap().next_hop, None);
    }

    #[test]
    fn tables_are_versioned_per_vip() {
        let mut s = Services::new(2, 4);
        assert!(s.table(0).is_none());
        let t = Arc::new(AwfdTable::from_weights(&[(1, 2), (2, 1)]).unwrap());
        s.publish_table(1, 7, t.clone()).unwrap();
        let (v, got) = s.table(1).unwrap();
        assert_eq!((v, got), (7, &*t));
        assert!(s.table(0).is_none());
        s.set_local_addrs(["127.0.0.1".parse().unwrap()]);
        let (w, f) = addr_words("127.0.0.1".parse().unwrap());
        assert!(s.is_local(&w, f));
        s.set_interface(3, [3; 6]);
        assert_eq!(s.interface_mac(3), Some([3; 6]));
        s.remove_interface(3);
        assert_eq!(s.interface_mac(3), None);
    }
}
