//! Test frames for the software load balancer's tests, built with
//! etherparse (every length and checksum computed from scratch), so an
//! expected output is an independently built frame, never a patched input.

use std::net::IpAddr;

use etherparse::{Ipv4Header, Ipv6Header, PacketBuilder, TcpHeader, UdpHeader};

use weir_core::flow::{FlowTuple, Proto};

pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xcc];
/// L2 destination of the client's frames (the router's view of the VIP).
pub const VIP_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xaa];

/// TCP flags of a test segment (the bits of byte 13).
pub const SYN: u8 = 0x02;
pub const ACK: u8 = 0x10;
pub const SYN_ACK: u8 = SYN | ACK;
pub const PSH_ACK: u8 = 0x08 | ACK;
pub const FIN_ACK: u8 = 0x01 | ACK;
pub const RST: u8 = 0x04;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4 {
    Tcp(u8),
    /// `zero_csum`: an IPv4 datagram without checksum.
    Udp {
        zero_csum: bool,
    },
}

/// Ethernet II + IPv4/IPv6 + TCP/UDP + payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestFrame {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub l4: L4,
    pub payload: Vec<u8>,
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|_| panic!("test address {s}"))
}

/// A client's TCP segment as it arrives at the load balancer.
pub fn tcp(src: &str, sport: u16, dst: &str, dport: u16, flags: u8) -> TestFrame {
    TestFrame {
        src_mac: CLIENT_MAC,
        dst_mac: VIP_MAC,
        src: ip(src),
        dst: ip(dst),
        sport,
        dport,
        l4: L4::Tcp(flags),
        payload: Vec::new(),
    }
}

/// A client's UDP datagram as it arrives at the load balancer.
pub fn udp(src: &str, sport: u16, dst: &str, dport: u16) -> TestFrame {
    TestFrame {
        l4: L4::Udp { zero_csum: false },
        payload: b"weir-udp-payload".to_vec(),
        ..tcp(src, sport, dst, dport, 0)
    }
}

impl TestFrame {
    pub fn payload(mut self, p: &[u8]) -> TestFrame {
        self.payload = p.to_vec();
        self
    }

    pub fn flags(mut self, flags: u8) -> TestFrame {
        self.l4 = L4::Tcp(flags);
        self
    }

    pub fn macs(mut self, src: [u8; 6], dst: [u8; 6]) -> TestFrame {
        self.src_mac = src;
        self.dst_mac = dst;
        self
    }

    pub fn zero_udp_csum(mut self) -> TestFrame {
        self.l4 = L4::Udp { zero_csum: true };
        self
    }

    pub fn with_dst(mut self, addr: &str, port: u16) -> TestFrame {
        self.dst = ip(addr);
        self.dport = port;
        self
    }

    pub fn with_src(mut self, addr: &str, port: u16) -> TestFrame {
        self.src = ip(addr);
        self.sport = port;
        self
    }

    pub fn tuple(&self) -> FlowTuple {
        FlowTuple {
            src: self.src,
            dst: self.dst,
            sport: self.sport,
            dport: self.dport,
            proto: match self.l4 {
                L4::Tcp(_) => Proto::Tcp,
                L4::Udp { .. } => Proto::Udp,
            },
        }
    }

    pub fn l4_off(&self) -> usize {
        14 + if self.src.is_ipv4() { 20 } else { 40 }
    }

    pub fn bytes(&self) -> Vec<u8> {
        let eth = PacketBuilder::ethernet2(self.src_mac, self.dst_mac);
        let ip = match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => eth.ipv4(s.octets(), d.octets(), 64),
            (IpAddr::V6(s), IpAddr::V6(d)) => eth.ipv6(s.octets(), d.octets(), 64),
            _ => panic!("mixed address families in a test frame"),
        };
        let mut out = Vec::new();
        match self.l4 {
            L4::Tcp(flags) => {
                let mut t = ip.tcp(self.sport, self.dport, 0x1000_0001, 64240);
                if flags & SYN != 0 {
                    t = t.syn();
                }
                if flags & ACK != 0 {
                    t = t.ack(0x2000_0002);
                }
                if flags & 0x01 != 0 {
                    t = t.fin();
                }
                if flags & RST != 0 {
                    t = t.rst();
                }
                if flags & 0x08 != 0 {
                    t = t.psh();
                }
                t.write(&mut out, &self.payload).unwrap();
            }
            L4::Udp { zero_csum } => {
                ip.udp(self.sport, self.dport)
                    .write(&mut out, &self.payload)
                    .unwrap();
                if zero_csum {
                    assert!(self.src.is_ipv4(), "IPv6 UDP must carry a checksum");
                    let c = self.l4_off() + 6;
                    out[c..c + 2].copy_from_slice(&[0, 0]);
                }
            }
        }
        out
    }
}

fn raw_frame(ethertype: u16, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + body.len());
    f.extend_from_slice(&VIP_MAC);
    f.extend_from_slice(&CLIENT_MAC);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(body);
    f
}

