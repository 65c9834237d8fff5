//! What `ethtool -i` and `ethtool -k` print for an interface of the
//! caller's network namespace: its driver, and its offload features by the
//! kernel's own names (`rx-gro`, `rx-lro`, `rx-gro-hw`, `rx-checksum`...),
//! through the SIOCETHTOOL ioctl.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_GFEATURES: u32 = 0x3a;
/// The string set of feature names.
const ETH_SS_FEATURES: u32 = 4;
const ETH_GSTRING_LEN: usize = 32;

/// One offload feature of an interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feature {
    /// The kernel's name, as `ethtool -k` prints it.
    pub name: String,
    /// On now.
    pub active: bool,
    /// The driver lets it be switched (`ethtool -K`); `[fixed]` otherwise.
    pub changeable: bool,
}

/// The driver of interface `name` (`ethtool -i`: `mlx5_core`, `veth`...).
pub fn driver(name: &str) -> io::Result<String> {
    // struct ethtool_drvinfo: cmd, then driver[32] and further fields,
    // 196 bytes in all.
    let mut buf = [0u32; 49];
    buf[0] = ETHTOOL_GDRVINFO;
    ioctl(name, buf.as_mut_ptr().cast())?;
    let bytes: Vec<u8> = buf[1..9].iter().flat_map(|w| w.to_ne_bytes()).collect();
    Ok(c_string(&bytes))
}

/// Every offload feature of interface `name`, by name.
pub fn features(name: &str) -> io::Result<Vec<Feature>> {
    // struct ethtool_sset_info: cmd, reserved, u64 sset_mask, u32 data[1].
    let mut sset = [0u32; 5];
    sset[0] = ETHTOOL_GSSET_INFO;
    let mask = 1u64 << ETH_SS_FEATURES;
    sset[2] = mask as u32;
    sset[3] = (mask >> 32) as u32;
    ioctl(name, sset.as_mut_ptr().cast())?;
    let count = sset[4] as usize;

    // struct ethtool_gstrings: cmd, string_set, len, then len names.
    let mut strings = vec![0u32; 3 + count * ETH_GSTRING_LEN / 4];
    strings[0] = ETHTOOL_GSTRINGS;
    strings[1] = ETH_SS_FEATURES;
    strings[2] = count as u32;
    ioctl(name, strings.as_mut_ptr().cast())?;
    let names: Vec<u8> = strings[3..].iter().flat_map(|w| w.to_ne_bytes()).collect();

    // struct ethtool_gfeatures: cmd, size, then blocks of (available,
    // requested, active, never_changed), one per 32 features.
    let blocks = count.div_ceil(32);
    let mut feats = vec![0u32; 2 + blocks * 4];
    feats[0] = ETHTOOL_GFEATURES;
    feats[1] = blocks as u32;
    ioctl(name, feats.as_mut_ptr().cast())?;

    Ok((0..count)
        .map(|i| {
            let block = &feats[2 + (i / 32) * 4..][..4];
            let bit = 1u32 << (i % 32);
            Feature {
                name: c_string(&names[i * ETH_GSTRING_LEN..][..ETH_GSTRING_LEN]),
                active: block[2] & bit != 0,
                changeable: block[0] & bit != 0 && block[3] & bit == 0,
            }
        })
        .collect())
}

fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// SIOCETHTOOL on `name` with the command structure at `data`.
fn ioctl(name: &str, data: *mut libc::c_char) -> io::Result<()> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not an interface name"),
        ));
    }
    // SAFETY: plain socket(2).
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain data; zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    req.ifr_ifru.ifru_data = data;
    // SAFETY: fd is open, req names the interface (NUL-terminated: checked
    // shorter than ifr_name) and points at a command structure its caller
    // sized for the command's answer.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCETHTOOL, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_named_features_and_no_driver_info() {
        let f = features("lo").unwrap();
        assert!(f.len() > 30, "{f:?}");
        let gro = f.iter().find(|f| f.name == "rx-gro").expect("rx-gro");
        assert!(gro.changeable, "{gro:?}");
        assert!(f.iter().any(|f| f.name == "rx-lro"));
        assert!(features("weir-no-such").is_err());
        assert!(features("").is_err());
    }
}
