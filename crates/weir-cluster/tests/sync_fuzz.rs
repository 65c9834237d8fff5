//! Fuzzes the sync receiver's decision (decode, verify, replay) with well
//! over 100,000 datagrams: valid ones of every kind (the bulk handshake's
//! challenges and proofs too), replays, bit flips, truncations,
//! extensions, foreign keys, random bytes and oversized ones. Nothing may
//! panic, every datagram ends in exactly one verdict, and what is accepted
//! is exactly the valid datagrams, each once, with what they carried.

use std::collections::{HashMap, HashSet};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use weir_abi::weir_flow_key;
use weir_cluster::sync::wire::{
    open, ConnRecord, Encoder, Key, Kind, Nonce, Reject, ReplayGuard, MAX_DATAGRAM,
};

const DATAGRAMS: usize = 120_000;

fn record(rng: &mut ChaCha8Rng) -> ConnRecord {
    let v6 = rng.gen_bool(0.2);
    let addr = |rng: &mut ChaCha8Rng| -> [u32; 4] {
        if v6 {
            rng.gen()
        } else {
            [rng.gen(), 0, 0, 0]
        }
    };
    ConnRecord {
        key: weir_flow_key {
            src: addr(rng),
            dst: addr(rng),
            sport: rng.gen(),
            dport: rng.gen(),
            proto: if rng.gen() { 6 } else { 17 },
            family: if v6 { 10 } else { 2 },
            pad: [0; 2],
        },
        dip_addr: addr(rng),
        dip_port: rng.gen(),
        close_flags: rng.gen_range(0..8),
        idle_us: rng.gen(),
    }
}

#[derive(Default, Debug)]
struct Verdicts {
    accepted: usize,
    oversized: usize,
    malformed: usize,
    unauthenticated: usize,
    replayed: usize,
}

