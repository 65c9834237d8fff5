//! The connection-sync datagram, sans-IO: encoding, authentication,
//! decoding and the replay window. Nothing here touches a socket or a clock
//! (times are passed in), so every rule is unit-tested and fuzzed.
//!
//! A datagram (integers big-endian, addresses and ports in network order):
//!
//! ```text
//!  0  magic "WSYN"          4  version (1)      5  kind
//!  6  record count (u16)    8  epoch (u64)     16  sequence number (u64)
//! 24  sent, unix ns (u64)  32  sender name length n (1..=63)
//! 33  sender name (n bytes)
//!     payload: kinds conns (1) and bulk (4) = count records of 64 bytes;
//!              bulk request (2) = none; bulk done (3) = the number of
//!              records the bulk sent (u64); bulk challenge (5) and bulk
//!              proof (6) = a nonce (16 bytes)
//!     tag: HMAC-SHA256 of everything before it, with the cluster's key (32)
//! ```
//!
//! A record is one established connection:
//!
//! ```text
//!  0 family  1 protocol  2 close flags  3 zero
//!  4 client address (16)  20 VIP address (16)  36 client port  38 VIP port
//! 40 DIP address (16)     56 DIP port (0 = the VIP's)  58 zero (2)
//! 60 idle time at the sender, microseconds (u32, saturating)
//! ```
//!
//! A bulk is served only through a handshake (`crate::sync::gate`): the
//! joiner's request, the server's challenge (a fresh nonce, sent to the
//! joiner's registered address), and the joiner's proof (the nonce
//! echoed). Kinds 5 and 6 came after version 1's first four; a node that
//! predates them drops them as malformed, so the version stays 1.
//!
//! The sender's epoch is its start time (unix ns), and sequence numbers
//! count its datagrams from 1. A receiver accepts a sender's epoch only if
//! it is not older than the last one it accepted, and each sequence number
//! of that epoch once, within a window of the last [`WINDOW`] (RFC 4303's
//! anti-replay window). The tag is checked (in constant time) before
//! anything in the datagram is believed.

use std::collections::HashMap;
use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use weir_abi::weir_flow_key;

/// The first bytes of every datagram.
pub const MAGIC: [u8; 4] = *b"WSYN";
/// The protocol version this code speaks.
pub const VERSION: u8 = 1;
/// The longest datagram sent or accepted: below a 1500-byte MTU with IPv6
/// and UDP headers, so a datagram is never fragmented.
pub const MAX_DATAGRAM: usize = 1400;
/// The tag's length (a full HMAC-SHA256).
pub const TAG_LEN: usize = 32;
/// One connection on the wire.
pub const RECORD_LEN: usize = 64;
/// The longest node name (etcd keys and datagrams carry it); the
/// configuration refuses a longer one.
pub use weir_config::cluster::MAX_NAME;
/// Sequence numbers a receiver remembers below the highest it has seen.
pub const WINDOW: u64 = 64;
/// The shortest key accepted (bytes).
pub const MIN_KEY: usize = 16;
/// A bulk challenge's nonce (bytes): 128 random bits are never guessed.
pub const NONCE_LEN: usize = 16;

/// A bulk challenge's nonce.
pub type Nonce = [u8; NONCE_LEN];

const HEADER_FIXED: usize = 33;

/// What a datagram carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Established connections this node just installed.
    Conns,
    /// Established connections sent to a joining node (a bulk).
    Bulk,
    /// "Send me every connection you know" (a joining node).
    BulkRequest,
    /// The end of a bulk, with the number of records it held.
    BulkDone,
    /// "Prove you asked": a nonce, to the requester's registered address.
    BulkChallenge,
    /// The challenge's nonce echoed: the bulk may go.
    BulkProof,
}

impl Kind {
    fn raw(self) -> u8 {
        match self {
            Kind::Conns => 1,
            Kind::BulkRequest => 2,
            Kind::BulkDone => 3,
            Kind::Bulk => 4,
            Kind::BulkChallenge => 5,
            Kind::BulkProof => 6,
        }
    }

    fn from_raw(b: u8) -> Option<Kind> {
        match b {
            1 => Some(Kind::Conns),
            2 => Some(Kind::BulkRequest),
            3 => Some(Kind::BulkDone),
            4 => Some(Kind::Bulk),
            5 => Some(Kind::BulkChallenge),
            6 => Some(Kind::BulkProof),
            _ => None,
        }
    }
}

