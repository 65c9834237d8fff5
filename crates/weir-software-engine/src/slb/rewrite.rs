//! Rewriting a parsed frame in place, byte for byte as `bpf/lib/nat.h` and
//! `forward.h` do: nat's destination rewrite (client -> DIP address and
//! port) and its reverse (DIP -> VIP source), with incremental checksum
//! updates (RFC 1624, the arithmetic of `bpf/lib/csum.h`), and the MACs of
//! the next hop. dsr changes only the MACs.
//!
//! Checksum rules: the IPv4 header checksum and the TCP/UDP checksum (which
//! covers the pseudo-header) follow every address and port change; an IPv4
//! UDP checksum of 0 means "none" and stays 0; a UDP checksum that computes
//! to 0 is sent as 0xffff (RFC 768). Words are summed as they sit on the
//! wire (big-endian); the one's-complement sum is byte-order independent,
//! so the result is the bytes the BPF program writes from little-endian
//! loads.

use std::fmt;

use super::packet::{Frame, Packet, ETH_HLEN, IPPROTO_TCP, IPPROTO_UDP};
use weir_core::csum::finish;

/// Where the IPv4 header checksum and addresses sit (from the IP header).
const V4_CHECKSUM: usize = 10;
const V4_SRC: usize = 12;
const V4_DST: usize = 16;
const V6_SRC: usize = 8;
const V6_DST: usize = 24;
const TCP_CHECKSUM: usize = 16;
const UDP_CHECKSUM: usize = 6;

/// Which end of the flow a rewrite replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Src,
    Dst,
}

/// The frame does not hold the headers `Packet` says it does (it was
/// parsed from another buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfBounds;

impl fmt::Display for OutOfBounds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the frame is shorter than the headers its parse described"
        )
    }
}

impl std::error::Error for OutOfBounds {}

/// csum.h's `csum_replace2`: the 16-bit word `from` becomes `to` under
/// checksum `sum` (HC' = ~(~HC + ~m + m')).
pub fn csum_replace2(sum: u16, from: u16, to: u16) -> u16 {
    let acc = u32::from(!sum) + u32::from(!from) + u32::from(to);
    finish(acc)
}

/// csum.h's `csum_replace4`: the 32-bit field `from` becomes `to`.
pub fn csum_replace4(sum: u16, from: [u8; 4], to: [u8; 4]) -> u16 {
    let half = |b: [u8; 4], i: usize| u32::from(u16::from_be_bytes([b[i], b[i + 1]]));
    let acc = u32::from(!sum)
        + (!half(from, 0) & 0xffff)
        + (!half(from, 2) & 0xffff)
        + half(to, 0)
        + half(to, 2);
    finish(acc)
}

fn get16(b: &[u8], off: usize) -> Result<u16, OutOfBounds> {
    let s = b.get(off..off + 2).ok_or(OutOfBounds)?;
    Ok(u16::from_be_bytes([s[0], s[1]]))
}

fn put16(b: &mut [u8], off: usize, v: u16) -> Result<(), OutOfBounds> {
    b.get_mut(off..off + 2)
        .ok_or(OutOfBounds)?
        .copy_from_slice(&v.to_be_bytes());
    Ok(())
}

/// Where the L4 checksum sits, or `None` when there is none to keep
/// (nat.h's `l4_csum`: an IPv4 UDP checksum of 0).
fn l4_csum_off(frame: &[u8], pkt: &Packet) -> Result<Option<usize>, OutOfBounds> {
    match pkt.key.proto {
        IPPROTO_TCP => Ok(Some(pkt.l4_off + TCP_CHECKSUM)),
        IPPROTO_UDP => {
            let off = pkt.l4_off + UDP_CHECKSUM;
            if pkt.is_ipv4() && get16(frame, off)? == 0 {
                Ok(None)
            } else {
                Ok(Some(off))
            }
        }
        _ => Ok(None),
    }
}

