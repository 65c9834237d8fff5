//! Which CPUs share a cache, from the kernel's description of each CPU's
//! caches (TBTD, seed 003: a dominant flow is spread over cores chosen by
//! the cache hierarchy, so that the cores working on one flow share its
//! state and its packets' cache lines).
//!
//! Sans-IO: the caller reads, for every CPU `N` and cache index `I`,
//! `/sys/devices/system/cpu/cpuN/cache/indexI/{level,type,shared_cpu_list}`
//! and hands the first two strings and the parsed CPU list to
//! [`CacheIndex::parse`]; [`Topology::new`] takes the result. Instruction caches are ignored: sharing one says
//! nothing about where a packet's data is.

use std::fmt;

/// Why a cache description was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopologyError {
    /// A cache level that is not a number from 1 to 9.
    Level(String),
    /// A cache type other than Data, Instruction or Unified.
    Kind(String),
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopologyError::Level(s) => {
                write!(f, "cache level {s:?} is not a number from 1 to 9")
            }
            TopologyError::Kind(s) => {
                write!(f, "cache type {s:?} is none of Data, Instruction, Unified")
            }
        }
    }
}

impl std::error::Error for TopologyError {}

/// What a cache holds (`type` in sysfs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheKind {
    Data,
    Instruction,
    Unified,
}

/// One cache as one CPU's `cache/indexI` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheIndex {
    /// 1 for L1, 2 for L2, ...
    pub level: u8,
    pub kind: CacheKind,
    /// The CPUs that share it (`shared_cpu_list`).
    pub cpus: Vec<u32>,
}

impl CacheIndex {
    /// From the contents of the index's `level` and `type` files and the
    /// CPUs its `shared_cpu_list` names.
    pub fn parse(level: &str, kind: &str, cpus: Vec<u32>) -> Result<CacheIndex, TopologyError> {
        let level = match level.trim().parse::<u8>() {
            Ok(l @ 1..=9) => l,
            _ => return Err(TopologyError::Level(level.to_string())),
        };
        let kind = match kind.trim() {
            "Data" => CacheKind::Data,
            "Instruction" => CacheKind::Instruction,
            "Unified" => CacheKind::Unified,
            _ => return Err(TopologyError::Kind(kind.to_string())),
        };
        Ok(CacheIndex { level, kind, cpus })
    }
}

/// How close two CPUs are; closer compares smaller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Closeness {
    /// The same CPU.
    Same,
    /// The lowest cache level both use (1 for SMT siblings sharing L1).
    Cache(u8),
    /// No shared cache known (another socket, or no topology given).
    Apart,
}

/// The data caches of a machine: for each level, the groups of CPUs that
/// share a cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    /// (level, sorted CPUs), each group once, lowest level first.
    groups: Vec<(u8, Vec<u32>)>,
}

impl Topology {
    /// From every CPU's cache indexes (each shared cache is seen once per
    /// CPU that uses it; duplicates are merged).
    pub fn new(caches: impl IntoIterator<Item = CacheIndex>) -> Topology {
        let mut groups: Vec<(u8, Vec<u32>)> = caches
            .into_iter()
            .filter(|c| c.kind != CacheKind::Instruction && c.cpus.len() > 1)
            .map(|c| (c.level, c.cpus))
            .collect();
        groups.sort_unstable();
        groups.dedup();
        Topology { groups }
    }

    /// A machine about which nothing is known: every pair of CPUs is
    /// [`Closeness::Apart`].
    pub fn flat() -> Topology {
        Topology::default()
    }