#[test]
fn sync_datagrams_fuzz() {
    let key = Key::new((0..32).collect()).unwrap();
    let foreign = Key::new(vec![0x5a; 32]).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed_5c0c);
    let mut nodes: Vec<Encoder> = ["lb-a", "lb-b", "lb-c"]
        .iter()
        .enumerate()
        .map(|(i, n)| Encoder::new(key.clone(), n, 1000 + i as u64))
        .collect();
    let mut stranger = Encoder::new(foreign, "lb-x", 5);
    let mut guard = ReplayGuard::new(16);
    let mut sent_valid: Vec<Vec<u8>> = Vec::new();
    // Each valid datagram, with the kind and nonce it was made with.
    let mut originals: HashMap<Vec<u8>, (Kind, Option<Nonce>)> = HashMap::new();
    let mut accepted: HashSet<(String, u64, u64)> = HashSet::new();
    let mut v = Verdicts::default();
    let mut expect_accepted = 0usize;
    let mut accepted_by_kind: HashMap<String, usize> = HashMap::new();

    for i in 0..DATAGRAMS {
        let (bytes, fresh) = match rng.gen_range(0..10) {
            // A valid datagram, new.
            0..=2 => {
                let n = rng.gen_range(0..nodes.len());
                let count = rng.gen_range(0..25);
                let records: Vec<ConnRecord> = (0..count).map(|_| record(&mut rng)).collect();
                let nonce: Nonce = rng.gen();
                let (g, made) = match rng.gen_range(0..6) {
                    0 => (nodes[n].bulk_request(i as u64), (Kind::BulkRequest, None)),
                    1 => (
                        nodes[n].bulk_done(count as u64, i as u64),
                        (Kind::BulkDone, None),
                    ),
                    2 => (
                        nodes[n].bulk_challenge(&nonce, i as u64),
                        (Kind::BulkChallenge, Some(nonce)),
                    ),
                    3 => (
                        nodes[n].bulk_proof(&nonce, i as u64),
                        (Kind::BulkProof, Some(nonce)),
                    ),
                    _ if records.is_empty() => {
                        (nodes[n].bulk_request(i as u64), (Kind::BulkRequest, None))
                    }
                    4 => (
                        nodes[n].bulk(&records, i as u64).remove(0),
                        (Kind::Bulk, None),
                    ),
                    _ => (
                        nodes[n].conns(&records, i as u64).remove(0),
                        (Kind::Conns, None),
                    ),
                };
                originals.insert(g.clone(), made);
                sent_valid.push(g.clone());
                (g, true)
            }
            // A replay of something sent before.
            3 if !sent_valid.is_empty() => {
                let g = sent_valid[rng.gen_range(0..sent_valid.len())].clone();
                (g, false)
            }
            // A bit flip (or a few) of a valid datagram.
            4 | 3 if !sent_valid.is_empty() => {
                let mut g = sent_valid[rng.gen_range(0..sent_valid.len())].clone();
                for _ in 0..rng.gen_range(1..4) {
                    let at = rng.gen_range(0..g.len());
                    g[at] ^= 1 << rng.gen_range(0..8);
                }
                (g, false)
            }
            // Truncated or extended.
            5 if !sent_valid.is_empty() => {
                let mut g = sent_valid[rng.gen_range(0..sent_valid.len())].clone();
                if rng.gen() {
                    g.truncate(rng.gen_range(0..g.len()));
                } else {
                    let extra = rng.gen_range(1..200);
                    g.extend((0..extra).map(|_| rng.gen::<u8>()));
                }
                (g, false)
            }
            // Signed with another key.
            6 => (stranger.conns(&[record(&mut rng)], 0).remove(0), false),
            // Oversized.
            7 => {
                let len = rng.gen_range(MAX_DATAGRAM + 1..MAX_DATAGRAM * 3);
                ((0..len).map(|_| rng.gen()).collect(), false)
            }
            // Random bytes, sometimes with the right magic and version.
            _ => {
                let len = rng.gen_range(0..MAX_DATAGRAM);
                let mut g: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                if rng.gen() && g.len() >= 6 {
                    g[..5].copy_from_slice(b"WSYN\x01");
                    // Sometimes a kind that exists, the new ones too.
                    if rng.gen() {
                        g[5] = rng.gen_range(1..=6);
                    }
                }
                (g, false)
            }
        };
        let verdict = open(&bytes, &key).and_then(|d| {
            guard.accept(&d.sender, d.epoch, d.seq)?;
            Ok(d)
        });
        match verdict {
            Ok(d) => {
                v.accepted += 1;
                let Some(&(kind, nonce)) = originals.get(&bytes) else {
                    panic!("datagram {i}: a forgery was accepted");
                };
                assert_eq!((d.kind, d.nonce), (kind, nonce), "datagram {i}");
                *accepted_by_kind.entry(format!("{kind:?}")).or_default() += 1;
                assert!(
                    accepted.insert((d.sender.clone(), d.epoch, d.seq)),
                    "datagram {i}: accepted twice"
                );
                assert!(
                    fresh,
                    "datagram {i}: only fresh valid datagrams are accepted"
                );
            }
            Err(Reject::Oversized) => v.oversized += 1,
            Err(Reject::Malformed) => v.malformed += 1,
            Err(Reject::Unauthenticated) => v.unauthenticated += 1,
            Err(Reject::Replayed) => v.replayed += 1,
        }
        if fresh {
            expect_accepted += 1;
        }
    }
    let total = v.accepted + v.oversized + v.malformed + v.unauthenticated + v.replayed;
    assert_eq!(total, DATAGRAMS, "{v:?}");
    assert_eq!(
        v.accepted, expect_accepted,
        "every fresh valid datagram is accepted: {v:?}"
    );
    for (what, n) in [
        ("oversized", v.oversized),
        ("malformed", v.malformed),
        ("unauthenticated", v.unauthenticated),
        ("replayed", v.replayed),
    ] {
        assert!(n > 1000, "the fuzz must exercise {what}: {v:?}");
    }
    assert_eq!(
        accepted_by_kind.len(),
        6,
        "every kind: {accepted_by_kind:?}"
    );
    for (kind, n) in &accepted_by_kind {
        assert!(
            *n > 1000,
            "the fuzz must accept {kind}: {accepted_by_kind:?}"
        );
    }
}