/// One established connection: its client-side 5-tuple (the `conns` key)
/// and the DIP it is pinned to, by identity (DIP slots are per node).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnRecord {
    pub key: weir_flow_key,
    /// The DIP's address words, as `weir_dip.addr`.
    pub dip_addr: [u32; 4],
    /// The DIP's NAT port in network order, 0 = the VIP's (`weir_dip.port`).
    pub dip_port: u16,
    /// `weir_conn.close_flags`.
    pub close_flags: u8,
    /// How long the connection had been idle when this was sent (for a
    /// live announcement: how long ago it was installed).
    pub idle_us: u32,
}

impl ConnRecord {
    fn encode(&self, out: &mut Vec<u8>) {
        let k = &self.key;
        out.extend_from_slice(&[k.family, k.proto, self.close_flags, 0]);
        for w in k.src.iter().chain(&k.dst) {
            out.extend_from_slice(&w.to_ne_bytes());
        }
        out.extend_from_slice(&k.sport.to_ne_bytes());
        out.extend_from_slice(&k.dport.to_ne_bytes());
        for w in &self.dip_addr {
            out.extend_from_slice(&w.to_ne_bytes());
        }
        out.extend_from_slice(&self.dip_port.to_ne_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&self.idle_us.to_be_bytes());
    }

    fn decode(b: &[u8; RECORD_LEN]) -> Result<ConnRecord, Reject> {
        let words = |at: usize| -> [u32; 4] {
            std::array::from_fn(|i| {
                u32::from_ne_bytes(b[at + 4 * i..at + 4 * i + 4].try_into().unwrap())
            })
        };
        let port = |at: usize| u16::from_ne_bytes([b[at], b[at + 1]]);
        let (family, proto) = (b[0], b[1]);
        if !matches!(family, 2 | 10) || !matches!(proto, 6 | 17) || b[3] != 0 || b[58..60] != [0, 0]
        {
            return Err(Reject::Malformed);
        }
        let key = weir_flow_key {
            src: words(4),
            dst: words(20),
            sport: port(36),
            dport: port(38),
            proto,
            family,
            pad: [0; 2],
        };
        let dip_addr = words(40);
        // IPv4 lives in word 0 and the rest is zero, as in the maps.
        if family == 2
            && [key.src, key.dst, dip_addr]
                .iter()
                .any(|a| a[1..] != [0; 3])
        {
            return Err(Reject::Malformed);
        }
        Ok(ConnRecord {
            key,
            dip_addr,
            dip_port: port(56),
            close_flags: b[2],
            idle_us: u32::from_be_bytes(b[60..64].try_into().unwrap()),
        })
    }
}

/// Why a datagram was dropped. Each is a counter of the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    /// Longer than [`MAX_DATAGRAM`].
    Oversized,
    /// Not a sync datagram of this version, or inconsistent lengths.
    Malformed,
    /// The tag does not match: not from a node with the cluster's key.
    Unauthenticated,
    /// A sequence number (or an epoch) already seen or too old.
    Replayed,
}

impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reject::Oversized => "oversized",
            Reject::Malformed => "malformed",
            Reject::Unauthenticated => "unauthenticated",
            Reject::Replayed => "replayed",
        })
    }
}

/// A verified datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    pub kind: Kind,
    pub sender: String,
    pub epoch: u64,
    pub seq: u64,
    /// The sender's wall clock when it sent this (unix ns).
    pub sent_unix_ns: u64,
    pub records: Vec<ConnRecord>,
    /// BulkDone: how many records the bulk held.
    pub bulk_total: u64,
    /// BulkChallenge and BulkProof: the nonce.
    pub nonce: Option<Nonce>,
}

type HmacSha256 = Hmac<Sha256>;

/// The cluster's shared secret.
#[derive(Clone)]
pub struct Key(Vec<u8>);

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({} bytes)", self.0.len())
    }
}

impl Key {
    /// A key of at least [`MIN_KEY`] bytes.
    pub fn new(bytes: Vec<u8>) -> Result<Key, String> {
        if bytes.len() < MIN_KEY {
            return Err(format!(
                "the sync key has {} bytes; it needs at least {MIN_KEY} (e.g. `openssl rand -hex 32`)",
                bytes.len()
            ));
        }
        Ok(Key(bytes))
    }

