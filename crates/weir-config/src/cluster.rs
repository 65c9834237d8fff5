//! `[cluster]`: this node's place in a cluster of weir nodes; the located
//! errors of [`ClusterCfg::validate`] become the file's own.

use std::net::SocketAddr;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::error::{Checker, ConfigError, ConfigWarning};
use crate::load::Config;
use crate::service::Mode;
use crate::tier::Tier;

/// The longest node name: it travels in every sync datagram
/// (weir-cluster's wire format, whose `MAX_NAME` this is).
pub const MAX_NAME: usize = 63;

fn prefix() -> Spanned<String> {
    Spanned::new(0..0, "/weir".into())
}
fn ttl() -> Spanned<u64> {
    Spanned::new(0..0, 2)
}
fn yes() -> Spanned<bool> {
    Spanned::new(0..0, true)
}
fn sync_port() -> Spanned<u16> {
    Spanned::new(0..0, DEFAULT_SYNC_PORT)
}
fn join_timeout() -> Spanned<u64> {
    Spanned::new(0..0, 3000)
}

/// The UDP port of connection sync unless `sync_port` says otherwise.
pub const DEFAULT_SYNC_PORT: u16 = 7950;

/// `[cluster]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterCfg {
    /// This node's name, unique in the cluster.
    pub node: Spanned<String>,
    /// etcd's client endpoints, `IP:port` or `http://IP:port`.
    pub etcd: Spanned<Vec<String>>,
    /// Where this cluster's keys live in etcd (clusters may share an etcd).
    #[serde(default = "prefix")]
    pub prefix: Spanned<String>,
    /// The TTL of this node's etcd lease (its membership and, while it
    /// leads, its leadership): a dead node is noticed after about this long.
    #[serde(default = "ttl")]
    pub lease_ttl_s: Spanned<u64>,
    /// Announce the connections this node installs, and install its
    /// peers' (tier = "xdp" only).
    #[serde(default = "yes")]
    pub connection_sync: Spanned<bool>,
    /// The interface whose address peers send sync datagrams to.
    pub sync_interface: Option<Spanned<String>>,
    #[serde(default = "sync_port")]
    pub sync_port: Spanned<u16>,
    /// A file with the cluster's shared sync key, in hex (`openssl rand -hex 32`).
    pub sync_key_file: Option<Spanned<PathBuf>>,
    /// Entries peers may put in this node's connection table; default a
    /// half of `conn_table_size`.
    pub sync_max_entries: Option<Spanned<u32>>,
    /// How long a joining node waits for a peer's established connections
    /// before it attaches.
    #[serde(default = "join_timeout")]
    pub join_timeout_ms: Spanned<u64>,
    /// Run the cluster's threads (the etcd agent, connection sync) at
    /// real-time priority (SCHED_FIFO 1), so that a busy machine neither
    /// widens the sync window nor delays tables.
    #[serde(default = "yes")]
    pub realtime: Spanned<bool>,
}

/// A mistake in `[cluster]`: where, which field (under `cluster.`), what.
pub type CfgError = (Option<Range<usize>>, String, String);

fn err(span: Range<usize>, field: &str, msg: impl Into<String>) -> CfgError {
    (Some(span), format!("cluster.{field}"), msg.into())
}

/// A node name or prefix character etcd keys and logs carry without quoting.
fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// `IP:port` or `http://IP:port`.
pub fn parse_endpoint(s: &str) -> Result<SocketAddr, String> {
    if s.starts_with("https://") {
        return Err(format!(
            "`{s}`: weir talks to etcd without TLS; give an http:// endpoint on a trusted \
             network (or a local TLS proxy)"
        ));
    }
    let hostport = s.strip_prefix("http://").unwrap_or(s).trim_end_matches('/');
    hostport.parse().map_err(|_| {
        format!("`{s}` is not IP:port or http://IP:port (like \"http://10.0.0.1:2379\")")
    })
}

