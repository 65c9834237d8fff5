//! The fixed VIP/DIP configuration of the load balancer's table-driven
//! tests, and what weir-core predicts for it.

use std::collections::HashMap;
use std::net::IpAddr;

use weir_abi::*;
use weir_core::dispatch::awfd::AwfdTable;
use weir_core::flow::{addr_words, FlowTuple, Proto};
use weir_core::flow_hash::{flow_hash, DEFAULT_SEED};

/// MAC of the interface the load balancer runs on: the source of what it
/// sends.
pub const LB_IF_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// L2 destination of the client's frames (the router's view of the VIP);
/// deliberately not LB_IF_MAC, so replies show the learned address.
pub const VIP_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xaa];
pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xcc];

/// The MAC the fixture gives DIP `id`.
pub fn dip_mac(id: u32) -> [u8; 6] {
    [0x02, 0, 0, 0, 0x01, id as u8]
}

pub const NAT: u32 = WEIR_MODE_NAT;
pub const DSR: u32 = WEIR_MODE_DSR;

/// A test address; panics on a typo in the test.
pub fn ip(s: &str) -> IpAddr {
    s.parse()
        .unwrap_or_else(|_| panic!("test address {s:?} is not an IP address"))
}

/// One DIP slot of the fixture.
#[derive(Debug, Clone)]
pub struct Dip {
    pub id: u32,
    pub addr: IpAddr,
    /// NAT destination port; 0 keeps the VIP's port.
    pub port: u16,
}

impl Dip {
    /// The slot as the data plane stores it.
    pub fn abi(&self, gen: u32, live: bool) -> weir_dip {
        let (addr, family) = addr_words(self.addr);
        weir_dip {
            addr,
            port: self.port.to_be(),
            family,
            mac_set: 1,
            mac: dip_mac(self.id),
            flags: if live { WEIR_DIP_F_LIVE } else { 0 },
            gen,
            vip_id: 0,
            weight: 1,
            ..Default::default()
        }
    }

    /// The port a nat connection to VIP port `vport` reaches it on.
    pub fn port_for(&self, vport: u16) -> u16 {
        if self.port == 0 {
            vport
        } else {
            self.port
        }
    }
}

/// One VIP of the fixture with its static weights.
#[derive(Debug, Clone)]
pub struct Vip {
    pub id: u32,
    pub addr: IpAddr,
    pub port: u16,
    pub proto: Proto,
    pub mode: u32,
    /// (dip id, weight); `None`: never publish a table for this VIP.
    pub weights: Option<Vec<(u32, u32)>>,
}

impl Vip {
    pub fn key(&self) -> weir_vip_key {
        let (addr, family) = addr_words(self.addr);
        weir_vip_key {
            addr,
            port: self.port.to_be(),
            proto: self.proto.number(),
            family,
        }
    }

    /// The VIP as the data plane stores it.
    pub fn abi(&self) -> weir_vip {
        weir_vip {
            vip_id: self.id,
            mode: self.mode as u8,
            ..Default::default()
        }
    }

    pub fn table(&self) -> AwfdTable {
        AwfdTable::from_weights(self.weights.as_deref().unwrap_or(&[])).unwrap()
    }
}

/// The fixed configuration most cases run against.
pub struct Fixture {
    pub dips: Vec<Dip>,
    pub vips: Vec<Vip>,
}

impl Fixture {
    pub fn standard() -> Fixture {
        let dip = |id, a: &str, port| Dip {
            id,
            addr: ip(a),
            port,
        };
        let vip = |id, a: &str, port, proto, mode, w: Option<&[(u32, u32)]>| Vip {
            id,
            addr: ip(a),
            port,
            proto,
            mode,
            weights: w.map(|w| w.to_vec()),
        };
        use Proto::{Tcp, Udp};
        Fixture {
            dips: vec![
                dip(1, "10.1.0.1", 8080),
                dip(2, "10.1.0.2", 8080),
                dip(3, "10.1.0.3", 0),
                dip(4, "10.1.0.4", 9090),
                dip(11, "2001:db8:1::1", 8080),
                dip(12, "2001:db8:1::2", 0),
                dip(13, "2001:db8:1::3", 8080),
            ],
            vips: vec![
                vip(
                    0,
                    "10.0.0.100",
                    80,
                    Tcp,
                    NAT,
                    Some(&[(1, 3), (2, 1), (3, 1)]),
                ),
                vip(
                    1,
                    "10.0.0.100",
                    53,
                    Udp,
                    NAT,
                    Some(&[(1, 1), (2, 1), (3, 1)]),
                ),
                vip(2, "10.0.0.101", 80, Tcp, DSR, Some(&[(1, 1), (2, 2)])),
                vip(3, "10.0.0.101", 53, Udp, DSR, Some(&[(2, 1), (3, 1)])),
                vip(
                    4,
                    "2001:db8::100",
                    80,
                    Tcp,
                    NAT,
                    Some(&[(11, 2), (12, 1), (13, 1)]),
                ),
                vip(5, "2001:db8::100", 53, Udp, NAT, Some(&[(11, 1), (12, 1)])),
                vip(6, "2001:db8::101", 80, Tcp, DSR, Some(&[(12, 1), (13, 1)])),
                vip(7, "2001:db8::101", 53, Udp, DSR, Some(&[(11, 1), (13, 2)])),
                // A VIP whose table is empty (every weight 0).
                vip(8, "10.0.0.102", 80, Tcp, NAT, Some(&[(1, 0)])),
                // A VIP that never got a table.
                vip(9, "2001:db8::102", 80, Tcp, NAT, None),
                // An IPv4 VIP whose only DIP is IPv6 (a misconfiguration).
                vip(10, "10.0.0.103", 80, Tcp, NAT, Some(&[(11, 1)])),
                // NAT VIP whose DIP 4 rewrites the port to 9090.
                vip(11, "10.0.0.104", 443, Tcp, NAT, Some(&[(4, 1)])),
            ],
        }
    }

    pub fn dip(&self, id: u32) -> &Dip {
        self.dips.iter().find(|d| d.id == id).unwrap()
    }

    pub fn vip(&self, id: u32) -> &Vip {
        self.vips.iter().find(|v| v.id == id).unwrap()
    }

    /// The service endpoints of the nat VIPs' DIPs, each with the nat
    /// VIPs it serves (what `apply` writes).
    pub fn nat_endpoints(&self) -> HashMap<weir_endpoint, weir_nat_endpoint> {
        let mut out = HashMap::new();
        for v in self.vips.iter().filter(|v| v.mode == NAT) {
            for (id, _) in v.weights.iter().flatten() {
                let d = self.dip(*id);
                let (addr, family) = addr_words(d.addr);
                let ep = weir_endpoint {
                    addr,
                    port: d.port_for(v.port).to_be(),
                    proto: v.proto.number(),
                    family,
                };
                let value: &mut weir_nat_endpoint = out.entry(ep).or_default();
                value.vips[value.count as usize] = weir_vip_addr {
                    addr: addr_words(v.addr).0,
                    port: v.port.to_be(),
                    pad: [0; 2],
                };
                value.count += 1;
            }
        }
        out
    }

    /// The DIP weir-core predicts for a new flow to `vip`.
    pub fn predict(&self, vip: u32, tuple: &FlowTuple) -> Option<&Dip> {
        let h = flow_hash(&tuple.key(), DEFAULT_SEED);
        self.vip(vip).table().select(h).map(|id| self.dip(id))
    }
}
