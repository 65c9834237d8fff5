//! Sans-IO framing of memcached's meta commands: `mg ms md ma mn me`.
//!
//! The proxy needs three things from a meta request: the key that routes it
//! (base64-decoded, as memcached decodes it, when the request carries the
//! `b` flag), where the request ends (an `ms` carries a data block), and
//! whether it is quiet (`q`: memcached leaves out the nominal reply). It
//! checks the request only as far as memcached does before it would swallow
//! an `ms` data block, so that it consumes exactly the bytes memcached
//! would; every other check (flags, modes, opaque length, ...) is the
//! server's, which answers with memcached's own error.
//!
//! [`reply`] frames the server's replies.

mod base64;
pub mod reply;

pub use reply::MetaReply;

use crate::proto::{c_decimal, Parsed, BAD_FORMAT, ERROR, MAX_KEY, MAX_VALUE, TOO_LARGE};

/// memcached refuses meta requests of this many tokens or more
/// (`MFLAG_MAX_OPT_LENGTH`, counted with its terminating empty token).
const MAX_TOKENS: usize = 20;
const FLAGS_TOO_LONG: &[u8] = b"CLIENT_ERROR options flags too long\r\n";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaCmd {
    Get,
    Set,
    Delete,
    Arith,
    Noop,
    Debug,
}

impl MetaCmd {
    pub fn from_bytes(b: &[u8]) -> Option<MetaCmd> {
        Some(match b {
            b"mg" => MetaCmd::Get,
            b"ms" => MetaCmd::Set,
            b"md" => MetaCmd::Delete,
            b"ma" => MetaCmd::Arith,
            b"mn" => MetaCmd::Noop,
            b"me" => MetaCmd::Debug,
            _ => return None,
        })
    }
}

/// The key a meta request names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaKey {
    /// The key token as sent (a range of the parsed buffer).
    Plain((usize, usize)),
    /// A `b` key, decoded.
    Decoded(Vec<u8>),
    /// A `b` key memcached cannot decode: it refuses the request, whatever
    /// server gets it.
    Undecodable,
    /// `mn` names none.
    None,
}

/// A framed meta request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaRequest {
    pub cmd: MetaCmd,
    pub key: MetaKey,
    /// Bytes of the whole request (line, and an `ms` data block with its CRLF).
    pub len: usize,
    /// The `q` flag: memcached leaves out the nominal reply.
    pub quiet: bool,
    /// The request may change the item (`ms`, `md`, `ma`, and `mg` with a
    /// new TTL `T` or vivify-on-miss `N`): a cache must drop the key.
    pub mutates: bool,
}

impl MetaRequest {
    /// The key as memcached stores it (what routes the request), if any.
    pub fn stored_key<'a>(&'a self, buf: &'a [u8]) -> Option<&'a [u8]> {
        match &self.key {
            MetaKey::Plain((s, e)) => Some(&buf[*s..*e]),
            MetaKey::Decoded(k) => Some(k),
            MetaKey::Undecodable | MetaKey::None => None,
        }
    }

    /// How the server's reply is framed.
    pub fn reply(&self) -> MetaReply {
        MetaReply {
            quiet: self.quiet,
            get: self.cmd == MetaCmd::Get,
        }
    }
}