    /// A key written as hex digits (surrounding whitespace ignored), as
    /// `openssl rand -hex 32` prints it.
    pub fn from_hex(text: &str) -> Result<Key, String> {
        let t = text.trim();
        if t.is_empty() {
            return Err(
                "the sync key file is empty; write a key into it with `openssl rand -hex 32`"
                    .into(),
            );
        }
        if t.len() & 1 == 1 || !t.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(
                "the sync key file must hold hex digits only (e.g. from `openssl rand -hex 32`)"
                    .into(),
            );
        }
        let bytes = (0..t.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&t[i..i + 2], 16).expect("checked hex"))
            .collect();
        Key::new(bytes)
    }

    fn mac(&self) -> HmacSha256 {
        HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length")
    }
}

/// Records that fit one datagram for a sender called `name`.
pub fn records_per_datagram(name: &str) -> usize {
    (MAX_DATAGRAM - HEADER_FIXED - name.len() - TAG_LEN) / RECORD_LEN
}

/// Builds a node's datagrams: one epoch, numbered from 1.
#[derive(Debug)]
pub struct Encoder {
    key: Key,
    name: String,
    epoch: u64,
    next_seq: u64,
}

impl Encoder {
    /// `name` is 1..=[`MAX_NAME`] bytes (the configuration checks it).
    pub fn new(key: Key, name: &str, epoch: u64) -> Encoder {
        assert!(
            (1..=MAX_NAME).contains(&name.len()),
            "node names are 1..={MAX_NAME} bytes"
        );
        Encoder {
            key,
            name: name.to_string(),
            epoch,
            next_seq: 1,
        }
    }

    /// Datagrams that announce `records`, as many per datagram as fit.
    pub fn conns(&mut self, records: &[ConnRecord], now_unix_ns: u64) -> Vec<Vec<u8>> {
        self.records(Kind::Conns, records, now_unix_ns)
    }

    /// Datagrams that carry `records` to a joining node.
    pub fn bulk(&mut self, records: &[ConnRecord], now_unix_ns: u64) -> Vec<Vec<u8>> {
        self.records(Kind::Bulk, records, now_unix_ns)
    }

    fn records(&mut self, kind: Kind, records: &[ConnRecord], now_unix_ns: u64) -> Vec<Vec<u8>> {
        records
            .chunks(records_per_datagram(&self.name))
            .map(|chunk| {
                self.seal(kind, chunk.len() as u16, now_unix_ns, |out| {
                    for r in chunk {
                        r.encode(out);
                    }
                })
            })
            .collect()
    }

    pub fn bulk_request(&mut self, now_unix_ns: u64) -> Vec<u8> {
        self.seal(Kind::BulkRequest, 0, now_unix_ns, |_| {})
    }

    pub fn bulk_done(&mut self, total: u64, now_unix_ns: u64) -> Vec<u8> {
        self.seal(Kind::BulkDone, 0, now_unix_ns, |out| {
            out.extend_from_slice(&total.to_be_bytes())
        })
    }

    /// A bulk server's answer to a request: `nonce`, to be echoed.
    pub fn bulk_challenge(&mut self, nonce: &Nonce, now_unix_ns: u64) -> Vec<u8> {
        self.seal(Kind::BulkChallenge, 0, now_unix_ns, |out| {
            out.extend_from_slice(nonce)
        })
    }

    /// A joiner's answer to a challenge: its nonce, echoed.
    pub fn bulk_proof(&mut self, nonce: &Nonce, now_unix_ns: u64) -> Vec<u8> {
        self.seal(Kind::BulkProof, 0, now_unix_ns, |out| {
            out.extend_from_slice(nonce)
        })
    }

    fn seal(
        &mut self,
        kind: Kind,
        count: u16,
        now_unix_ns: u64,
        payload: impl FnOnce(&mut Vec<u8>),
    ) -> Vec<u8> {
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut out = Vec::with_capacity(MAX_DATAGRAM);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&[VERSION, kind.raw()]);
        out.extend_from_slice(&count.to_be_bytes());
        out.extend_from_slice(&self.epoch.to_be_bytes());
        out.extend_from_slice(&seq.to_be_bytes());
        out.extend_from_slice(&now_unix_ns.to_be_bytes());
        out.push(self.name.len() as u8);
        out.extend_from_slice(self.name.as_bytes());
        payload(&mut out);
        let mut mac = self.key.mac();
        mac.update(&out);
        out.extend_from_slice(&mac.finalize().into_bytes());
        debug_assert!(out.len() <= MAX_DATAGRAM);
        out
    }
}

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().unwrap())
}