/// An ARP request.
pub fn arp() -> Vec<u8> {
    let mut b = vec![0, 1, 0x08, 0x00, 6, 4, 0, 1];
    b.extend_from_slice(&CLIENT_MAC);
    b.extend_from_slice(&[192, 0, 2, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 100]);
    raw_frame(0x0806, &b)
}

/// ICMP or ICMPv6 echo request.
pub fn icmp_echo(src: &str, dst: &str) -> Vec<u8> {
    let eth = PacketBuilder::ethernet2(CLIENT_MAC, VIP_MAC);
    let mut out = Vec::new();
    match (ip(src), ip(dst)) {
        (IpAddr::V4(s), IpAddr::V4(d)) => eth
            .ipv4(s.octets(), d.octets(), 64)
            .icmpv4_echo_request(7, 1)
            .write(&mut out, b"ping")
            .unwrap(),
        (IpAddr::V6(s), IpAddr::V6(d)) => eth
            .ipv6(s.octets(), d.octets(), 64)
            .icmpv6_echo_request(7, 1)
            .write(&mut out, b"ping")
            .unwrap(),
        _ => panic!("mixed families"),
    }
    out
}

/// An IPv4 GRE datagram (protocol 47) to the VIP.
pub fn gre_v4() -> Vec<u8> {
    let body = [0u8; 16];
    let mut h = Ipv4Header::new(
        body.len() as u16,
        64,
        etherparse::IpNumber(47),
        [192, 0, 2, 1],
        [10, 0, 0, 100],
    )
    .unwrap();
    h.header_checksum = h.calc_header_checksum();
    let mut b = h.to_bytes().to_vec();
    b.extend_from_slice(&body);
    raw_frame(0x0800, &b)
}

/// Hop-by-hop, then destination options and routing headers by turns: `n`
/// extension headers of 8 bytes each.
pub fn ext_chain(n: usize) -> Vec<(u8, Vec<u8>)> {
    let padn = || vec![1, 4, 0, 0, 0, 0];
    (0..n)
        .map(|i| match i {
            0 => (0u8, padn()),
            i if i % 2 == 1 => (60, padn()),
            _ => (43, vec![0, 0, 0, 0, 0, 0]),
        })
        .collect()
}

/// A fragment header (offset 0, more fragments).
pub fn fragment_ext() -> (u8, Vec<u8>) {
    (44, vec![0, 1, 0, 0, 0x56, 0x78])
}

/// An IPv6 TCP/UDP frame whose L4 header follows extension headers (type,
/// body of 6 + 8n bytes); the L4 checksum is computed from scratch.
pub fn ipv6_with_exts(frame: &TestFrame, exts: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let (IpAddr::V6(s), IpAddr::V6(d)) = (frame.src, frame.dst) else {
        panic!("ipv6_with_exts needs IPv6 addresses");
    };
    let (s, d) = (s.octets(), d.octets());
    let mut l4 = Vec::new();
    let l4_proto = match frame.l4 {
        L4::Tcp(flags) => {
            let mut t = TcpHeader::new(frame.sport, frame.dport, 0x1000_0001, 64240);
            t.syn = flags & SYN != 0;
            t.ack = flags & ACK != 0;
            t.fin = flags & 0x01 != 0;
            t.rst = flags & RST != 0;
            t.psh = flags & 0x08 != 0;
            if t.ack {
                t.acknowledgment_number = 0x2000_0002;
            }
            t.checksum = t.calc_checksum_ipv6_raw(s, d, &frame.payload).unwrap();
            l4.extend_from_slice(&t.to_bytes());
            6u8
        }
        L4::Udp { .. } => {
            let mut u = UdpHeader {
                source_port: frame.sport,
                destination_port: frame.dport,
                length: (8 + frame.payload.len()) as u16,
                checksum: 0,
            };
            u.checksum = u.calc_checksum_ipv6_raw(s, d, &frame.payload).unwrap();
            l4.extend_from_slice(&u.to_bytes());
            17
        }
    };
    l4.extend_from_slice(&frame.payload);
    let mut ext_bytes = Vec::new();
    for (i, (_, body)) in exts.iter().enumerate() {
        assert_eq!((body.len() + 2) % 8, 0, "extension body of 6 + 8n bytes");
        ext_bytes.push(exts.get(i + 1).map_or(l4_proto, |(t, _)| *t));
        ext_bytes.push(((body.len() + 2) / 8 - 1) as u8);
        ext_bytes.extend_from_slice(body);
    }
    let h = Ipv6Header {
        traffic_class: 0,
        flow_label: Default::default(),
        payload_length: (ext_bytes.len() + l4.len()) as u16,
        next_header: etherparse::IpNumber(exts.first().map_or(l4_proto, |(t, _)| *t)),
        hop_limit: 64,
        source: s,
        destination: d,
    };
    let mut b = h.to_bytes().to_vec();
    b.extend_from_slice(&ext_bytes);
    b.extend_from_slice(&l4);
    let mut f = raw_frame(0x86dd, &b);
    f[..6].copy_from_slice(&frame.dst_mac);
    f[6..12].copy_from_slice(&frame.src_mac);
    f
}
