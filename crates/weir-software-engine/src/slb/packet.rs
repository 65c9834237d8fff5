//! A zero-copy view of an Ethernet frame and its classification, the exact
//! counterpart of `bpf/lib/parse.h`.
//!
//! In smoltcp's style: byte ranges live in a private `field` module,
//! [`Frame::new_checked`] / [`Frame::check_len`] make sure the Ethernet
//! header is there before an accessor reads it, and [`Frame::parse`] never
//! panics and never reads past the buffer, whatever the bytes say. Its
//! verdict is parse.h's: a TCP or UDP packet ([`Parsed::L4`], with the
//! 5-tuple in the byte layout of `struct weir_flow_key`), or not IP, ICMP, a
//! fragment, another L4 protocol, or malformed (truncated, inconsistent
//! length fields, or an IPv6 extension chain longer than the
//! [`IPV6_EXT_MAX`] headers parse.h follows).

use std::fmt;

use weir_abi::{weir_flow_key, WEIR_AF_INET, WEIR_AF_INET6};

/// Byte ranges of the headers weir reads, relative to each header's start.
mod field {
    pub type Field = core::ops::Range<usize>;

    pub const ETH_DST: Field = 0..6;
    pub const ETH_SRC: Field = 6..12;
    pub const ETH_TYPE: Field = 12..14;

    pub const V4_VER_IHL: usize = 0;
    pub const V4_TOTAL_LEN: Field = 2..4;
    pub const V4_FRAG: Field = 6..8;
    pub const V4_PROTO: usize = 9;
    pub const V4_SRC: Field = 12..16;
    pub const V4_DST: Field = 16..20;

    pub const V6_PAYLOAD_LEN: Field = 4..6;
    pub const V6_NEXT_HEADER: usize = 6;
    pub const V6_SRC: Field = 8..24;
    pub const V6_DST: Field = 24..40;

    /// An IPv6 extension header: next header, then length in 8-byte units
    /// not counting the first 8.
    pub const EXT_NEXT: usize = 0;
    pub const EXT_LEN: usize = 1;

    pub const L4_SRC_PORT: Field = 0..2;
    pub const L4_DST_PORT: Field = 2..4;
    pub const TCP_DATA_OFF: usize = 12;
    pub const TCP_FLAGS: usize = 13;
    pub const UDP_LEN: Field = 4..6;
}

/// Length of an Ethernet II header (no VLAN tags: a tagged frame is not IP).
pub const ETH_HLEN: usize = 14;
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
const IPV4_HLEN: usize = 20;
const IPV6_HLEN: usize = 40;
const TCP_HLEN: usize = 20;
const UDP_HLEN: usize = 8;

pub const IPPROTO_ICMP: u8 = 1;
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;
pub const IPPROTO_ICMPV6: u8 = 58;
const IPPROTO_HOPOPTS: u8 = 0;
const IPPROTO_ROUTING: u8 = 43;
const IPPROTO_FRAGMENT: u8 = 44;
const IPPROTO_DSTOPTS: u8 = 60;

/// IPv6 extension headers (hop-by-hop, routing, destination options)
/// followed before the chain counts as malformed, as in parse.h.
pub const IPV6_EXT_MAX: usize = 4;
/// parse.h masks packet offsets with this for the verifier and refuses
/// anything past it; so does this parser.
const PKT_OFF_MASK: usize = 0x3fff;
const IP_MF: u16 = 0x2000;
const IP_OFFSET: u16 = 0x1fff;

/// TCP flag bits (byte 13 of the header).
pub const TCP_FIN: u8 = 0x01;
pub const TCP_SYN: u8 = 0x02;
pub const TCP_RST: u8 = 0x04;
pub const TCP_ACK: u8 = 0x10;

/// The buffer is shorter than an Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncated {
    pub len: usize,
}

impl fmt::Display for Truncated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a {}-byte buffer holds no Ethernet header ({ETH_HLEN} bytes)",
            self.len
        )
    }
}

impl std::error::Error for Truncated {}

/// A TCP or UDP packet as parse.h describes it (`struct packet`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet {
    /// The 5-tuple as on the wire, in `weir_flow_key` layout (addresses as
    /// four big-endian words, IPv4 in word 0; ports big-endian).
    pub key: weir_flow_key,
    /// Offset of the TCP or UDP header in the frame.
    pub l4_off: usize,
    /// The IP datagram's length as its header says (the frame may be
    /// longer: Ethernet pads short frames).
    pub l3_len: usize,
    /// L4 payload bytes, past the TCP or UDP header.
    pub payload_len: usize,
    /// Byte 13 of the TCP header (0 for UDP).
    pub tcp_flags: u8,
    /// The frame's Ethernet source and destination: a nat connection's
    /// replies go back to the source, from the destination.
    pub eth_src: [u8; 6],
    pub eth_dst: [u8; 6],
}

