//! The kernel's `netdev` generic-netlink family (Linux 6.3+): what XDP an
//! interface's driver supports, as `ynl --family netdev --do dev-get`
//! prints it. For a veth the kernel also says there whether frames
//! redirected to it can be delivered: NDO_XMIT is set only while its peer
//! runs an XDP program or has GRO on.

use std::io;

use netlink_sys::{protocols::NETLINK_GENERIC, Socket, SocketAddr};

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const NETDEV_CMD_DEV_GET: u8 = 1;
const NETDEV_A_DEV_IFINDEX: u16 = 1;
const NETDEV_A_DEV_XDP_FEATURES: u16 = 3;

/// The XDP actions a driver implements (enum netdev_xdp_act).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpFeatures(pub u64);

impl XdpFeatures {
    /// Runs XDP programs in the driver (native XDP).
    pub fn basic(self) -> bool {
        self.0 & 1 != 0
    }
    /// Can send frames redirected to it (ndo_xdp_xmit).
    pub fn ndo_xmit(self) -> bool {
        self.0 & 4 != 0
    }
}

/// The XDP features of interface `ifindex` of this namespace; `None` when
/// the kernel has no `netdev` family (older than 6.3) to say.
pub fn xdp_features(ifindex: u32) -> io::Result<Option<XdpFeatures>> {
    let Some(family) = family_id("netdev")? else {
        return Ok(None);
    };
    let reply = transact(
        family,
        NETDEV_CMD_DEV_GET,
        &attr(NETDEV_A_DEV_IFINDEX, &ifindex.to_ne_bytes()),
    )?;
    Ok(find_attr(&reply, NETDEV_A_DEV_XDP_FEATURES)
        .and_then(|v| <[u8; 8]>::try_from(v).ok())
        .map(|b| XdpFeatures(u64::from_ne_bytes(b))))
}

/// The id of generic-netlink family `name`; `None` when there is none.
fn family_id(name: &str) -> io::Result<Option<u16>> {
    let mut value = name.as_bytes().to_vec();
    value.push(0);
    let reply = match transact(
        GENL_ID_CTRL,
        CTRL_CMD_GETFAMILY,
        &attr(CTRL_ATTR_FAMILY_NAME, &value),
    ) {
        Ok(r) => r,
        // Linux answers EINVAL where older versions said ENOENT.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EINVAL)) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(find_attr(&reply, CTRL_ATTR_FAMILY_ID)
        .and_then(|v| <[u8; 2]>::try_from(v).ok())
        .map(u16::from_ne_bytes))
}

/// One attribute: length, type, value, padded to 4 bytes.
fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
    let mut a = Vec::with_capacity(4 + value.len().next_multiple_of(4));
    a.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
    a.extend_from_slice(&kind.to_ne_bytes());
    a.extend_from_slice(value);
    a.resize(a.len().next_multiple_of(4), 0);
    a
}

/// The value of the first top-level attribute `kind` in `attrs`.
fn find_attr(attrs: &[u8], kind: u16) -> Option<&[u8]> {
    let mut at = 0;
    while at + 4 <= attrs.len() {
        let len = u16::from_ne_bytes([attrs[at], attrs[at + 1]]) as usize;
        let t = u16::from_ne_bytes([attrs[at + 2], attrs[at + 3]]) & 0x3fff;
        if len < 4 || at + len > attrs.len() {
            return None;
        }
        if t == kind {
            return Some(&attrs[at + 4..at + len]);
        }
        at += len.next_multiple_of(4);
    }
    None
}

/// Sends one request (command `cmd` of `family`, with `attrs`) and returns
/// the attributes of its answer; a negative answer is the error it names.
fn transact(family: u16, cmd: u8, attrs: &[u8]) -> io::Result<Vec<u8>> {
    let mut socket = Socket::new(NETLINK_GENERIC)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    let len = 16 + 4 + attrs.len();
    let mut msg = Vec::with_capacity(len);
    msg.extend_from_slice(&(len as u32).to_ne_bytes());
    msg.extend_from_slice(&family.to_ne_bytes());
    msg.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(&[cmd, 1, 0, 0]);
    msg.extend_from_slice(attrs);
    socket.send(&msg, 0)?;

    let mut answer = None;
    loop {
        let (data, _) = socket.recv_from_full()?;
        if data.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the generic netlink socket closed before the kernel's answer ended",
            ));
        }
        let mut at = 0;
        while at + 16 <= data.len() {
            let len = u32::from_ne_bytes(data[at..at + 4].try_into().unwrap()) as usize;
            let kind = u16::from_ne_bytes([data[at + 4], data[at + 5]]);
            if len < 16 || at + len > data.len() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a truncated generic netlink answer",
                ));
            }
            let body = &data[at + 16..at + len];
            match kind {
                NLMSG_ERROR => {
                    let code = i32::from_ne_bytes(body[..4].try_into().unwrap_or([0; 4]));
                    if code != 0 {
                        return Err(io::Error::from_raw_os_error(-code));
                    }
                    // The acknowledgement: the answer came before it.
                    return answer.ok_or_else(|| {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            "an empty generic netlink answer",
                        )
                    });
                }
                NLMSG_DONE => {
                    return answer.ok_or_else(|| {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            "an empty generic netlink answer",
                        )
                    })
                }
                _ if body.len() >= 4 => answer = Some(body[4..].to_vec()),
                _ => {}
            }
            at += len.next_multiple_of(4);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ifindex;

    #[test]
    fn the_controller_knows_itself_and_not_nonsense() {
        assert_eq!(family_id("nlctrl").unwrap(), Some(GENL_ID_CTRL));
        assert_eq!(family_id("weir-no-such-family").unwrap(), None);
    }

    #[test]
    fn loopback_has_no_native_xdp() {
        let lo = ifindex("lo").unwrap().unwrap();
        // This kernel has the family (6.3+); loopback's driver implements
        // no XDP action.
        let f = xdp_features(lo).unwrap().expect("the netdev family");
        assert!(!f.basic() && !f.ndo_xmit(), "{f:?}");
    }

    #[test]
    fn attributes_are_padded_and_found() {
        let mut attrs = attr(2, b"abc");
        assert_eq!(attrs.len(), 8);
        attrs.extend(attr(3, &7u64.to_ne_bytes()));
        assert_eq!(find_attr(&attrs, 2), Some(&b"abc"[..]));
        assert_eq!(find_attr(&attrs, 3), Some(&7u64.to_ne_bytes()[..]));
        assert_eq!(find_attr(&attrs, 4), None);
    }
}
