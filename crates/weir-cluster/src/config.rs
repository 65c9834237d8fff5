//! What a node needs of its `[cluster]` section beyond the file: the
//! shared sync key it names, and the address of its sync interface.

use std::net::IpAddr;

use weir_config::ClusterCfg;

use crate::sync::wire::Key;

/// Reads the sync key file: a clear error if it is missing, unreadable,
/// empty, not hex or too short.
pub fn read_key(cfg: &ClusterCfg) -> Result<Key, String> {
    let Some(f) = &cfg.sync_key_file else {
        return Err("cluster.sync_key_file is not set".into());
    };
    let path = f.get_ref();
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "cluster.sync_key_file {}: {e}; create it on every node with the same key \
             (`openssl rand -hex 32`)",
            path.display()
        )
    })?;
    Key::from_hex(&text).map_err(|e| format!("cluster.sync_key_file {}: {e}", path.display()))
}

/// The first address of `iface` (IPv4 preferred), for peers to send to.
pub fn interface_address(iface: &str) -> Result<IpAddr, String> {
    let all = weir_sys::interface_addrs().map_err(|e| format!("listing interfaces: {e}"))?;
    let ours: Vec<Option<IpAddr>> = all
        .into_iter()
        .filter(|(name, _)| name == iface)
        .map(|(_, addr)| addr)
        .collect();
    let exists = !ours.is_empty();
    // A link-local IPv6 address needs a scope a peer cannot give.
    let mut found: Vec<IpAddr> = ours
        .into_iter()
        .flatten()
        .filter(|a| !matches!(a, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80))
        .collect();
    if !exists {
        return Err(format!(
            "cluster.sync_interface `{iface}` does not exist (in this network namespace)"
        ));
    }
    found.sort_by_key(|a| a.is_ipv6());
    found.first().copied().ok_or_else(|| {
        format!("cluster.sync_interface `{iface}` has no IPv4 or global IPv6 address for peers to reach")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use toml::Spanned;

    #[test]
    fn the_key_file_is_read_with_clear_errors() {
        let dir = std::env::temp_dir().join(format!("weir-cluster-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("sync.key");
        let mut c: ClusterCfg = toml::from_str(
            "node = \"lb-a\"\netcd = [\"10.0.0.1:2379\"]\nsync_interface = \"eth1\"\n",
        )
        .unwrap();
        assert!(read_key(&c).unwrap_err().contains("not set"));
        c.sync_key_file = Some(Spanned::new(0..0, f.clone()));
        assert!(read_key(&c).unwrap_err().contains("openssl rand -hex 32"));
        std::fs::write(&f, "\n").unwrap();
        assert!(read_key(&c).unwrap_err().contains("empty"));
        std::fs::write(&f, "ab".repeat(32)).unwrap();
        read_key(&c).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn interface_addresses() {
        assert!(interface_address("no-such-if0")
            .unwrap_err()
            .contains("does not exist"));
        // lo has 127.0.0.1 in every namespace this test runs in.
        assert_eq!(
            interface_address("lo").unwrap(),
            IpAddr::from([127, 0, 0, 1])
        );
    }
}
