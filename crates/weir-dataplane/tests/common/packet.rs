//! Test packets, built with etherparse (checksums computed from scratch),
//! and an independent checksum verifier for frames the program rewrote.
//!
//! Nothing here runs or imitates the BPF program: an expected output is a
//! second frame built from the rewritten addresses, never a patched input.

use std::net::IpAddr;

use etherparse::{Ipv4Header, Ipv6Header, PacketBuilder, TcpHeader, UdpHeader};
use weir_core::flow::{FlowTuple, Proto};

pub const ETH_HLEN: usize = 14;
pub const ETH_P_IP: u16 = 0x0800;
pub const ETH_P_IPV6: u16 = 0x86dd;

/// TCP flags of a test segment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpFlags {
    pub syn: bool,
    pub ack: bool,
    pub fin: bool,
    pub rst: bool,
    pub psh: bool,
}

impl TcpFlags {
    pub const SYN: TcpFlags = TcpFlags {
        syn: true,
        ack: false,
        fin: false,
        rst: false,
        psh: false,
    };
    pub const SYN_ACK: TcpFlags = TcpFlags {
        syn: true,
        ack: true,
        fin: false,
        rst: false,
        psh: false,
    };
    pub const ACK: TcpFlags = TcpFlags {
        syn: false,
        ack: true,
        fin: false,
        rst: false,
        psh: false,
    };
    pub const PSH_ACK: TcpFlags = TcpFlags {
        syn: false,
        ack: true,
        fin: false,
        rst: false,
        psh: true,
    };
    pub const FIN_ACK: TcpFlags = TcpFlags {
        syn: false,
        ack: true,
        fin: true,
        rst: false,
        psh: false,
    };
    pub const RST: TcpFlags = TcpFlags {
        syn: false,
        ack: false,
        fin: false,
        rst: true,
        psh: false,
    };
}

/// The transport part of a test packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4 {
    Tcp(TcpFlags),
    /// `zero_csum`: send an IPv4 UDP datagram without checksum (field 0).
    Udp {
        zero_csum: bool,
    },
}

/// A TCP or UDP frame: Ethernet II + IPv4/IPv6 + TCP/UDP + payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub l4: L4,
    pub payload: Vec<u8>,
}

impl Frame {
    pub fn tcp(src: IpAddr, sport: u16, dst: IpAddr, dport: u16, flags: TcpFlags) -> Frame {
        Frame {
            src_mac: [0; 6],
            dst_mac: [0; 6],
            src,
            dst,
            sport,
            dport,
            l4: L4::Tcp(flags),
            payload: Vec::new(),
        }
    }

    pub fn udp(src: IpAddr, sport: u16, dst: IpAddr, dport: u16) -> Frame {
        Frame {
            src_mac: [0; 6],
            dst_mac: [0; 6],
            src,
            dst,
            sport,
            dport,
            l4: L4::Udp { zero_csum: false },
            payload: b"weir-udp-payload".to_vec(),
        }
    }

    pub fn macs(mut self, src: [u8; 6], dst: [u8; 6]) -> Frame {
        self.src_mac = src;
        self.dst_mac = dst;
        self
    }

    pub fn payload(mut self, p: &[u8]) -> Frame {
        self.payload = p.to_vec();
        self
    }

    pub fn zero_udp_csum(mut self) -> Frame {
        self.l4 = L4::Udp { zero_csum: true };
        self
    }

    /// The same frame with the destination address and port replaced.
    pub fn with_dst(mut self, addr: IpAddr, port: u16) -> Frame {
        self.dst = addr;
        self.dport = port;
        self
    }

    /// The same frame with the source address and port replaced.
    pub fn with_src(mut self, addr: IpAddr, port: u16) -> Frame {
        self.src = addr;
        self.sport = port;
        self
    }

    pub fn proto(&self) -> Proto {
        match self.l4 {
            L4::Tcp(_) => Proto::Tcp,
            L4::Udp { .. } => Proto::Udp,
        }
    }

    /// The 5-tuple as the data plane keys it.
    pub fn tuple(&self) -> FlowTuple {
        FlowTuple {
            src: self.src,
            dst: self.dst,
            sport: self.sport,
            dport: self.dport,
            proto: self.proto(),
        }
    }

    /// Offset of the L4 header in the frame.
    pub fn l4_off(&self) -> usize {
        ETH_HLEN
            + match self.src {
                IpAddr::V4(_) => 20,
                IpAddr::V6(_) => 40,
            }
    }

