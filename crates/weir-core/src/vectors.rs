//! Shared AWFD test vectors: tables and flows with the DIP each flow must
//! get, so the Rust tables and the BPF data plane can be checked against
//! one file (`tests/vectors/awfd.json` at the repository root).
//!
//! [`generate`] builds the vectors deterministically (no I/O here);
//! `weir-lab sim vectors` writes them. The format is described in [`FORMAT`], which is also stored in the file itself.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::dispatch::awfd::{AwfdTable, DipId, PriorityClass};
use crate::flow::{FlowTuple, Proto};
use crate::flow_hash::{flow_hash, DEFAULT_SEED};
use crate::splitmix::SplitMix;

/// The description stored in the file's top-level `format` field.
pub const FORMAT: &str =
    "weir AWFD test vectors v1. seed: the flow-hash seed (weir_core::flow_hash::DEFAULT_SEED). \
Each case is one VIP's table. weights: [{dip, weight}] per DIP id; build the table with \
AwfdTable::from_weights (weight 0 = drained, never chosen). classes and bounds are the derived \
two-stage table for reference (classes in descending weight; bounds[i] = cumulative sum of \
weight * |members| over classes 0..=i, i.e. weir_class_ranges.bound; classes[i].members is \
weir_class_members row i, sorted by DIP id). flows: 5-tuples {src, dst, sport, dport, proto} \
with ports in host order and proto \"tcp\"/\"udp\"; hash = weir_flow_hash(key, seed) over \
struct weir_flow_key (ports big-endian in the key); dip = the DIP id AwfdTable::select(hash) \
and awfd_select() must return, or null when the table is empty.";

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VectorFile {
    pub format: String,
    pub generator: String,
    pub seed: u32,
    pub cases: Vec<VectorCase>,
}