/// Checks and decodes one datagram: its size, its header, its tag, then
/// its payload. Replay is the caller's [`ReplayGuard`]'s to judge, after.
pub fn open(bytes: &[u8], key: &Key) -> Result<Datagram, Reject> {
    if bytes.len() > MAX_DATAGRAM {
        return Err(Reject::Oversized);
    }
    if bytes.len() < HEADER_FIXED + 1 + TAG_LEN || bytes[..4] != MAGIC || bytes[4] != VERSION {
        return Err(Reject::Malformed);
    }
    let kind = Kind::from_raw(bytes[5]).ok_or(Reject::Malformed)?;
    let count = u16::from_be_bytes([bytes[6], bytes[7]]) as usize;
    let name_len = bytes[32] as usize;
    if !(1..=MAX_NAME).contains(&name_len) {
        return Err(Reject::Malformed);
    }
    let payload_at = HEADER_FIXED + name_len;
    let payload_len = match kind {
        Kind::Conns | Kind::Bulk => count * RECORD_LEN,
        Kind::BulkRequest => 0,
        Kind::BulkDone => 8,
        Kind::BulkChallenge | Kind::BulkProof => NONCE_LEN,
    };
    if (!matches!(kind, Kind::Conns | Kind::Bulk) && count != 0)
        || bytes.len() != payload_at + payload_len + TAG_LEN
    {
        return Err(Reject::Malformed);
    }
    let (signed, tag) = bytes.split_at(bytes.len() - TAG_LEN);
    let mut mac = key.mac();
    mac.update(signed);
    mac.verify_slice(tag).map_err(|_| Reject::Unauthenticated)?;

    let sender = std::str::from_utf8(&bytes[HEADER_FIXED..payload_at])
        .map_err(|_| Reject::Malformed)?
        .to_string();
    let payload = &bytes[payload_at..payload_at + payload_len];
    let records = match kind {
        Kind::Conns | Kind::Bulk => payload
            .chunks_exact(RECORD_LEN)
            .map(|r| ConnRecord::decode(r.try_into().unwrap()))
            .collect::<Result<Vec<_>, _>>()?,
        _ => Vec::new(),
    };
    Ok(Datagram {
        kind,
        sender,
        epoch: be64(&bytes[8..]),
        seq: be64(&bytes[16..]),
        sent_unix_ns: be64(&bytes[24..]),
        records,
        bulk_total: if kind == Kind::BulkDone {
            be64(payload)
        } else {
            0
        },
        nonce: match kind {
            Kind::BulkChallenge | Kind::BulkProof => Some(payload.try_into().unwrap()),
            _ => None,
        },
    })
}

/// One sender's accepted epoch and window.
#[derive(Debug, Clone, Copy)]
struct Window {
    epoch: u64,
    highest: u64,
    /// Bit i: sequence number `highest - i` was accepted.
    seen: u64,
}

/// Per sender: which (epoch, sequence number) pairs were accepted. Bounded
/// to `max_senders` names (authenticated senders are cluster members, so
/// this is the number of node names a process meets, with room). A window
/// is never forgotten: a node that left and comes back restarts with a
/// later epoch, while its old datagrams stay replays.
#[derive(Debug)]
pub struct ReplayGuard {
    senders: HashMap<String, Window>,
    max_senders: usize,
}

impl ReplayGuard {
    pub fn new(max_senders: usize) -> ReplayGuard {
        ReplayGuard {
            senders: HashMap::new(),
            max_senders,
        }
    }

    /// Accepts a verified datagram's (epoch, seq) once; `Replayed` for a
    /// repeat, an older epoch, a number below the window, or a new sender
    /// past the bound.
    pub fn accept(&mut self, sender: &str, epoch: u64, seq: u64) -> Result<(), Reject> {
        let fresh = Window {
            epoch,
            highest: seq,
            seen: 1,
        };
        let Some(w) = self.senders.get_mut(sender) else {
            if self.senders.len() >= self.max_senders {
                return Err(Reject::Replayed);
            }
            self.senders.insert(sender.to_string(), fresh);
            return Ok(());
        };
        if epoch < w.epoch {
            return Err(Reject::Replayed);
        }
        if epoch > w.epoch {
            // The sender restarted: a new epoch starts a new window.
            *w = fresh;
            return Ok(());
        }
        if seq > w.highest {
            let shift = seq - w.highest;
            w.seen = if shift >= WINDOW { 0 } else { w.seen << shift };
            w.seen |= 1;
            w.highest = seq;
            return Ok(());
        }
        let back = w.highest - seq;
        if back >= WINDOW || w.seen & (1 << back) != 0 {
            return Err(Reject::Replayed);
        }
        w.seen |= 1 << back;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key::from_hex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f").unwrap()
    }