impl ClusterCfg {
    /// Refuses what can never work. `conn_table_size` bounds
    /// `sync_max_entries`; `xdp_tier` says whether connection sync can
    /// see the data plane's installs.
    pub fn validate(&self, conn_table_size: u32, xdp_tier: bool) -> Result<(), CfgError> {
        let node = self.node.get_ref();
        if node.is_empty() || node.len() > MAX_NAME || !node.chars().all(plain) {
            return Err(err(
                self.node.span(),
                "node",
                format!(
                    "`{node}`: a node name is 1 to {MAX_NAME} letters, digits, `.`, `_` or `-`"
                ),
            ));
        }
        if self.etcd.get_ref().is_empty() {
            return Err(err(
                self.etcd.span(),
                "etcd",
                "list etcd's client endpoints, e.g. [\"http://10.0.0.1:2379\"]",
            ));
        }
        for e in self.etcd.get_ref() {
            parse_endpoint(e).map_err(|m| err(self.etcd.span(), "etcd", m))?;
        }
        let p = self.prefix.get_ref();
        if !p.starts_with('/') || p.ends_with('/') || !p.chars().all(|c| c == '/' || plain(c)) {
            return Err(err(
                self.prefix.span(),
                "prefix",
                format!("`{p}`: a prefix starts with / and has no trailing /, like \"/weir/prod\""),
            ));
        }
        if !(1..=60).contains(self.lease_ttl_s.get_ref()) {
            return Err(err(
                self.lease_ttl_s.span(),
                "lease_ttl_s",
                "must be 1..=60 seconds (a dead leader is replaced after about this long)",
            ));
        }
        if !(100..=60_000).contains(self.join_timeout_ms.get_ref()) {
            return Err(err(
                self.join_timeout_ms.span(),
                "join_timeout_ms",
                "must be 100..=60000 ms",
            ));
        }
        if !*self.connection_sync.get_ref() {
            return Ok(());
        }
        let why = "connection sync sends and receives on it";
        if !xdp_tier {
            return Err(err(
                self.connection_sync.span(),
                "connection_sync",
                "connection sync sees the connections XDP installs, so it needs \
                 dataplane.tier = \"xdp\"; set connection_sync = false for the other tiers",
            ));
        }
        let Some(iface) = &self.sync_interface else {
            return Err(err(
                self.node.span(),
                "sync_interface",
                format!("name the interface peers reach this node on ({why}), e.g. \"eth1\""),
            ));
        };
        if iface.get_ref().is_empty() {
            return Err(err(
                iface.span(),
                "sync_interface",
                "give an interface name",
            ));
        }
        if *self.sync_port.get_ref() == 0 {
            return Err(err(
                self.sync_port.span(),
                "sync_port",
                "port 0 is not a port",
            ));
        }
        let Some(key) = &self.sync_key_file else {
            return Err(err(
                self.node.span(),
                "sync_key_file",
                "connection sync is authenticated with a key every node shares: set \
                 sync_key_file to a file made with `openssl rand -hex 32 > /etc/weir/sync.key`",
            ));
        };
        if !key.get_ref().is_absolute() {
            return Err(err(key.span(), "sync_key_file", "give an absolute path"));
        }
        if let Some(m) = &self.sync_max_entries {
            if !(1..=conn_table_size).contains(m.get_ref()) {
                return Err(err(
                    m.span(),
                    "sync_max_entries",
                    format!(
                        "must be 1..=conn_table_size ({conn_table_size}): peers' connections \
                         share this node's table with its own"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// etcd's endpoints (validated).
    pub fn endpoints(&self) -> Vec<SocketAddr> {
        self.etcd
            .get_ref()
            .iter()
            .filter_map(|e| parse_endpoint(e).ok())
            .collect()
    }

    pub fn lease_ttl(&self) -> Duration {
        Duration::from_secs(*self.lease_ttl_s.get_ref())
    }

    /// Entries peers may install here, given the table's size.
    pub fn sync_budget(&self, conn_table_size: u32) -> u32 {
        self.sync_max_entries
            .as_ref()
            .map_or((conn_table_size / 2).max(1), |m| *m.get_ref())
    }
}

impl Config {
    /// `[cluster]`; a nat VIP in a cluster is legal but its replies return
    /// through one node only.
    pub(crate) fn validate_cluster(
        &self,
        ck: &Checker<'_>,
        warnings: &mut Vec<ConfigWarning>,
    ) -> Result<(), ConfigError> {
        let Some(c) = &self.cluster else {
            return Ok(());
        };
        let dp = &self.dataplane;
        c.validate(dp.conn_table_size, dp.tier == Tier::Xdp)
            .map_err(|(span, field, msg)| ck.err(span, field, msg))?;
        for (i, v) in self.vips.iter().enumerate() {
            if v.mode == Mode::Nat {
                warnings.push(ck.err(
                    Some(v.name.span()),
                    format!("vip[{i}].mode"),
                    "in a cluster, a nat VIP's replies go back through the backend's gateway, \
                     not the node ECMP chose, and only that node reverse-translates them; \
                     behind ECMP use mode = \"dsr\"",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_files::*;

    fn parse(extra: &str) -> ClusterCfg {
        toml::from_str(&format!(
            "node = \"lb-a\"\netcd = [\"http://10.0.0.1:2379\", \"10.0.0.2:2379\"]\n\
             sync_interface = \"eth1\"\nsync_key_file = \"/etc/weir/sync.key\"\n{extra}"
        ))
        .unwrap()
    }

    fn field_of(c: &ClusterCfg, table: u32, xdp: bool) -> String {
        c.validate(table, xdp).unwrap_err().1
    }

    #[test]
    fn defaults_and_endpoints() {
        let c = parse("");
        c.validate(1000, true).unwrap();
        assert_eq!(c.prefix.get_ref(), "/weir");
        assert_eq!(c.lease_ttl(), Duration::from_secs(2));
        assert_eq!(*c.sync_port.get_ref(), DEFAULT_SYNC_PORT);
        assert_eq!(c.sync_budget(1000), 500);
        assert_eq!(
            c.endpoints(),
            vec![
                "10.0.0.1:2379".parse().unwrap(),
                "10.0.0.2:2379".parse().unwrap()
            ]
        );
    }

    #[test]
    fn mistakes_name_the_field() {
        assert_eq!(
            field_of(&parse("prefix = \"weir\""), 10, true),
            "cluster.prefix"
        );
        assert_eq!(
            field_of(&parse("prefix = \"/weir/\""), 10, true),
            "cluster.prefix"
        );
        assert_eq!(
            field_of(&parse("lease_ttl_s = 0"), 10, true),
            "cluster.lease_ttl_s"
        );
        assert_eq!(
            field_of(&parse("sync_max_entries = 11"), 10, true),
            "cluster.sync_max_entries"
        );
        assert_eq!(field_of(&parse(""), 10, false), "cluster.connection_sync");
        parse("connection_sync = false")
            .validate(10, false)
            .unwrap();
        let mut c = parse("");
        c.node = Spanned::new(0..1, "a b".into());
        assert_eq!(field_of(&c, 10, true), "cluster.node");
        c = parse("");
        c.etcd = Spanned::new(0..1, vec!["https://10.0.0.1:2379".into()]);
        let (_, f, m) = c.validate(10, true).unwrap_err();
        assert_eq!(f, "cluster.etcd");
        assert!(m.contains("TLS"), "{m}");
        c.etcd = Spanned::new(0..1, vec!["etcd.example:2379".into()]);
        assert_eq!(field_of(&c, 10, true), "cluster.etcd");
        c = parse("");
        c.sync_key_file = None;
        let (_, f, m) = c.validate(10, true).unwrap_err();
        assert_eq!(f, "cluster.sync_key_file");
        assert!(m.contains("openssl rand -hex 32"), "{m}");
        c = parse("");
        c.sync_interface = None;
        assert_eq!(field_of(&c, 10, true), "cluster.sync_interface");
    }

    #[test]
    fn a_cluster_section_is_checked_with_the_line_and_the_field() {
        let cluster = |keys: &str| {
            format!(
                "{GOOD}\n[cluster]\nnode = \"lb-a\"\netcd = [\"10.0.0.9:2379\"]\n\
                 sync_interface = \"eth1\"\nsync_key_file = \"/etc/weir/sync.key\"\n{keys}\n"
            )
        };
        let c = Config::parse("t.toml", &cluster("")).unwrap();
        let cl = c.cluster.as_ref().unwrap();
        assert_eq!(cl.node.get_ref(), "lb-a");
        assert!(
            c.wants_controller(),
            "the leader's controller publishes the tables"
        );
        assert!(
            c.warnings
                .iter()
                .any(|w| w.field == "vip[0].mode" && w.message.contains("dsr")),
            "{:?}",
            c.warnings
        );
        let line_of_last = cluster("").lines().count();
        let e = err_of(&cluster("lease_ttl_s = 0"));
        assert_eq!(
            (e.field.as_str(), e.line),
            ("cluster.lease_ttl_s", Some(line_of_last))
        );
        let e = err_of(&cluster("node2 = 1"));
        assert!(e.message.contains("unknown field `node2`"), "{e}");
        let no_key = cluster("").replace("sync_key_file = \"/etc/weir/sync.key\"\n", "");
        let e = err_of(&no_key);
        assert_eq!(e.field, "cluster.sync_key_file");
        assert!(e.message.contains("openssl rand -hex 32"), "{e}");
        let e = err_of(&cluster("").replace(
            "interfaces = [\"veth0\"]\n",
            "interfaces = [\"veth0\"]\ntier = \"software\"\n",
        ));
        assert_eq!(e.field, "cluster.connection_sync");
        Config::parse(
            "t.toml",
            &cluster("connection_sync = false").replace(
                "interfaces = [\"veth0\"]\n",
                "interfaces = [\"veth0\"]\ntier = \"software\"\n",
            ),
        )
        .unwrap();
    }
}