/// One table and the flows checked against it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VectorCase {
    pub name: String,
    pub weights: Vec<DipWeight>,
    pub classes: Vec<VectorClass>,
    pub bounds: Vec<u32>,
    pub flows: Vec<VectorFlow>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DipWeight {
    pub dip: DipId,
    pub weight: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VectorClass {
    pub weight: u32,
    pub members: Vec<DipId>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VectorFlow {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub proto: Proto,
    pub hash: u32,
    pub dip: Option<DipId>,
}

impl VectorFlow {
    pub fn tuple(&self) -> FlowTuple {
        FlowTuple {
            src: self.src,
            dst: self.dst,
            sport: self.sport,
            dport: self.dport,
            proto: self.proto,
        }
    }
}

impl VectorCase {
    /// The (DIP, weight) pairs for [`AwfdTable::from_weights`].
    pub fn weight_pairs(&self) -> Vec<(DipId, u32)> {
        self.weights.iter().map(|w| (w.dip, w.weight)).collect()
    }
}

fn random_flow(rng: &mut SplitMix, v6: bool) -> FlowTuple {
    let r = rng.next_u64();
    let (src, dst): (IpAddr, IpAddr) = if v6 {
        let mut s = [0u8; 16];
        s[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        s[8..].copy_from_slice(&rng.next_u64().to_be_bytes());
        let mut d = [0u8; 16];
        d[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        d[15] = 0x10;
        (IpAddr::from(s), IpAddr::from(d))
    } else {
        let s = (r as u32).to_be_bytes();
        (
            IpAddr::from([10, s[1], s[2], s[3]]),
            IpAddr::from([192, 0, 2, 10]),
        )
    };
    FlowTuple {
        src,
        dst,
        sport: 1024 + ((r >> 32) as u16 % 64_000),
        dport: if r >> 48 & 1 == 0 { 80 } else { 443 },
        proto: if r >> 49 & 3 == 0 {
            Proto::Udp
        } else {
            Proto::Tcp
        },
    }
}

fn case(name: &str, weights: &[(DipId, u32)], flows: usize, rng: &mut SplitMix) -> VectorCase {
    let table = AwfdTable::from_weights(weights).expect("vector tables fit the data plane");
    let flows = (0..flows)
        .map(|i| {
            let t = random_flow(rng, i % 4 == 3);
            let hash = flow_hash(&t.key(), DEFAULT_SEED);
            VectorFlow {
                src: t.src,
                dst: t.dst,
                sport: t.sport,
                dport: t.dport,
                proto: t.proto,
                hash,
                dip: table.select(hash),
            }
        })
        .collect();
    VectorCase {
        name: name.to_string(),
        weights: weights
            .iter()
            .map(|&(dip, weight)| DipWeight { dip, weight })
            .collect(),
        classes: table
            .classes
            .iter()
            .map(|PriorityClass { weight, members }| VectorClass {
                weight: *weight,
                members: members.clone(),
            })
            .collect(),
        bounds: table.bounds.clone(),
        flows,
    }
}

/// The vectors, deterministically.
pub fn generate() -> VectorFile {
    let mut rng = SplitMix(0x7765_6972_7665_6331);
    let mut cases = Vec::new();
    let n = 24;
    cases.push(case(
        "spotlight-fig3-m2",
        &[(0, 0), (1, 2), (2, 2)],
        n,
        &mut rng,
    ));
    cases.push(case(
        "ecmp-4",
        &[(0, 1), (1, 1), (2, 1), (3, 1)],
        n,
        &mut rng,
    ));
    cases.push(case("single-dip", &[(7, 3)], 8, &mut rng));
    cases.push(case("all-drained", &[(0, 0), (1, 0)], 8, &mut rng));
    cases.push(case(
        "three-classes-sparse-ids",
        &[(100, 4), (205, 2), (317, 2), (402, 1), (999, 0), (1000, 4)],
        n,
        &mut rng,
    ));
    let sixteen: Vec<(DipId, u32)> = (0..16).map(|i| (i * 3 + 1, 16 - i)).collect();
    cases.push(case("sixteen-classes", &sixteen, 48, &mut rng));
    let wide: Vec<(DipId, u32)> = (0..200)
        .map(|i| (i, if i % 50 == 0 { 7 } else { 1 + i % 3 }))
        .collect();
    cases.push(case("wide-pool-200", &wide, 48, &mut rng));
    let big: Vec<(DipId, u32)> = vec![(1, 1_000_000), (2, 1), (3, 999_999)];
    cases.push(case("large-weights", &big, n, &mut rng));
    VectorFile {
        format: FORMAT.to_string(),
        generator: "weir sim vectors --out tests/vectors/awfd.json (weir_core::vectors::generate)"
            .to_string(),
        seed: DEFAULT_SEED,
        cases,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/vectors/awfd.json");

    fn load() -> VectorFile {
        let text = std::fs::read_to_string(PATH)
            .unwrap_or_else(|e| panic!("{PATH}: {e}; run `weir-lab sim vectors`"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{PATH}: {e}"))
    }

    #[test]
    fn vector_file_matches_hash_and_select() {
        let file = load();
        assert_eq!(file.seed, DEFAULT_SEED);
        let mut checked = 0;
        for c in &file.cases {
            let t = AwfdTable::from_weights(&c.weight_pairs()).unwrap();
            assert_eq!(t.bounds, c.bounds, "{}", c.name);
            let classes: Vec<_> = t.classes.iter().map(|k| (k.weight, &k.members)).collect();
            let stored: Vec<_> = c.classes.iter().map(|k| (k.weight, &k.members)).collect();
            assert_eq!(classes, stored, "{}", c.name);
            for f in &c.flows {
                let h = flow_hash(&f.tuple().key(), file.seed);
                assert_eq!(h, f.hash, "{}: hash of {:?}", c.name, f.tuple());
                assert_eq!(t.select(h), f.dip, "{}: dip of {:?}", c.name, f.tuple());
                checked += 1;
            }
        }
        assert!(checked > 100);
    }

    #[test]
    fn vector_file_is_what_the_generator_writes() {
        assert_eq!(load(), generate(), "regenerate with `weir-lab sim vectors`");
    }

    #[test]
    fn vectors_cover_empty_v6_udp_and_full_class_tables() {
        let g = generate();
        let flows = g.cases.iter().flat_map(|c| &c.flows);
        assert!(flows.clone().any(|f| f.src.is_ipv6()));
        assert!(flows.clone().any(|f| f.proto == Proto::Udp));
        assert!(flows.clone().any(|f| f.dip.is_none()));
        assert!(g.cases.iter().any(|c| c.classes.len() == 16));
    }
}