impl Packet {
    pub fn is_tcp(&self) -> bool {
        self.key.proto == IPPROTO_TCP
    }

    pub fn is_ipv4(&self) -> bool {
        u32::from(self.key.family) == WEIR_AF_INET
    }

    /// A TCP SYN without ACK: what opens a connection.
    pub fn is_syn(&self) -> bool {
        self.is_tcp() && self.tcp_flags & (TCP_SYN | TCP_ACK) == TCP_SYN
    }
}

/// parse.h's verdict on a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// TCP or UDP over IPv4 or IPv6, every length consistent.
    L4(Packet),
    /// Not IPv4 or IPv6 by its ethertype (ARP, LLDP, VLAN-tagged ...).
    NotIp,
    /// ICMP or ICMPv6.
    Icmp,
    /// An IPv4 fragment, or an IPv6 packet with a fragment header.
    Fragment,
    /// IP, but neither TCP, UDP nor ICMP.
    OtherL4,
    /// Truncated, inconsistent lengths, or an IPv6 extension chain longer
    /// than [`IPV6_EXT_MAX`].
    Malformed,
}

/// A view of an Ethernet frame in a buffer.
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checking it: accessors other than
    /// [`Frame::parse`] panic on a buffer shorter than an Ethernet header.
    pub const fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Wraps a buffer that holds at least an Ethernet header.
    pub fn new_checked(buffer: T) -> Result<Frame<T>, Truncated> {
        let frame = Frame::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// Whether the accessors can read the Ethernet header.
    pub fn check_len(&self) -> Result<(), Truncated> {
        let len = self.buffer.as_ref().len();
        if len < ETH_HLEN {
            Err(Truncated { len })
        } else {
            Ok(())
        }
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn dst_mac(&self) -> [u8; 6] {
        mac(&self.buffer.as_ref()[field::ETH_DST])
    }

    pub fn src_mac(&self) -> [u8; 6] {
        mac(&self.buffer.as_ref()[field::ETH_SRC])
    }

    pub fn ethertype(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::ETH_TYPE];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Classifies the frame exactly as parse.h does. Never panics, on any
    /// buffer (also one that was not checked).
    pub fn parse(&self) -> Parsed {
        parse(self.buffer.as_ref())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    pub fn set_dst_mac(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[field::ETH_DST].copy_from_slice(&mac);
    }

    pub fn set_src_mac(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[field::ETH_SRC].copy_from_slice(&mac);
    }
}

fn mac(b: &[u8]) -> [u8; 6] {
    let mut m = [0; 6];
    m.copy_from_slice(b);
    m
}

/// Bounds-checked reads: `None` past the end, like parse.h's checks
/// against data_end.
fn byte(b: &[u8], off: usize) -> Option<u8> {
    b.get(off).copied()
}

fn be16(b: &[u8], off: usize) -> Option<u16> {
    let s = b.get(off..off + 2)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

/// The bytes of a field, in place (ports and addresses keep network order).
fn bytes<const N: usize>(b: &[u8], off: usize) -> Option<[u8; N]> {
    b.get(off..off + N)?.try_into().ok()
}

/// Four bytes as the in-memory word `weir_flow_key` stores.
fn word(b: [u8; 4]) -> u32 {
    u32::from_ne_bytes(b)
}

/// Classifies `frame` as parse.h's `parse_packet` does.
pub fn parse(frame: &[u8]) -> Parsed {
    let Some(ethertype) = be16(frame, field::ETH_TYPE.start) else {
        return Parsed::Malformed;
    };
    let result = match ethertype {
        ETHERTYPE_IPV4 => parse_ipv4(frame),
        ETHERTYPE_IPV6 => parse_ipv6(frame),
        _ => return Parsed::NotIp,
    };
    result.unwrap_or(Parsed::Malformed)
}

/// `None` is malformed: the `?` of a read past the end is parse.h's
/// `return PARSE_MALFORMED`.
fn parse_ipv4(frame: &[u8]) -> Option<Parsed> {
    let ip = ETH_HLEN;
    if frame.len() < ip + IPV4_HLEN {
        return None;
    }
    let ver_ihl = byte(frame, ip + field::V4_VER_IHL)?;
    if ver_ihl >> 4 != 4 || ver_ihl & 0x0f < 5 {
        return None;
    }
    let ihl_len = usize::from(ver_ihl & 0x0f) * 4;
    let l3_len = usize::from(be16(frame, ip + field::V4_TOTAL_LEN.start)?);
    if l3_len < ihl_len || l3_len > frame.len() - ip {
        return None;
    }
    let mut key = weir_flow_key {
        family: WEIR_AF_INET as u8,
        proto: byte(frame, ip + field::V4_PROTO)?,
        ..Default::default()
    };
    key.src[0] = word(bytes(frame, ip + field::V4_SRC.start)?);
    key.dst[0] = word(bytes(frame, ip + field::V4_DST.start)?);
    if be16(frame, ip + field::V4_FRAG.start)? & (IP_MF | IP_OFFSET) != 0 {
        return Some(Parsed::Fragment);
    }
    if key.proto == IPPROTO_ICMP {
        return Some(Parsed::Icmp);
    }
    parse_l4(frame, key, ip + ihl_len, ip + l3_len, l3_len)
}

fn is_ipv6_ext(next: u8) -> bool {
    matches!(next, IPPROTO_HOPOPTS | IPPROTO_ROUTING | IPPROTO_DSTOPTS)
}

fn parse_ipv6(frame: &[u8]) -> Option<Parsed> {
    let ip = ETH_HLEN;
    if frame.len() < ip + IPV6_HLEN {
        return None;
    }
    if byte(frame, ip)? >> 4 != 6 {
        return None;
    }
    let l3_len = IPV6_HLEN + usize::from(be16(frame, ip + field::V6_PAYLOAD_LEN.start)?);
    if l3_len > frame.len() - ip {
        return None;
    }
    let mut key = weir_flow_key {
        family: WEIR_AF_INET6 as u8,
        ..Default::default()
    };
    let src: [u8; 16] = bytes(frame, ip + field::V6_SRC.start)?;
    let dst: [u8; 16] = bytes(frame, ip + field::V6_DST.start)?;
    for i in 0..4 {
        key.src[i] = word([src[4 * i], src[4 * i + 1], src[4 * i + 2], src[4 * i + 3]]);
        key.dst[i] = word([dst[4 * i], dst[4 * i + 1], dst[4 * i + 2], dst[4 * i + 3]]);
    }
    let end = ip + l3_len;
    let mut next = byte(frame, ip + field::V6_NEXT_HEADER)?;
    let mut off = ip + IPV6_HLEN;
    for _ in 0..IPV6_EXT_MAX {
        if !is_ipv6_ext(next) {
            break;
        }
        // parse.h reads the 2-byte option header against the frame's end,
        // then checks the header's extent against the datagram's.
        let hdr_len = byte(frame, off + field::EXT_LEN)?;
        next = byte(frame, off + field::EXT_NEXT)?;
        off += (usize::from(hdr_len) + 1) * 8;
        if off > end || off > PKT_OFF_MASK {
            return None;
        }
    }
    if next == IPPROTO_FRAGMENT {
        return Some(Parsed::Fragment);
    }
    // Still in the chain: what follows may be a fragment header.
    if is_ipv6_ext(next) {
        return None;
    }
    key.proto = next;
    if next == IPPROTO_ICMPV6 {
        return Some(Parsed::Icmp);
    }
    parse_l4(frame, key, off, end, l3_len)
}

/// TCP or UDP at `l4_off`; the datagram ends at `end` (<= frame length).
fn parse_l4(
    frame: &[u8],
    mut key: weir_flow_key,
    l4_off: usize,
    end: usize,
    l3_len: usize,
) -> Option<Parsed> {
    let l4_len = end - l4_off;
    let (payload_len, tcp_flags) = match key.proto {
        IPPROTO_TCP => {
            if frame.len() < l4_off + TCP_HLEN || l4_len < TCP_HLEN {
                return None;
            }
            let doff = usize::from(byte(frame, l4_off + field::TCP_DATA_OFF)? >> 4) * 4;
            if doff < TCP_HLEN || doff > l4_len {
                return None;
            }
            let flags = byte(frame, l4_off + field::TCP_FLAGS)?;
            (l4_len - doff, flags)
        }
        IPPROTO_UDP => {
            if frame.len() < l4_off + UDP_HLEN || l4_len < UDP_HLEN {
                return None;
            }
            let len = usize::from(be16(frame, l4_off + field::UDP_LEN.start)?);
            if len < UDP_HLEN || len > l4_len {
                return None;
            }
            (len - UDP_HLEN, 0)
        }
        _ => return Some(Parsed::OtherL4),
    };
    key.sport = u16::from_ne_bytes(bytes(frame, l4_off + field::L4_SRC_PORT.start)?);
    key.dport = u16::from_ne_bytes(bytes(frame, l4_off + field::L4_DST_PORT.start)?);
    Some(Parsed::L4(Packet {
        key,
        l4_off,
        l3_len,
        payload_len,
        tcp_flags,
        eth_src: bytes(frame, field::ETH_SRC.start)?,
        eth_dst: bytes(frame, field::ETH_DST.start)?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_testkit::fixture::*;
    use weir_testkit::frames::*;
    // The view under test, not the packet model's frame.
    use super::Frame;
    use weir_core::flow::{FlowTuple, Proto};

    fn l4(frame: &[u8]) -> Packet {
        match parse(frame) {
            Parsed::L4(p) => p,
            other => panic!("not L4: {other:?}"),
        }
    }

    #[test]
    fn tcp_and_udp_give_the_flow_key_of_weir_core() {
        for (src, dst) in [
            ("192.0.2.1", "10.0.0.100"),
            ("2001:db8:c::1", "2001:db8::100"),
        ] {
            let f = tcp(src, 40001, dst, 80, SYN).payload(b"hello");
            let p = l4(&f.bytes());
            let t = FlowTuple {
                src: src.parse().unwrap(),
                dst: dst.parse().unwrap(),
                sport: 40001,
                dport: 80,
                proto: Proto::Tcp,
            };
            assert_eq!(p.key, t.key());
            assert_eq!(p.payload_len, 5);
            assert_eq!(p.tcp_flags, TCP_SYN);
            assert!(p.is_syn());
            assert_eq!(p.l4_off, f.l4_off());
            assert_eq!((p.eth_src, p.eth_dst), (CLIENT_MAC, VIP_MAC));

            let u = udp(src, 5353, dst, 53).payload(b"abc");
            let p = l4(&u.bytes());
            assert_eq!(p.key.proto, IPPROTO_UDP);
            assert_eq!((p.payload_len, p.tcp_flags), (3, 0));
            assert!(!p.is_syn());
        }
        let ack = tcp("192.0.2.1", 1, "10.0.0.1", 2, SYN_ACK).bytes();
        assert!(!l4(&ack).is_syn());
    }

    #[test]
    fn classes_follow_parse_h() {
        let icmp = icmp_echo(CLIENT_MAC, VIP_MAC, ip("192.0.2.1"), ip("10.0.0.100"));
        assert_eq!(parse(&icmp), Parsed::Icmp);
        assert_eq!(
            parse(&icmp_echo(
                CLIENT_MAC,
                VIP_MAC,
                ip("2001:db8::1"),
                ip("2001:db8::2")
            )),
            Parsed::Icmp
        );
        assert_eq!(
            parse(&arp_request(CLIENT_MAC, [192, 0, 2, 1], [10, 0, 0, 100])),
            Parsed::NotIp
        );
        assert_eq!(
            parse(&ipv4_other_proto(
                CLIENT_MAC,
                VIP_MAC,
                [192, 0, 2, 1],
                [10, 0, 0, 100]
            )),
            Parsed::OtherL4
        );
        let mut frag = tcp("192.0.2.1", 1, "10.0.0.1", 2, SYN).bytes();
        frag[ETH_HLEN + 6] = 0x20; // MF
        assert_eq!(parse(&frag), Parsed::Fragment);
        let mut frag = tcp("192.0.2.1", 1, "10.0.0.1", 2, SYN).bytes();
        frag[ETH_HLEN + 7] = 1; // offset 8
        assert_eq!(parse(&frag), Parsed::Fragment);
        let mut df = tcp("192.0.2.1", 1, "10.0.0.1", 2, SYN).bytes();
        df[ETH_HLEN + 6] = 0x40; // DF alone is no fragment
        assert!(matches!(parse(&df), Parsed::L4(_)));
        assert_eq!(parse(&[0u8; 13]), Parsed::Malformed);
        assert_eq!(parse(&[]), Parsed::Malformed);
    }

    #[test]
    fn ipv6_extension_chains_up_to_the_parsed_depth() {
        let f = tcp("2001:db8:c::1", 40001, "2001:db8::100", 80, SYN);
        for n in 0..=IPV6_EXT_MAX {
            let frame = ipv6_with_exts(&f, &ext_chain(n));
            let p = l4(&frame);
            assert_eq!(p.key, f.tuple().key(), "{n} headers");
            assert_eq!(p.l4_off, ETH_HLEN + 40 + 8 * n);
        }
        let past = ipv6_with_exts(&f, &ext_chain(IPV6_EXT_MAX + 1));
        assert_eq!(parse(&past), Parsed::Malformed);
        for n in 0..=IPV6_EXT_MAX {
            let mut chain = ext_chain(n);
            chain.push(fragment_ext());
            assert_eq!(parse(&ipv6_with_exts(&f, &chain)), Parsed::Fragment, "{n}");
        }
        let mut chain = ext_chain(IPV6_EXT_MAX + 1);
        chain.push(fragment_ext());
        assert_eq!(parse(&ipv6_with_exts(&f, &chain)), Parsed::Malformed);
    }

    #[test]
    fn inconsistent_lengths_are_malformed() {
        let f = tcp("192.0.2.1", 40001, "10.0.0.100", 80, SYN).payload(b"abcdefgh");
        let ip = ETH_HLEN;
        let l4 = ETH_HLEN + 20;
        type Edit = Box<dyn Fn(&mut Vec<u8>)>;
        let cases: Vec<(&str, Edit)> = vec![
            ("IHL 4", Box::new(move |b| b[ip] = 0x44)),
            ("version 6 in IPv4", Box::new(move |b| b[ip] = 0x65)),
            (
                "total length past the frame",
                Box::new(move |b| {
                    let l = (b.len() - ip + 1) as u16;
                    b[ip + 2..ip + 4].copy_from_slice(&l.to_be_bytes());
                }),
            ),
            (
                "total length below IHL",
                Box::new(move |b| b[ip + 2..ip + 4].copy_from_slice(&19u16.to_be_bytes())),
            ),
            ("doff 4", Box::new(move |b| b[l4 + 12] = 0x40)),
            (
                "doff past the segment",
                Box::new(move |b| b[l4 + 12] = 0xf0),
            ),
        ];
        for (name, edit) in cases {
            let mut b = f.bytes();
            edit(&mut b);
            assert_eq!(parse(&b), Parsed::Malformed, "{name}");
        }
        let u = udp("192.0.2.1", 1, "10.0.0.1", 2).bytes();
        for len in [0u16, 7, (u.len() - l4 + 1) as u16] {
            let mut b = u.clone();
            b[l4 + 4..l4 + 6].copy_from_slice(&len.to_be_bytes());
            assert_eq!(parse(&b), Parsed::Malformed, "UDP length {len}");
        }
    }

    #[test]
    fn every_truncation_is_malformed_and_padding_is_not() {
        let frames = [
            tcp("192.0.2.1", 40001, "10.0.0.100", 80, SYN)
                .payload(b"x")
                .bytes(),
            udp("2001:db8:c::1", 5353, "2001:db8::100", 53).bytes(),
            icmp_echo(CLIENT_MAC, VIP_MAC, ip("192.0.2.1"), ip("10.0.0.100")),
        ];
        for full in &frames {
            for len in 0..full.len() {
                assert_eq!(parse(&full[..len]), Parsed::Malformed, "cut at {len}");
            }
            let mut padded = full.clone();
            padded.extend_from_slice(&[0xee; 6]);
            assert_eq!(parse(&padded), parse(full));
        }
    }

    #[test]
    fn the_frame_view_reads_and_writes_macs() {
        let mut b = tcp("192.0.2.1", 1, "10.0.0.1", 2, SYN).bytes();
        assert!(Frame::new_checked(&b[..13]).is_err());
        let mut f = Frame::new_checked(&mut b[..]).unwrap();
        assert_eq!(f.ethertype(), ETHERTYPE_IPV4);
        assert_eq!((f.src_mac(), f.dst_mac()), (CLIENT_MAC, VIP_MAC));
        f.set_dst_mac([1; 6]);
        f.set_src_mac([2; 6]);
        assert_eq!(&b[..12], &[[1u8; 6], [2u8; 6]].concat()[..]);
        assert_eq!(
            Truncated { len: 3 }.to_string(),
            "a 3-byte buffer holds no Ethernet header (14 bytes)"
        );
    }
}
