//! One network interface as the kernel's link table describes it (what `ip
//! -d link show` prints): its kind, a veth's peer and the namespace the
//! peer lives in, the XDP program on it, its MTU. A peer in
//! another namespace is asked for through that namespace's id
//! (IFLA_TARGET_NETNSID), so no namespace has to be entered.

use std::fs;
use std::io;
use std::os::fd::AsRawFd;

use netlink_packet_core::NLM_F_REQUEST;
use netlink_packet_route::link::{
    LinkAttribute, LinkInfo as NlLinkInfo, LinkMessage, LinkXdp, State,
};
use netlink_packet_route::nsid::{NsidAttribute, NsidMessage};
use netlink_packet_route::RouteNetlinkMessage;

use crate::netlink::request;

/// Where named network namespaces are (`ip netns add` puts them there).
const NAMED_NETNS_DIR: &str = "/run/netns";

/// What the kernel says of one interface.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Link {
    pub ifindex: u32,
    pub name: String,
    /// The link kind (`veth`, `bridge`, ...); `None` for a physical NIC.
    pub kind: Option<String>,
    /// For a veth: its peer's index, in the namespace `peer_netnsid` names
    /// (or this one when that is `None`).
    pub peer_ifindex: Option<u32>,
    pub peer_netnsid: Option<i32>,
    /// Administratively up and with a carrier (operstate UP or UNKNOWN).
    pub oper_up: bool,
    /// The XDP program attached, in any mode.
    pub xdp_prog_id: Option<u32>,
    pub mtu: u32,
}

/// Interface `ifindex` of this namespace, or of the namespace whose id (as
/// this namespace knows it) is `netnsid`; `None` when there is no such
/// interface.
pub fn link(ifindex: u32, netnsid: Option<i32>) -> io::Result<Option<Link>> {
    let mut msg = LinkMessage::default();
    msg.header.index = ifindex;
    if let Some(id) = netnsid {
        msg.attributes.push(LinkAttribute::IfNetnsId(id));
    }
    let replies = match request(RouteNetlinkMessage::GetLink(msg), NLM_F_REQUEST) {
        Ok(r) => r,
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(None),
        Err(e) => return Err(e),
    };
    for reply in replies {
        if let RouteNetlinkMessage::NewLink(m) = reply {
            return Ok(Some(of_message(m)));
        }
    }
    Ok(None)
}

fn of_message(m: LinkMessage) -> Link {
    let mut link = Link {
        ifindex: m.header.index,
        ..Link::default()
    };
    for attr in m.attributes {
        match attr {
            LinkAttribute::IfName(n) => link.name = n,
            LinkAttribute::Link(i) if i != 0 => link.peer_ifindex = Some(i),
            LinkAttribute::LinkNetNsId(id) if id >= 0 => link.peer_netnsid = Some(id),
            LinkAttribute::OperState(s) => link.oper_up = matches!(s, State::Up | State::Unknown),
            LinkAttribute::Mtu(mtu) => link.mtu = mtu,
            LinkAttribute::Xdp(xdp) => {
                link.xdp_prog_id = xdp.iter().find_map(|x| match x {
                    LinkXdp::ProgId(id) if *id != 0 => Some(*id),
                    _ => None,
                })
            }
            LinkAttribute::LinkInfo(infos) => {
                for info in infos {
                    if let NlLinkInfo::Kind(k) = info {
                        link.kind = Some(k.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    if link.kind.as_deref() != Some("veth") {
        // IFLA_LINK of other kinds (a VLAN's lower device, ...) is no peer.
        link.peer_ifindex = None;
        link.peer_netnsid = None;
    }
    link
}

/// The name of the named namespace (`/run/netns/NAME`) whose id, as this
/// namespace knows it, is `netnsid`; `None` when none of them has it (the
/// namespace has no name, or belongs to a container runtime).
pub fn netns_name(netnsid: i32) -> Option<String> {
    let entries = fs::read_dir(NAMED_NETNS_DIR).ok()?;
    for entry in entries.flatten() {
        let Ok(file) = fs::File::open(entry.path()) else {
            continue;
        };
        let mut msg = NsidMessage::default();
        msg.attributes
            .push(NsidAttribute::Fd(file.as_raw_fd() as u32));
        let Ok(replies) = request(RouteNetlinkMessage::GetNsId(msg), NLM_F_REQUEST) else {
            continue;
        };
        let found = replies.into_iter().any(|r| match r {
            RouteNetlinkMessage::NewNsId(m) => m
                .attributes
                .iter()
                .any(|a| matches!(a, NsidAttribute::Id(id) if *id == netnsid)),
            _ => false,
        });
        if found {
            return Some(entry.file_name().to_string_lossy().into_owned());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ifindex;

    #[test]
    fn loopback_is_no_veth_and_has_no_peer() {
        let lo = ifindex("lo").unwrap().unwrap();
        let l = link(lo, None).unwrap().unwrap();
        assert_eq!(l.name, "lo");
        assert_eq!(l.kind, None);
        assert_eq!((l.peer_ifindex, l.peer_netnsid), (None, None));
        assert_eq!(l.mtu, 65536);
        assert_eq!(link(0x7fff_fff0, None).unwrap(), None);
    }
}