    pub(crate) fn record(i: u32) -> ConnRecord {
        ConnRecord {
            key: weir_flow_key {
                src: [
                    u32::from_ne_bytes([10, 0, (i >> 8) as u8, i as u8]),
                    0,
                    0,
                    0,
                ],
                dst: [u32::from_ne_bytes([10, 77, 100, 2]), 0, 0, 0],
                sport: (40000 + (i % 20000) as u16).to_be(),
                dport: 80u16.to_be(),
                proto: 6,
                family: 2,
                pad: [0; 2],
            },
            dip_addr: [u32::from_ne_bytes([10, 77, 1, 2]), 0, 0, 0],
            dip_port: 0,
            close_flags: 0,
            idle_us: i * 7,
        }
    }

    #[test]
    fn a_datagram_round_trips_and_batches_fill_the_mtu() {
        let mut enc = Encoder::new(key(), "lb-a", 42);
        let records: Vec<ConnRecord> = (0..50).map(record).collect();
        let per = records_per_datagram("lb-a");
        assert_eq!(per, 20, "(1400 - 33 - 4 - 32) / 64");
        let grams = enc.conns(&records, 7);
        assert_eq!(grams.len(), 3);
        let mut back = Vec::new();
        for (i, g) in grams.iter().enumerate() {
            assert!(g.len() <= MAX_DATAGRAM);
            let d = open(g, &key()).unwrap();
            assert_eq!(
                (d.kind, d.sender.as_str(), d.epoch),
                (Kind::Conns, "lb-a", 42)
            );
            assert_eq!((d.seq, d.sent_unix_ns), (i as u64 + 1, 7));
            back.extend(d.records);
        }
        assert_eq!(back, records);
        let done = open(&enc.bulk_done(50, 8), &key()).unwrap();
        assert_eq!(
            (done.kind, done.bulk_total, done.seq),
            (Kind::BulkDone, 50, 4)
        );
        let req = open(&enc.bulk_request(9), &key()).unwrap();
        assert_eq!((req.kind, req.records.len()), (Kind::BulkRequest, 0));
        let bulk = open(&enc.bulk(&records[..3], 10).remove(0), &key()).unwrap();
        assert_eq!(
            (bulk.kind, bulk.seq, &bulk.records[..]),
            (Kind::Bulk, 6, &records[..3])
        );
        assert_eq!((req.nonce, bulk.nonce), (None, None));
        let nonce: Nonce = std::array::from_fn(|i| i as u8 + 1);
        let challenge = enc.bulk_challenge(&nonce, 11);
        assert_eq!(challenge.len(), HEADER_FIXED + 4 + NONCE_LEN + TAG_LEN);
        let c = open(&challenge, &key()).unwrap();
        assert_eq!(
            (c.kind, c.seq, c.nonce, c.records.len()),
            (Kind::BulkChallenge, 7, Some(nonce), 0)
        );
        let p = open(&enc.bulk_proof(&nonce, 12), &key()).unwrap();
        assert_eq!((p.kind, p.seq, p.nonce), (Kind::BulkProof, 8, Some(nonce)));
    }

    #[test]
    fn a_challenge_or_proof_without_its_whole_nonce_is_malformed() {
        let mut enc = Encoder::new(key(), "lb-a", 1);
        let nonce = [7; NONCE_LEN];
        for g in [enc.bulk_challenge(&nonce, 0), enc.bulk_proof(&nonce, 0)] {
            // Re-sealed one byte short or long: consistent tags, wrong lengths.
            for len in [NONCE_LEN - 1, NONCE_LEN + 1] {
                let body_end = g.len() - TAG_LEN - NONCE_LEN;
                let mut t = g[..body_end].to_vec();
                t.extend(std::iter::repeat_n(7, len));
                let mut mac = key().mac();
                mac.update(&t);
                t.extend_from_slice(&mac.finalize().into_bytes());
                assert_eq!(open(&t, &key()), Err(Reject::Malformed), "nonce of {len}");
            }
            // A request's kind with a nonce's length: malformed too.
            let mut t = g[..g.len() - TAG_LEN].to_vec();
            t[5] = 2;
            let mut mac = key().mac();
            mac.update(&t);
            t.extend_from_slice(&mac.finalize().into_bytes());
            assert_eq!(open(&t, &key()), Err(Reject::Malformed));
        }
    }