/// Frame the meta request whose line (without CRLF) is `line`, split into
/// `toks`, at the start of `buf`.
pub fn frame(
    buf: &[u8],
    line: &[u8],
    line_len: usize,
    toks: &[(usize, usize)],
    cmd: MetaCmd,
) -> Parsed {
    let bad = |reply| Parsed::Bad {
        skip: line_len,
        reply,
        close: false,
    };
    let request = |key, len, quiet, mutates| {
        Parsed::Meta(MetaRequest {
            cmd,
            key,
            len,
            quiet,
            mutates,
        })
    };
    if cmd == MetaCmd::Noop {
        return request(MetaKey::None, line_len, false, false);
    }
    let Some(&(ks, ke)) = toks.get(1) else {
        return bad(ERROR);
    };
    if ke - ks > MAX_KEY {
        return bad(BAD_FORMAT);
    }
    let first_flag = if cmd == MetaCmd::Set { 3 } else { 2 };
    let flags: Vec<&[u8]> = toks
        .iter()
        .skip(first_flag)
        .map(|&(s, e)| &line[s..e])
        .collect();
    let has = |c: u8| flags.iter().any(|f| f[0] == c);
    // `me` takes `b` only as its one flag, spelled alone.
    let base64 = if cmd == MetaCmd::Debug {
        flags.first() == Some(&&b"b"[..])
    } else {
        has(b'b')
    };
    let key = if base64 {
        base64::decode(&line[ks..ke]).map_or(MetaKey::Undecodable, MetaKey::Decoded)
    } else {
        MetaKey::Plain((ks, ke))
    };
    let quiet = cmd != MetaCmd::Debug && has(b'q');
    let mutates = match cmd {
        MetaCmd::Set | MetaCmd::Delete | MetaCmd::Arith => true,
        MetaCmd::Get => has(b'T') || has(b'N'),
        MetaCmd::Debug | MetaCmd::Noop => false,
    };
    if cmd != MetaCmd::Set {
        return request(key, line_len, quiet, mutates);
    }
    // ms <key> <datalen> <flags>*: memcached checks these before it
    // swallows the data block; on any later error it swallows it.
    if toks.len() == 2 {
        return bad(BAD_FORMAT);
    }
    if toks.len() >= MAX_TOKENS {
        return bad(FLAGS_TOO_LONG);
    }
    let Some(vlen) = strtol_as_i32(&line[toks[2].0..toks[2].1]) else {
        return bad(BAD_FORMAT);
    };
    if !(0..=i32::MAX - 2).contains(&vlen) {
        return bad(BAD_FORMAT);
    }
    let vlen = vlen as usize;
    let total = line_len + vlen + 2;
    if buf.len() < total {
        return Parsed::Incomplete;
    }
    if vlen > MAX_VALUE {
        return Parsed::Bad {
            skip: total,
            reply: TOO_LARGE,
            close: false,
        };
    }
    request(key, total, quiet, mutates)
}