    /// Serialises the frame; etherparse computes every length and checksum.
    pub fn bytes(&self) -> Vec<u8> {
        let eth = PacketBuilder::ethernet2(self.src_mac, self.dst_mac);
        let ip = match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => eth.ipv4(s.octets(), d.octets(), 64),
            (IpAddr::V6(s), IpAddr::V6(d)) => eth.ipv6(s.octets(), d.octets(), 64),
            _ => panic!("mixed address families in a test frame"),
        };
        let mut out = Vec::new();
        match self.l4 {
            L4::Tcp(f) => {
                let mut t = ip.tcp(self.sport, self.dport, 0x1000_0001, 64240);
                if f.syn {
                    t = t.syn();
                }
                if f.ack {
                    t = t.ack(0x2000_0002);
                }
                if f.fin {
                    t = t.fin();
                }
                if f.rst {
                    t = t.rst();
                }
                if f.psh {
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

/// Raw Ethernet frame with an arbitrary ethertype and body.
pub fn raw_frame(src_mac: [u8; 6], dst_mac: [u8; 6], ethertype: u16, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(ETH_HLEN + body.len());
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(body);
    f
}

/// An ARP request (who-has `target` tell `sender`).
pub fn arp_request(src_mac: [u8; 6], sender: [u8; 4], target: [u8; 4]) -> Vec<u8> {
    let mut b = vec![0, 1, 0x08, 0x00, 6, 4, 0, 1];
    b.extend_from_slice(&src_mac);
    b.extend_from_slice(&sender);
    b.extend_from_slice(&[0; 6]);
    b.extend_from_slice(&target);
    raw_frame(src_mac, [0xff; 6], 0x0806, &b)
}

/// ICMP (v4) or ICMPv6 echo request.
pub fn icmp_echo(src_mac: [u8; 6], dst_mac: [u8; 6], src: IpAddr, dst: IpAddr) -> Vec<u8> {
    let eth = PacketBuilder::ethernet2(src_mac, dst_mac);
    let mut out = Vec::new();
    match (src, dst) {
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

/// An IPv4 datagram of another protocol (GRE, 47) with a valid header.
pub fn ipv4_other_proto(src_mac: [u8; 6], dst_mac: [u8; 6], src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
    let body = [0u8; 16];
    let mut h = Ipv4Header::new(body.len() as u16, 64, etherparse::IpNumber(47), src, dst).unwrap();
    h.header_checksum = h.calc_header_checksum();
    let mut ip = h.to_bytes().to_vec();
    ip.extend_from_slice(&body);
    raw_frame(src_mac, dst_mac, ETH_P_IP, &ip)
}

/// An IPv6 packet whose payload follows extension headers: `exts` is a list
/// of (header type, body of 6 + 8n bytes); the last one's next header is TCP
/// or UDP as `frame` says, and the L4 checksum is computed from scratch.
pub fn ipv6_with_exts(frame: &Frame, exts: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let (IpAddr::V6(s), IpAddr::V6(d)) = (frame.src, frame.dst) else {
        panic!("ipv6_with_exts needs IPv6 addresses");
    };
    let l4 = l4_bytes_v6(frame, s.octets(), d.octets());
    let l4_proto = match frame.l4 {
        L4::Tcp(_) => 6u8,
        L4::Udp { .. } => 17,
    };
    let mut ext_bytes = Vec::new();
    for (i, (_, body)) in exts.iter().enumerate() {
        assert_eq!(
            (body.len() + 2) % 8,
            0,
            "extension header body of 6 + 8n bytes"
        );
        let next = exts.get(i + 1).map_or(l4_proto, |(t, _)| *t);
        ext_bytes.push(next);
        ext_bytes.push(((body.len() + 2) / 8 - 1) as u8);
        ext_bytes.extend_from_slice(body);
    }
    let first = exts.first().map_or(l4_proto, |(t, _)| *t);
    let h = Ipv6Header {
        traffic_class: 0,
        flow_label: Default::default(),
        payload_length: (ext_bytes.len() + l4.len()) as u16,
        next_header: etherparse::IpNumber(first),
        hop_limit: 64,
        source: s.octets(),
        destination: d.octets(),
    };
    let mut ip = h.to_bytes().to_vec();
    ip.extend_from_slice(&ext_bytes);
    ip.extend_from_slice(&l4);
    raw_frame(frame.src_mac, frame.dst_mac, ETH_P_IPV6, &ip)
}

/// TCP/UDP header + payload of `frame` with its IPv6 checksum.
fn l4_bytes_v6(frame: &Frame, s: [u8; 16], d: [u8; 16]) -> Vec<u8> {
    let mut out = Vec::new();
    match frame.l4 {
        L4::Tcp(f) => {
            let mut t = TcpHeader::new(frame.sport, frame.dport, 0x1000_0001, 64240);
            t.syn = f.syn;
            t.ack = f.ack;
            t.fin = f.fin;
            t.rst = f.rst;
            t.psh = f.psh;
            if f.ack {
                t.acknowledgment_number = 0x2000_0002;
            }
            t.checksum = t.calc_checksum_ipv6_raw(s, d, &frame.payload).unwrap();
            out.extend_from_slice(&t.to_bytes());
        }
        L4::Udp { .. } => {
            let mut u = UdpHeader {
                source_port: frame.sport,
                destination_port: frame.dport,
                length: (8 + frame.payload.len()) as u16,
                checksum: 0,
            };
            u.checksum = u.calc_checksum_ipv6_raw(s, d, &frame.payload).unwrap();
            out.extend_from_slice(&u.to_bytes());
        }
    }
    out.extend_from_slice(&frame.payload);
    out
}

/// Recomputes every checksum of a TCP/UDP frame from scratch (etherparse)
/// and compares it with the one in the frame. IPv6 extension headers are
/// not walked: the frame must carry TCP/UDP right after the fixed header.
pub fn verify_checksums(frame: &[u8]) -> Result<(), String> {
    if frame.len() < ETH_HLEN {
        return Err("shorter than Ethernet".into());
    }
    let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    let ip = &frame[ETH_HLEN..];
    match ethertype {
        ETH_P_IP => {
            let (h, rest) = Ipv4Header::from_slice(ip).map_err(|e| format!("ipv4: {e}"))?;
            if h.header_checksum != h.calc_header_checksum() {
                return Err(format!(
                    "IPv4 header checksum {:#06x}, recomputed {:#06x}",
                    h.header_checksum,
                    h.calc_header_checksum()
                ));
            }
            let l4_len = usize::from(h.total_len) - h.header_len();
            let l4 = rest.get(..l4_len).ok_or("datagram longer than frame")?;
            match h.protocol.0 {
                6 => {
                    let (t, payload) = TcpHeader::from_slice(l4).map_err(|e| format!("{e}"))?;
                    let want = t.calc_checksum_ipv4(&h, payload).unwrap();
                    check("TCP", t.checksum, want)
                }
                17 => {
                    let (u, payload) = UdpHeader::from_slice(l4).map_err(|e| format!("{e}"))?;
                    if u.checksum == 0 {
                        return Ok(()); // no checksum (RFC 768)
                    }
                    let payload = &payload[..usize::from(u.length) - 8];
                    let want = u.calc_checksum_ipv4(&h, payload).unwrap();
                    check("UDP", u.checksum, want)
                }
                p => Err(format!("not TCP/UDP: {p}")),
            }
        }
        ETH_P_IPV6 => {
            let (h, rest) = Ipv6Header::from_slice(ip).map_err(|e| format!("ipv6: {e}"))?;
            let l4 = rest
                .get(..usize::from(h.payload_length))
                .ok_or("datagram longer than frame")?;
            match h.next_header.0 {
                6 => {
                    let (t, payload) = TcpHeader::from_slice(l4).map_err(|e| format!("{e}"))?;
                    let want = t.calc_checksum_ipv6(&h, payload).unwrap();
                    check("TCP", t.checksum, want)
                }
                17 => {
                    let (u, payload) = UdpHeader::from_slice(l4).map_err(|e| format!("{e}"))?;
                    let payload = &payload[..usize::from(u.length) - 8];
                    let want = u.calc_checksum_ipv6(&h, payload).unwrap();
                    check("UDP", u.checksum, want)
                }
                p => Err(format!("not TCP/UDP: {p}")),
            }
        }
        t => Err(format!("not IP: ethertype {t:#06x}")),
    }
}

fn check(what: &str, have: u16, want: u16) -> Result<(), String> {
    if have == want {
        Ok(())
    } else {
        Err(format!(
            "{what} checksum {have:#06x}, recomputed {want:#06x}"
        ))
    }
}

/// A readable diff of two frames for assertion messages.
pub fn diff(have: &[u8], want: &[u8]) -> String {
    let mut s = format!("lengths: have {} want {}\n", have.len(), want.len());
    for i in 0..have.len().max(want.len()) {
        let (a, b) = (have.get(i), want.get(i));
        if a != b {
            s.push_str(&format!("  byte {i}: have {a:02x?} want {b:02x?}\n"));
        }
    }
    s
}