/// Replaces the source or destination address and port of a parsed TCP or
/// UDP frame. `addr` is in `weir_flow_key` form (four in-memory words of
/// network-order bytes, IPv4 in word 0) and of the packet's family; `port`
/// is in network order as `weir_dip.port` stores it, 0 keeps the port.
/// `Err` only when `frame` is not the buffer `pkt` was parsed from.
pub fn rewrite_endpoint(
    frame: &mut [u8],
    pkt: &Packet,
    end: End,
    addr: &[u32; 4],
    port: u16,
) -> Result<(), OutOfBounds> {
    let csum_off = l4_csum_off(frame, pkt)?;
    let mut l4_sum = match csum_off {
        Some(off) => Some(get16(frame, off)?),
        None => None,
    };
    let port_off = pkt.l4_off + if end == End::Dst { 2 } else { 0 };
    let old_port = get16(frame, port_off)?;

    if pkt.is_ipv4() {
        let field = ETH_HLEN + if end == End::Dst { V4_DST } else { V4_SRC };
        let old: [u8; 4] = frame
            .get(field..field + 4)
            .ok_or(OutOfBounds)?
            .try_into()
            .map_err(|_| OutOfBounds)?;
        let new = addr[0].to_ne_bytes();
        let ip_sum = get16(frame, ETH_HLEN + V4_CHECKSUM)?;
        put16(
            frame,
            ETH_HLEN + V4_CHECKSUM,
            csum_replace4(ip_sum, old, new),
        )?;
        l4_sum = l4_sum.map(|s| csum_replace4(s, old, new));
        frame[field..field + 4].copy_from_slice(&new);
    } else {
        let field = ETH_HLEN + if end == End::Dst { V6_DST } else { V6_SRC };
        let target = frame.get_mut(field..field + 16).ok_or(OutOfBounds)?;
        for (i, w) in addr.iter().enumerate() {
            let new = w.to_ne_bytes();
            let old: [u8; 4] = target[4 * i..4 * i + 4]
                .try_into()
                .map_err(|_| OutOfBounds)?;
            l4_sum = l4_sum.map(|s| csum_replace4(s, old, new));
            target[4 * i..4 * i + 4].copy_from_slice(&new);
        }
    }

    let new_port = u16::from_be(port);
    if port != 0 && new_port != old_port {
        l4_sum = l4_sum.map(|s| csum_replace2(s, old_port, new_port));
        put16(frame, port_off, new_port)?;
    }
    if let (Some(off), Some(mut sum)) = (csum_off, l4_sum) {
        if pkt.key.proto == IPPROTO_UDP && sum == 0 {
            sum = 0xffff;
        }
        put16(frame, off, sum)?;
    }
    Ok(())
}

