//! The kernel's route, neighbour and address tables, asked over a
//! NETLINK_ROUTE socket in the caller's network namespace (what `ip route
//! get`, `ip neigh show` and `ip addr show` print, without running them).

use std::io;
use std::net::IpAddr;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourMessage};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

/// The kernel's route to one destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The interface it leaves by.
    pub oif: u32,
    /// The router it goes through; `None` when the destination is on-link.
    pub gateway: Option<IpAddr>,
}

/// The route to `dst` (RTM_GETROUTE, as `ip route get`); `None` when there
/// is none (the destination is unreachable or prohibited).
pub fn route_to(dst: IpAddr) -> io::Result<Option<Route>> {
    let mut msg = RouteMessage::default();
    msg.header.address_family = family(dst);
    msg.header.destination_prefix_length = if dst.is_ipv4() { 32 } else { 128 };
    msg.attributes.push(RouteAttribute::Destination(dst.into()));
    let replies = match request(RouteNetlinkMessage::GetRoute(msg), NLM_F_REQUEST) {
        Ok(r) => r,
        Err(e) if is_no_route(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    for reply in replies {
        let RouteNetlinkMessage::NewRoute(route) = reply else {
            continue;
        };
        let mut oif = None;
        let mut gateway = None;
        for attr in route.attributes {
            match attr {
                RouteAttribute::Oif(i) => oif = Some(i),
                RouteAttribute::Gateway(RouteAddress::Inet(a)) => gateway = Some(a.into()),
                RouteAttribute::Gateway(RouteAddress::Inet6(a)) => gateway = Some(a.into()),
                _ => {}
            }
        }
        if let Some(oif) = oif {
            return Ok(Some(Route { oif, gateway }));
        }
    }
    Ok(None)
}

/// The link-layer address of neighbour `addr` on interface `ifindex` (as
/// `ip neigh show to ADDR dev DEV`); `None` when there is no entry or no
/// usable one (the kernel sends an address only for a valid entry: not for
/// one still resolving or one that failed).
pub fn neighbour_mac(addr: IpAddr, ifindex: u32) -> io::Result<Option<[u8; 6]>> {
    let mut msg = NeighbourMessage::default();
    msg.header.family = family(addr);
    msg.header.ifindex = ifindex;
    let want = NeighbourAddress::from(addr);
    for reply in request(
        RouteNetlinkMessage::GetNeighbour(msg),
        NLM_F_REQUEST | NLM_F_DUMP,
    )? {
        let RouteNetlinkMessage::NewNeighbour(n) = reply else {
            continue;
        };
        if n.header.ifindex != ifindex {
            continue;
        }
        let mut is_addr = false;
        let mut mac = None;
        for attr in n.attributes {
            match attr {
                NeighbourAttribute::Destination(d) => is_addr = d == want,
                NeighbourAttribute::LinkLayerAddress(l) => mac = <[u8; 6]>::try_from(l).ok(),
                _ => {}
            }
        }
        if is_addr && mac.is_some() {
            return Ok(mac);
        }
    }
    Ok(None)
}

/// Every address of this network namespace, IPv4 and IPv6 (as the `local`
/// of `ip addr show`).
pub fn local_addrs() -> io::Result<Vec<IpAddr>> {
    let replies = request(
        RouteNetlinkMessage::GetAddress(AddressMessage::default()),
        NLM_F_REQUEST | NLM_F_DUMP,
    )?;
    let mut addrs = Vec::new();
    for reply in replies {
        let RouteNetlinkMessage::NewAddress(a) = reply else {
            continue;
        };
        let (mut local, mut address) = (None, None);
        for attr in a.attributes {
            match attr {
                AddressAttribute::Local(ip) => local = Some(ip),
                AddressAttribute::Address(ip) => address = Some(ip),
                _ => {}
            }
        }
        // IPv6 addresses carry only IFA_ADDRESS; on a point-to-point IPv4
        // link IFA_ADDRESS is the peer and IFA_LOCAL ours.
        addrs.extend(local.or(address));
    }
    Ok(addrs)
}

fn family(ip: IpAddr) -> AddressFamily {
    if ip.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    }
}

/// What RTM_GETROUTE answers for a destination it has no route to.
fn is_no_route(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENETUNREACH | libc::EHOSTUNREACH | libc::EACCES | libc::EPERM | libc::EINVAL)
    )
}

/// Sends one request on a socket of its own and collects the replies: one
/// for a plain request, every part up to NLMSG_DONE for a dump.
pub(crate) fn request(
    msg: RouteNetlinkMessage,
    flags: u16,
) -> io::Result<Vec<RouteNetlinkMessage>> {
    let mut socket = Socket::new(NETLINK_ROUTE)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = 1;
    let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
    packet.finalize();
    let mut buf = vec![0; packet.buffer_len()];
    packet.serialize(&mut buf);
    socket.send(&buf, 0)?;

    let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
    let mut replies = Vec::new();
    loop {
        let (data, _) = socket.recv_from_full()?;
        if data.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the netlink socket closed before the kernel's answer ended",
            ));
        }
        let mut at = 0;
        while at < data.len() {
            let reply =
                NetlinkMessage::<RouteNetlinkMessage>::deserialize(&data[at..]).map_err(|e| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("decoding the kernel's netlink answer: {e}"),
                    )
                })?;
            let len = reply.header.length as usize;
            match reply.payload {
                NetlinkPayload::Done(_) => return Ok(replies),
                NetlinkPayload::Error(e) if e.code.is_some() => return Err(e.to_io()),
                NetlinkPayload::Error(_) => return Ok(replies),
                NetlinkPayload::InnerMessage(m) => {
                    replies.push(m);
                    if !dump {
                        return Ok(replies);
                    }
                }
                _ => {}
            }
            // Messages in one datagram start at 4-byte boundaries.
            at += len.max(1).next_multiple_of(4);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ifindex;

    #[test]
    fn loopback_routes_leave_by_lo_without_a_gateway() {
        let lo = ifindex("lo").unwrap().unwrap();
        let route = route_to("127.0.0.1".parse().unwrap()).unwrap().unwrap();
        assert_eq!(
            route,
            Route {
                oif: lo,
                gateway: None
            }
        );
    }

    #[test]
    fn loopback_addresses_are_listed() {
        let addrs = local_addrs().unwrap();
        assert!(addrs.contains(&"127.0.0.1".parse().unwrap()), "{addrs:?}");
    }

    #[test]
    fn no_neighbour_entry_is_none() {
        let lo = ifindex("lo").unwrap().unwrap();
        // Loopback resolves nothing through ARP: no entry, not an error.
        assert_eq!(
            neighbour_mac("127.0.0.1".parse().unwrap(), lo).unwrap(),
            None
        );
    }
}