/// memcached's `safe_strtol` as it reads an `ms` data length: C's `strtol`
/// in base 10 (leading white space, a sign, at least one digit, no
/// overflow of 64 bits), followed by the end or white space, and the
/// result cut to 32 bits as C's assignment to an `int32_t` cuts it.
fn strtol_as_i32(tok: &[u8]) -> Option<i32> {
    let (neg, digits) = c_decimal(tok)?;
    let mut v: i128 = 0;
    for &d in digits {
        v = v * 10 + i128::from(d - b'0');
        if v > i128::from(i64::MAX) + 1 {
            return None;
        }
    }
    let v = if neg { -v } else { v };
    let v = i64::try_from(v).ok()?;
    Some(v as i32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::parse_request;

    fn meta(b: &[u8]) -> MetaRequest {
        match parse_request(b) {
            Parsed::Meta(m) => m,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(b)),
        }
    }

    fn bad(b: &[u8]) -> (&'static [u8], usize) {
        match parse_request(b) {
            Parsed::Bad { reply, skip, close } => {
                assert!(!close);
                (reply, skip)
            }
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(b)),
        }
    }

    #[test]
    fn meta_requests_frame() {
        let b = b"mg foo v f t Oab q\r\nmn\r\n";
        let m = meta(b);
        assert_eq!(m.cmd, MetaCmd::Get);
        assert_eq!(m.stored_key(b), Some(&b"foo"[..]));
        assert_eq!((m.len, m.quiet, m.mutates), (20, true, false));
        assert!(m.reply().get);
        let b = b"ms foo 5 T30 F3 q\r\nhello\r\nmn\r\n";
        let m = meta(b);
        assert_eq!(
            (m.cmd, m.len, m.quiet, m.mutates),
            (MetaCmd::Set, 26, true, true)
        );
        assert_eq!(parse_request(b"ms foo 5 T30\r\nhel"), Parsed::Incomplete);
        let m = meta(b"mn\r\n");
        assert_eq!((m.cmd, m.key, m.len), (MetaCmd::Noop, MetaKey::None, 4));
        for (line, cmd, mutates) in [
            (&b"md foo q\r\n"[..], MetaCmd::Delete, true),
            (b"md foo I T30\r\n", MetaCmd::Delete, true),
            (b"ma foo N0 J13 MI D2\r\n", MetaCmd::Arith, true),
            (b"me foo\r\n", MetaCmd::Debug, false),
            (b"mg foo T30 v\r\n", MetaCmd::Get, true),
            (b"mg foo N30 s\r\n", MetaCmd::Get, true),
            (b"mg foo\r\n", MetaCmd::Get, false),
        ] {
            let m = meta(line);
            assert_eq!((m.cmd, m.mutates), (cmd, mutates), "{line:?}");
            assert_eq!(m.stored_key(line), Some(&b"foo"[..]));
        }
        // me is never quiet: memcached ignores its flags but `b`
        assert!(!meta(b"me foo q\r\n").quiet);
    }

    #[test]
    fn base64_keys_route_by_their_decoded_bytes() {
        let b = b"mg Zm9vYmFy b v\r\n";
        assert_eq!(meta(b).stored_key(b), Some(&b"foobar"[..]));
        let b = b"ms AAEC/w== 1 b\r\nx\r\n";
        assert_eq!(meta(b).stored_key(b), Some(&[0u8, 1, 2, 255][..]));
        let b = b"me Zm9v b\r\n";
        assert_eq!(meta(b).stored_key(b), Some(&b"foo"[..]));
        // me reads `b` only as its first flag
        let b = b"me Zm9v v b\r\n";
        assert_eq!(meta(b).stored_key(b), Some(&b"Zm9v"[..]));
        assert_eq!(meta(b"mg Zm9 b\r\n").key, MetaKey::Undecodable);
        // an undecodable ms still swallows its data block, as memcached does
        assert_eq!(meta(b"ms Zm9 2 b\r\nab\r\n").len, 16);
    }

    #[test]
    fn malformed_meta_requests_get_memcached_errors() {
        assert_eq!(bad(b"mg\r\n"), (ERROR, 4));
        assert_eq!(bad(b"ms\r\n"), (ERROR, 4));
        assert_eq!(bad(b"mx foo\r\n"), (ERROR, 8));
        let long = format!("mg {} v\r\n", "k".repeat(251));
        assert_eq!(bad(long.as_bytes()), (BAD_FORMAT, long.len()));
        let ok = format!("mg {} v\r\n", "k".repeat(250));
        assert_eq!(meta(ok.as_bytes()).cmd, MetaCmd::Get);
        // ms errors before the data length is known swallow nothing
        assert_eq!(bad(b"ms foo\r\nab\r\n"), (BAD_FORMAT, 8));
        assert_eq!(bad(b"ms foo x\r\nab\r\n"), (BAD_FORMAT, 10));
        assert_eq!(bad(b"ms foo -1\r\nab\r\n"), (BAD_FORMAT, 11));
        assert_eq!(bad(b"ms foo 2x\r\nab\r\n"), (BAD_FORMAT, 11));
        let many = format!("ms foo 2{}\r\nab\r\n", " O1".repeat(17));
        assert_eq!(bad(many.as_bytes()), (FLAGS_TOO_LONG, many.len() - 4));
        let fewer = format!("ms foo 2{}\r\nab\r\n", " O1".repeat(16));
        assert_eq!(meta(fewer.as_bytes()).len, fewer.len());
        // too large: swallowed once it is all here
        let big = format!("ms foo {}\r\n", MAX_VALUE + 1);
        let mut v = big.into_bytes();
        v.resize(v.len() + MAX_VALUE + 3, b'a');
        assert_eq!(bad(&v), (TOO_LARGE, v.len()));
    }

    #[test]
    fn data_lengths_read_as_memcached_reads_them() {
        assert_eq!(strtol_as_i32(b"5"), Some(5));
        assert_eq!(strtol_as_i32(b"+5"), Some(5));
        assert_eq!(strtol_as_i32(b"\t5"), Some(5));
        assert_eq!(strtol_as_i32(b"-5"), Some(-5));
        // 2^32 + 3 is cut to 3
        assert_eq!(strtol_as_i32(b"4294967299"), Some(3));
        assert_eq!(strtol_as_i32(b"99999999999999999999"), None);
        assert_eq!(strtol_as_i32(b"5x"), None);
        assert_eq!(strtol_as_i32(b""), None);
        assert_eq!(strtol_as_i32(b"-"), None);
    }
}
