//! Network interfaces by name: index and MAC address, asked of the kernel
//! (`weir_sys`) so the answer is for the caller's network namespace (sysfs
//! shows the namespace it was mounted in).

use anyhow::{bail, Context, Result};

/// An interface weir attaches to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iface {
    pub name: String,
    pub ifindex: u32,
    pub mac: [u8; 6],
}

impl Iface {
    /// Looks an interface up in the current network namespace.
    pub fn by_name(name: &str) -> Result<Iface> {
        let Some(ifindex) = weir_sys::ifindex(name)? else {
            bail!("no network interface named {name:?} here (see `ip link`); fix `interfaces` in the config");
        };
        let mac = weir_sys::mac_address(name)
            .with_context(|| format!("reading the MAC address of {name}"))?;
        Ok(Iface {
            name: name.to_string(),
            ifindex,
            mac,
        })
    }
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Result<[u8; 6]> {
    weir_core::mac::parse_mac(s).map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_macs_and_refuses_garbage() {
        assert_eq!(
            parse_mac("02:00:0a:ff:00:01").unwrap(),
            [2, 0, 10, 255, 0, 1]
        );
        for bad in [
            "",
            "02:00",
            "02:00:0a:ff:00:0g",
            "2:0:a:f:0:1",
            "02:00:0a:ff:00:01:02",
        ] {
            assert!(parse_mac(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn loopback_exists_and_unknown_names_are_explained() {
        let lo = Iface::by_name("lo").unwrap();
        assert_eq!(lo.ifindex, 1);
        assert_eq!(lo.mac, [0; 6]);
        let err = Iface::by_name("weir-nope0").unwrap_err().to_string();
        assert!(err.contains("weir-nope0"), "{err}");
    }
}
