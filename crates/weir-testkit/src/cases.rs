//! The cases the software engine's and weir_lb's table-driven tests share:
//! frames the load balancer leaves alone under the default configuration
//! (not for a VIP's service, not IP, ICMP, fragments), each with the
//! outcome counter it must end in. The runners add what is theirs (the
//! XDP verdict, the engine's outcome, the connection tables' state).

use weir_abi::*;
use weir_core::flow::FlowTuple;
use weir_core::wire::{raw_frame, refresh_ipv4_checksum, ETHERTYPE_IPV6, ETH_HLEN};

use crate::fixture::{ip, CLIENT_MAC, VIP_MAC};
use crate::frames::*;

/// A frame that must leave unchanged.
pub struct PassCase {
    pub name: &'static str,
    pub input: Vec<u8>,
    /// The one outcome counter it ends in.
    pub outcome: u32,
    /// A flow that must leave no connection state behind.
    pub flow: Option<FlowTuple>,
}

fn case(name: &'static str, input: Vec<u8>, outcome: u32) -> PassCase {
    PassCase {
        name,
        input,
        outcome,
        flow: None,
    }
}

/// `f`'s bytes with the IPv4 flags-and-fragment-offset field set to
/// `field` (checksum recomputed).
fn ipv4_fragment(f: &Frame, field: u16) -> Vec<u8> {
    let mut b = f.bytes();
    b[ETH_HLEN + 6..ETH_HLEN + 8].copy_from_slice(&field.to_be_bytes());
    refresh_ipv4_checksum(&mut b[ETH_HLEN..]);
    b
}

/// Every frame of the fixture the load balancer passes to the kernel
/// untouched when `not_vip`, `icmp` and `fragments` are `pass`, whatever
/// the host's routes. (A DIP's reply without state is not among them: where
/// it goes depends on the FIB, which each tier asks in its own way.)
pub fn passed_untouched() -> Vec<PassCase> {
    let not_vip = tcp("192.0.2.1", 40001, "10.0.0.200", 80, SYN);
    let v6 = tcp("2001:db8:c::1", 40001, "2001:db8::100", 80, SYN);
    let frag = tcp("192.0.2.20", 40020, "10.0.0.100", 80, SYN);
    let mut no_next_header = v6.bytes()[ETH_HLEN..ETH_HLEN + 40].to_vec();
    no_next_header[4..6].copy_from_slice(&[0, 0]); // payload length 0
    no_next_header[6] = 59; // no next header
    let padn = (0u8, vec![1, 4, 0, 0, 0, 0]);
    vec![
        PassCase {
            flow: Some(not_vip.tuple()),
            ..case(
                "v4 tcp to a non-VIP address",
                not_vip.bytes(),
                WEIR_STAT_PASS_NOT_VIP,
            )
        },
        case(
            "v4 tcp to the VIP address, other port",
            tcp("192.0.2.1", 40001, "10.0.0.100", 81, SYN).bytes(),
            WEIR_STAT_PASS_NOT_VIP,
        ),
        case(
            "v4 udp to a tcp VIP's port",
            udp("192.0.2.1", 40001, "10.0.0.100", 80).bytes(),
            WEIR_STAT_PASS_NOT_VIP,
        ),
        case(
            "v6 tcp to a non-VIP address",
            tcp("2001:db8:c::1", 40001, "2001:db8::200", 80, SYN).bytes(),
            WEIR_STAT_PASS_NOT_VIP,
        ),
        case(
            "v6 udp to a tcp VIP's port",
            udp("2001:db8:c::1", 40001, "2001:db8::100", 80).bytes(),
            WEIR_STAT_PASS_NOT_VIP,
        ),
        case(
            "ARP request for the VIP",
            arp_request(CLIENT_MAC, [192, 0, 2, 1], [10, 0, 0, 100]),
            WEIR_STAT_PASS_NOT_IP,
        ),
        case(
            "LLDP frame",
            raw_frame(CLIENT_MAC, [0x01, 0x80, 0xc2, 0, 0, 0x0e], 0x88cc, &[0; 46]),
            WEIR_STAT_PASS_NOT_IP,
        ),
        case(
            "ICMP echo to the VIP",
            icmp_echo(CLIENT_MAC, VIP_MAC, ip("192.0.2.1"), ip("10.0.0.100")),
            WEIR_STAT_PASS_ICMP,
        ),
        case(
            "ICMPv6 echo to the VIP",
            icmp_echo(
                CLIENT_MAC,
                VIP_MAC,
                ip("2001:db8:c::1"),
                ip("2001:db8::100"),
            ),
            WEIR_STAT_PASS_ICMP,
        ),
        case(
            "IPv4 GRE to the VIP",
            ipv4_other_proto(CLIENT_MAC, VIP_MAC, [192, 0, 2, 1], [10, 0, 0, 100]),
            WEIR_STAT_PASS_NOT_VIP,
        ),
        case(
            "IPv6 no-next-header to the VIP",
            raw_frame(CLIENT_MAC, VIP_MAC, ETHERTYPE_IPV6, &no_next_header),
            WEIR_STAT_PASS_NOT_VIP,
        ),
        PassCase {
            flow: Some(frag.tuple()),
            ..case(
                "v4 first fragment (MF) to the VIP",
                ipv4_fragment(&frag, 0x2000),
                WEIR_STAT_PASS_FRAGMENT,
            )
        },
        case(
            "v4 later fragment (offset 185) to the VIP",
            ipv4_fragment(&frag, 185),
            WEIR_STAT_PASS_FRAGMENT,
        ),
        case(
            "v4 last fragment (DF clear, offset 1) to a non-VIP",
            ipv4_fragment(&not_vip, 1),
            WEIR_STAT_PASS_FRAGMENT,
        ),
        case(
            "v6 fragment header to the VIP",
            ipv6_with_exts(&v6, &[fragment_ext()]),
            WEIR_STAT_PASS_FRAGMENT,
        ),
        case(
            "v6 fragment header after hop-by-hop",
            ipv6_with_exts(&v6, &[padn, fragment_ext()]),
            WEIR_STAT_PASS_FRAGMENT,
        ),
    ]
}