    #[test]
    fn ipv6_records_round_trip() {
        let mut r = record(1);
        r.key.family = 10;
        r.key.src = [1, 2, 3, 4];
        r.key.dst = [5, 6, 7, 8];
        r.dip_addr = [9, 10, 11, 12];
        r.dip_port = 8080u16.to_be();
        r.close_flags = 1;
        let g = Encoder::new(key(), "n", 1).conns(&[r], 0).remove(0);
        assert_eq!(open(&g, &key()).unwrap().records, vec![r]);
    }

    #[test]
    fn tampering_and_the_wrong_key_are_unauthenticated() {
        let g = Encoder::new(key(), "lb-a", 1)
            .conns(&[record(1)], 0)
            .remove(0);
        let other = Key::new(vec![7; 32]).unwrap();
        assert_eq!(open(&g, &other), Err(Reject::Unauthenticated));
        // Every single-bit flip past the header's lengths is caught by the
        // tag; flips in the lengths make the datagram inconsistent first.
        for byte in 0..g.len() {
            let mut t = g.clone();
            t[byte] ^= 0x10;
            let r = open(&t, &key());
            assert!(
                matches!(r, Err(Reject::Unauthenticated | Reject::Malformed)),
                "byte {byte}: {r:?}"
            );
        }
    }

    #[test]
    fn malformed_and_oversized_are_told_apart() {
        let g = Encoder::new(key(), "lb-a", 1)
            .conns(&[record(1)], 0)
            .remove(0);
        assert_eq!(open(&g[..g.len() - 1], &key()), Err(Reject::Malformed));
        assert_eq!(open(&[], &key()), Err(Reject::Malformed));
        assert_eq!(open(b"WSYN", &key()), Err(Reject::Malformed));
        assert_eq!(
            open(&vec![0; MAX_DATAGRAM + 1], &key()),
            Err(Reject::Oversized)
        );
        let mut long = g.clone();
        long.extend_from_slice(&[0; 64]);
        assert_eq!(open(&long, &key()), Err(Reject::Malformed));
        // A correctly tagged datagram with a bad record is still malformed.
        let mut bad = record(1);
        bad.key.proto = 1;
        let g = Encoder::new(key(), "lb-a", 1).conns(&[bad], 0).remove(0);
        assert_eq!(open(&g, &key()), Err(Reject::Malformed));
    }

    #[test]
    fn keys_must_be_long_enough_and_hex() {
        assert!(Key::from_hex("").unwrap_err().contains("empty"));
        assert!(Key::from_hex("abc").unwrap_err().contains("hex"));
        assert!(Key::from_hex("zz").unwrap_err().contains("hex"));
        assert!(Key::from_hex("0011").unwrap_err().contains("at least 16"));
        assert!(Key::from_hex(&"ab".repeat(16)).is_ok());
        assert!(Key::from_hex(&format!("  {}\n", "ab".repeat(32))).is_ok());
    }

    #[test]
    fn the_replay_window_accepts_each_number_once() {
        let mut g = ReplayGuard::new(2);
        assert_eq!(g.accept("a", 5, 10), Ok(()));
        assert_eq!(g.accept("a", 5, 10), Err(Reject::Replayed));
        // Out of order within the window: once each.
        assert_eq!(g.accept("a", 5, 8), Ok(()));
        assert_eq!(g.accept("a", 5, 8), Err(Reject::Replayed));
        assert_eq!(g.accept("a", 5, 9), Ok(()));
        assert_eq!(g.accept("a", 5, 100), Ok(()));
        assert_eq!(g.accept("a", 5, 100 - WINDOW + 1), Ok(()));
        assert_eq!(
            g.accept("a", 5, 100 - WINDOW),
            Err(Reject::Replayed),
            "below the window"
        );
        assert_eq!(
            g.accept("a", 5, 36),
            Err(Reject::Replayed),
            "already accepted"
        );
        // An older epoch is a replay; a newer one (a restart) starts over.
        assert_eq!(g.accept("a", 4, 1000), Err(Reject::Replayed));
        assert_eq!(g.accept("a", 6, 1), Ok(()));
        assert_eq!(g.accept("a", 6, 1), Err(Reject::Replayed));
        assert_eq!(g.accept("a", 5, 101), Err(Reject::Replayed));
        // Bounded: past the bound a new sender is refused; windows are
        // never forgotten, so a departed node's datagrams stay replays.
        assert_eq!(g.accept("b", 1, 1), Ok(()));
        assert_eq!(g.accept("c", 1, 1), Err(Reject::Replayed));
        assert_eq!(g.accept("b", 1, 1), Err(Reject::Replayed));
    }
}