/// Writes the next hop's MACs (forward.h's `send_out`).
pub fn set_macs(frame: &mut [u8], dst: [u8; 6], src: [u8; 6]) -> Result<(), OutOfBounds> {
    let mut eth = Frame::new_checked(frame).map_err(|_| OutOfBounds)?;
    eth.set_dst_mac(dst);
    eth.set_src_mac(src);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slb::packet::{parse, Parsed};
    use weir_core::flow::addr_words;
    use weir_testkit::fixture::ip;
    use weir_testkit::frames::Frame;
    use weir_testkit::frames::*;

    fn packet(frame: &[u8]) -> Packet {
        match parse(frame) {
            Parsed::L4(p) => p,
            other => panic!("not L4: {other:?}"),
        }
    }

    /// Rewrites with weir's rules and compares with a frame built from
    /// scratch with the new endpoint (`weir_core::wire` computes every checksum).
    fn check(input: Frame, end: End, to: &str, port: u16, want: Frame) {
        let mut b = input.bytes();
        let p = packet(&b);
        let (addr, _) = addr_words(to.parse().unwrap());
        rewrite_endpoint(&mut b, &p, end, &addr, port.to_be()).unwrap();
        assert_eq!(b, want.bytes(), "{input:?} -> {to}:{port}");
    }

    #[test]
    fn nat_rewrites_match_frames_built_from_scratch() {
        for (client, vip, dip) in [
            ("192.0.2.1", "10.0.0.100", "10.1.0.1"),
            ("2001:db8:c::1", "2001:db8::100", "2001:db8:1::1"),
        ] {
            for payload in [&b""[..], b"GET / HTTP/1.1\r\n\r\n", b"odd"] {
                let f = tcp(client, 40001, vip, 80, PSH_ACK).payload(payload);
                check(
                    f.clone(),
                    End::Dst,
                    dip,
                    8080,
                    f.clone().with_dst(ip(dip), 8080),
                );
                // Port 0 keeps the VIP's port.
                check(f.clone(), End::Dst, dip, 0, f.clone().with_dst(ip(dip), 80));
                let u = udp(client, 5353, vip, 53).payload(payload);
                check(
                    u.clone(),
                    End::Dst,
                    dip,
                    5300,
                    u.clone().with_dst(ip(dip), 5300),
                );
                let r = tcp(dip, 8080, client, 40001, SYN_ACK).payload(payload);
                check(
                    r.clone(),
                    End::Src,
                    vip,
                    80,
                    r.clone().with_src(ip(vip), 80),
                );
            }
        }
    }

    #[test]
    fn ipv4_udp_without_checksum_stays_without() {
        let u = udp("192.0.2.1", 5353, "10.0.0.100", 53).zero_udp_csum();
        let want = u.clone().with_dst(ip("10.1.0.1"), 5300).zero_udp_csum();
        check(u, End::Dst, "10.1.0.1", 5300, want);
    }

    #[test]
    fn a_udp_checksum_that_computes_to_zero_is_sent_as_all_ones() {
        // Search a payload word whose rewritten checksum is 0 by RFC 1071
        // (the reference builder writes 0xffff for it too).
        let base = udp("192.0.2.6", 5356, "10.0.0.100", 53);
        let off = base.l4_off() + 6;
        let found = (0..=u16::MAX).find_map(|w| {
            let f = base.clone().payload(&w.to_be_bytes());
            let want = f.clone().with_dst(ip("10.1.0.1"), 8080);
            (want.bytes()[off..off + 2] == [0xff, 0xff]).then_some((f, want))
        });
        let (f, want) = found.expect("some payload sums to zero");
        check(f, End::Dst, "10.1.0.1", 8080, want);
    }

    #[test]
    fn incremental_updates_follow_rfc_1624() {
        // RFC 1624 section 4's example: HC 0xdd2f, m 0x5555 -> m' 0x3285.
        assert_eq!(csum_replace2(0xdd2f, 0x5555, 0x3285), 0x0000);
        // Replacing a word by itself changes nothing but -0 (csum.h's fold).
        assert_eq!(csum_replace2(0x1234, 0xabcd, 0xabcd), 0x1234);
        assert_eq!(csum_replace4(0x1234, [1, 2, 3, 4], [1, 2, 3, 4]), 0x1234);
        assert_eq!(csum_replace4(0xffff, [1, 2, 3, 4], [1, 2, 3, 4]), 0x0000);
    }

    #[test]
    fn macs_and_a_foreign_buffer() {
        let mut b = tcp("192.0.2.1", 1, "10.0.0.1", 2, SYN).bytes();
        set_macs(&mut b, [1; 6], [2; 6]).unwrap();
        assert_eq!(&b[..12], &[[1u8; 6], [2u8; 6]].concat()[..]);
        assert_eq!(set_macs(&mut b[..10], [1; 6], [2; 6]), Err(OutOfBounds));
        let p = packet(&b);
        let (a, _) = addr_words("10.1.0.1".parse().unwrap());
        assert_eq!(
            rewrite_endpoint(&mut b[..30], &p, End::Dst, &a, 0),
            Err(OutOfBounds)
        );
    }
}