    /// How close CPUs `a` and `b` are.
    pub fn closeness(&self, a: u32, b: u32) -> Closeness {
        if a == b {
            return Closeness::Same;
        }
        self.groups
            .iter()
            .find(|(_, cpus)| cpus.binary_search(&a).is_ok() && cpus.binary_search(&b).is_ok())
            .map_or(Closeness::Apart, |&(level, _)| Closeness::Cache(level))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_cache_index() {
        assert_eq!(
            CacheIndex::parse("3\n", "Unified\n", vec![0, 1]).unwrap(),
            CacheIndex {
                level: 3,
                kind: CacheKind::Unified,
                cpus: vec![0, 1]
            }
        );
        assert_eq!(
            CacheIndex::parse("0", "Data", vec![0]),
            Err(TopologyError::Level("0".into()))
        );
        assert_eq!(
            CacheIndex::parse("1", "Trace", vec![0]),
            Err(TopologyError::Kind("Trace".into()))
        );
    }

    /// A CPU list as the caller parses it.
    fn cpu_list(s: &str) -> Vec<u32> {
        weir_sys::parse_cpu_list(s)
            .unwrap()
            .into_iter()
            .map(|c| c as u32)
            .collect()
    }

    /// The caches of cpu0..cpuN as sysfs lists them: (level, type, shared).
    fn machine(per_cpu: &[&[(&str, &str, &str)]]) -> Topology {
        Topology::new(per_cpu.iter().flat_map(|indexes| {
            indexes
                .iter()
                .map(|&(l, t, s)| CacheIndex::parse(l, t, cpu_list(s)).unwrap())
        }))
    }

    #[test]
    fn this_kind_of_machine_two_cores_sharing_l3() {
        // An EPYC VM with 2 vCPUs (this project's machine): private L1/L2,
        // one L3.
        let cpu = |n: &'static str| -> [(&'static str, &'static str, &'static str); 4] {
            [
                ("1", "Data", n),
                ("1", "Instruction", n),
                ("2", "Unified", n),
                ("3", "Unified", "0-1"),
            ]
        };
        let t = machine(&[&cpu("0"), &cpu("1")]);
        assert_eq!(t.closeness(0, 0), Closeness::Same);
        assert_eq!(t.closeness(0, 1), Closeness::Cache(3));
        assert_eq!(t.closeness(1, 0), Closeness::Cache(3));
        assert_eq!(t.closeness(0, 7), Closeness::Apart, "unknown CPU");
    }

    #[test]
    fn smt_siblings_are_closer_than_a_shared_l3_and_sockets_share_nothing() {
        // Two sockets of two cores with two threads each: siblings (n,
        // n+4) share L1 and L2, a socket's cores share its L3. Only the
        // instruction cache is shared between 0 and 2: it does not count.
        let mut per_cpu: Vec<Vec<(String, String, String)>> = Vec::new();
        for cpu in 0..8u32 {
            let core = cpu % 4;
            let siblings = format!("{},{}", core, core + 4);
            let socket = if core < 2 { "0-1,4-5" } else { "2-3,6-7" };
            per_cpu.push(vec![
                ("1".into(), "Data".into(), siblings.clone()),
                ("1".into(), "Instruction".into(), "0-7".into()),
                ("2".into(), "Unified".into(), siblings),
                ("3".into(), "Unified".into(), socket.into()),
            ]);
        }
        let t = Topology::new(
            per_cpu
                .iter()
                .flatten()
                .map(|(l, k, s)| CacheIndex::parse(l, k, cpu_list(s)).unwrap()),
        );
        assert_eq!(t.groups.len(), 4 + 4 + 2, "each shared cache once");
        assert_eq!(t.closeness(0, 4), Closeness::Cache(1));
        assert_eq!(t.closeness(0, 1), Closeness::Cache(3));
        assert_eq!(t.closeness(0, 5), Closeness::Cache(3));
        assert_eq!(t.closeness(0, 2), Closeness::Apart);
        let mut by_closeness: Vec<u32> = (1..8).collect();
        by_closeness.sort_by_key(|&c| (t.closeness(0, c), c));
        assert_eq!(by_closeness, [4, 1, 5, 2, 3, 6, 7]);
    }

    #[test]
    fn a_flat_topology_knows_only_same_cpu() {
        let t = Topology::flat();
        assert_eq!(t.closeness(3, 3), Closeness::Same);
        assert_eq!(t.closeness(3, 4), Closeness::Apart);
    }
}
