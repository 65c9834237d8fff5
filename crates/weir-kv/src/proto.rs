//! Sans-IO memcached ASCII protocol: request and response framing.
//!
//! [`parse_request`] frames one request at the start of a buffer and
//! returns byte ranges into it (no copies). [`parse_response`] frames one
//! server reply of a given [`RespKind`]. Meta commands are framed by
//! `meta`, which this module hands their lines to.

use crate::meta::{self, MetaCmd, MetaReply, MetaRequest};

/// memcached's key length limit.
pub const MAX_KEY: usize = 250;
/// Longest request line accepted (memcached uses 2048 for its key lines,
/// multi-key gets may be longer).
pub const MAX_LINE: usize = 64 * 1024;
/// Largest value accepted in a storage command (memcached's default item size).
pub const MAX_VALUE: usize = 1024 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmd {
    Get,
    Gets,
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
    Delete,
    Incr,
    Decr,
    Touch,
    FlushAll,
    Version,
    Verbosity,
    Quit,
}

impl Cmd {
    fn from_bytes(b: &[u8]) -> Option<Cmd> {
        Some(match b {
            b"get" => Cmd::Get,
            b"gets" => Cmd::Gets,
            b"set" => Cmd::Set,
            b"add" => Cmd::Add,
            b"replace" => Cmd::Replace,
            b"append" => Cmd::Append,
            b"prepend" => Cmd::Prepend,
            b"cas" => Cmd::Cas,
            b"delete" => Cmd::Delete,
            b"incr" => Cmd::Incr,
            b"decr" => Cmd::Decr,
            b"touch" => Cmd::Touch,
            b"flush_all" => Cmd::FlushAll,
            b"version" => Cmd::Version,
            b"verbosity" => Cmd::Verbosity,
            b"quit" => Cmd::Quit,
            _ => return None,
        })
    }
}

/// A framed request; ranges index the parsed buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub cmd: Cmd,
    /// Key ranges (one for single-key commands).
    pub keys: Vec<(usize, usize)>,
    /// Bytes of the whole request (line, and data block with its CRLF).
    pub len: usize,
    /// Bytes of the command line including CRLF.
    pub line_len: usize,
    /// Range of the ` noreply` token (with its leading space) if present.
    pub noreply: Option<(usize, usize)>,
}

/// Outcome of framing the start of a buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Need more bytes.
    Incomplete,
    Request(Request),
    /// A meta command (`mg ms md ma mn me`).
    Meta(MetaRequest),
    /// A bad request: answer `reply` (empty when the request said
    /// `noreply` and memcached would stay silent), drop `skip` bytes, and
    /// close the connection if `close`.
    Bad {
        skip: usize,
        reply: &'static [u8],
        close: bool,
    },
}

pub const ERROR: &[u8] = b"ERROR\r\n";
pub const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
pub const BAD_CHUNK: &[u8] = b"CLIENT_ERROR bad data chunk\r\n";
pub const LINE_TOO_LONG: &[u8] = b"CLIENT_ERROR line too long\r\n";
pub const TOO_LARGE: &[u8] = b"SERVER_ERROR object too large for cache\r\n";

pub(crate) fn find_crlf(b: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = b[from..].iter().position(|&c| c == b'\n') {
        let i = from + i;
        if i > 0 && b[i - 1] == b'\r' {
            return Some(i - 1);
        }
        from = i + 1;
    }
    None
}

/// The end of a request line as memcached finds it: the first LF, with a CR
/// before it left out of the line. Returns (line length without the end,
/// with it).
fn find_request_line(b: &[u8]) -> Option<(usize, usize)> {
    let lf = b.iter().position(|&c| c == b'\n')?;
    let end = if lf > 0 && b[lf - 1] == b'\r' {
        lf - 1
    } else {
        lf
    };
    Some((end, lf + 1))
}

pub(crate) fn tokens(line: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < line.len() && line[i] == b' ' {
            i += 1;
        }
        if i >= line.len() {
            return None;
        }
        let s = i;
        while i < line.len() && line[i] != b' ' {
            i += 1;
        }
        Some((s, i))
    })
}

pub(crate) fn num<T: std::str::FromStr>(b: &[u8]) -> Option<T> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// Frame one request at the start of `buf`.
pub fn parse_request(buf: &[u8]) -> Parsed {
    let Some((eol, line_len)) = find_request_line(buf) else {
        if buf.len() > MAX_LINE {
            return Parsed::Bad {
                skip: buf.len(),
                reply: LINE_TOO_LONG,
                close: true,
            };
        }
        return Parsed::Incomplete;
    };
    let line = &buf[..eol];
    let toks: Vec<(usize, usize)> = tokens(line).collect();
    let bad = |reply| Parsed::Bad {
        skip: line_len,
        reply,
        close: false,
    };
    let Some(&(cs, ce)) = toks.first() else {
        return bad(ERROR);
    };
    if let Some(m) = MetaCmd::from_bytes(&line[cs..ce]) {
        return meta::frame(buf, line, line_len, &toks, m);
    }
    let Some(cmd) = Cmd::from_bytes(&line[cs..ce]) else {
        return bad(ERROR);
    };
    let args = &toks[1..];
    let key_ok = |&(s, e): &(usize, usize)| e - s <= MAX_KEY;
    let mut noreply = None;
    let last_is_noreply = args.last().is_some_and(|&(s, e)| &line[s..e] == b"noreply");
    let nr = |args: &[(usize, usize)]| {
        let (s, e) = *args.last().unwrap();
        // include the space before the token
        let mut s2 = s;
        while s2 > 0 && line[s2 - 1] == b' ' {
            s2 -= 1;
        }
        let _ = e;
        Some((s2, line.len()))
    };
    let req = |cmd, keys: Vec<(usize, usize)>, len, noreply| {
        Parsed::Request(Request {
            cmd,
            keys,
            len,
            line_len,
            noreply,
        })
    };
    match cmd {
        Cmd::Get | Cmd::Gets => {
            if args.is_empty() {
                return bad(ERROR);
            }
            if !args.iter().all(key_ok) {
                return bad(BAD_FORMAT);
            }
            req(cmd, args.to_vec(), line_len, None)
        }
        Cmd::Set | Cmd::Add | Cmd::Replace | Cmd::Append | Cmd::Prepend | Cmd::Cas => {
            let base = if cmd == Cmd::Cas { 5 } else { 4 };
            let n = args.len();
            let has_nr = n == base + 1 && last_is_noreply;
            if n != base && !has_nr {
                return bad(ERROR);
            }
            let field = |i: usize| &line[args[i].0..args[i].1];
            let Some(bytes) = num::<usize>(field(3)) else {
                return bad(BAD_FORMAT);
            };
            if num::<u32>(field(1)).is_none()
                || num::<i64>(field(2)).is_none()
                || (cmd == Cmd::Cas && num::<u64>(field(4)).is_none())
            {
                return bad(BAD_FORMAT);
            }
            let total = line_len + bytes + 2;
            if !key_ok(&args[0]) {
                return Parsed::Bad {
                    skip: line_len,
                    reply: BAD_FORMAT,
                    close: false,
                };
            }
            if bytes > MAX_VALUE {
                // memcached swallows the data block; so do we, once it is here
                if buf.len() < total {
                    return Parsed::Incomplete;
                }
                return Parsed::Bad {
                    skip: total,
                    reply: TOO_LARGE,
                    close: false,
                };
            }
            if buf.len() < total {
                return Parsed::Incomplete;
            }
            if &buf[total - 2..total] != b"\r\n" {
                return Parsed::Bad {
                    skip: total,
                    reply: BAD_CHUNK,
                    close: false,
                };
            }
            if has_nr {
                noreply = nr(args);
            }
            req(cmd, vec![args[0]], total, noreply)
        }
        Cmd::Delete => {
            // delete <key> [0] [noreply]
            let mut n = args.len();
            if last_is_noreply {
                n -= 1;
                noreply = nr(args);
            }
            if n == 0 || n > 2 || (n == 2 && &line[args[1].0..args[1].1] != b"0") {
                return bad(BAD_FORMAT);
            }
            if !key_ok(&args[0]) {
                return bad(BAD_FORMAT);
            }
            req(cmd, vec![args[0]], line_len, noreply)
        }
        Cmd::Incr | Cmd::Decr | Cmd::Touch => {
            let mut n = args.len();
            if last_is_noreply {
                n -= 1;
                noreply = nr(args);
            }
            if n != 2 {
                return bad(ERROR);
            }
            if !key_ok(&args[0]) {
                return bad(BAD_FORMAT);
            }
            let arg = &line[args[1].0..args[1].1];
            let ok = if cmd == Cmd::Touch {
                num::<i64>(arg).is_some()
            } else {
                num::<u64>(arg).is_some()
            };
            if !ok {
                return bad(if cmd == Cmd::Touch {
                    BAD_FORMAT
                } else {
                    b"CLIENT_ERROR invalid numeric delta argument\r\n"
                });
            }
            req(cmd, vec![args[0]], line_len, noreply)
        }
        Cmd::FlushAll => {
            let mut n = args.len();
            if last_is_noreply {
                n -= 1;
                noreply = nr(args);
            }
            if n > 1 || (n == 1 && num::<i64>(&line[args[0].0..args[0].1]).is_none()) {
                return bad(BAD_FORMAT);
            }
            req(cmd, vec![], line_len, noreply)
        }
        Cmd::Verbosity => {
            // As memcached 1.6: `verbosity <level> [<anything>]`, where a last
            // `noreply` silences the answer, an error's too.
            if args.is_empty() || args.len() > 2 {
                return bad(ERROR);
            }
            if last_is_noreply {
                noreply = nr(args);
            }
            if !strtoul_ok(&line[args[0].0..args[0].1]) {
                return bad(if noreply.is_some() { b"" } else { BAD_FORMAT });
            }
            req(cmd, vec![], line_len, noreply)
        }
        Cmd::Version | Cmd::Quit => req(cmd, vec![], line_len, None),
    }
}

/// Whether memcached's `safe_strtoul` takes `tok`: C's `strtoul` in base 10
/// (leading white space, a sign, at least one digit, no overflow of 64
/// bits) followed by the end or white space, and a '-' only where the
/// wrapped value stays below 2^63.
fn strtoul_ok(tok: &[u8]) -> bool {
    let Some((neg, digits)) = c_decimal(tok) else {
        return false;
    };
    match num::<u64>(digits) {
        None => false,
        Some(v) => !neg || (v.wrapping_neg() as i64) >= 0,
    }
}

/// A decimal number as C's `strtol`/`strtoul` take it before converting:
/// leading white space, an optional sign, at least one digit, then the end
/// or white space (memcached's `safe_strto*` refuse anything else). Gives
/// whether it is negative and its digits.
pub(crate) fn c_decimal(tok: &[u8]) -> Option<(bool, &[u8])> {
    let space = |c: &u8| c.is_ascii_whitespace() || *c == 0x0b;
    let tok = &tok[tok.iter().take_while(|c| space(c)).count()..];
    let (neg, rest) = match tok.first() {
        Some(b'-') => (true, &tok[1..]),
        Some(b'+') => (false, &tok[1..]),
        _ => (false, tok),
    };
    let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 || rest.get(digits).is_some_and(|c| !space(c)) {
        return None;
    }
    Some((neg, &rest[..digits]))
}

/// What kind of reply a forwarded request gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RespKind {
    /// `VALUE ...` blocks then `END`.
    Retrieval,
    /// One line.
    Line,
    /// A meta command's reply.
    Meta(MetaReply),
}

/// A framed reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response {
    pub len: usize,
    /// `VALUE` blocks in a retrieval reply; 1 for an `mg` hit (`VA`, `HD`).
    pub values: u32,
    /// The reply is an `ERROR`, `CLIENT_ERROR` or `SERVER_ERROR` line.
    pub error: bool,
}

/// Why a server's bytes cannot be framed: the connection must be dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Garbled;

pub(crate) fn is_error_line(l: &[u8]) -> bool {
    l.starts_with(b"ERROR") || l.starts_with(b"CLIENT_ERROR") || l.starts_with(b"SERVER_ERROR")
}

/// Parse `VALUE <key> <flags> <bytes> [<cas>]`: (key range, total block len).
pub fn value_header(line: &[u8]) -> Option<((usize, usize), usize)> {
    let mut t = tokens(line);
    let (verb, key, _flags, bytes) = (t.next()?, t.next()?, t.next()?, t.next()?);
    let _cas = t.next();
    if t.next().is_some() || &line[verb.0..verb.1] != b"VALUE" {
        return None;
    }
    let bytes: usize = num(&line[bytes.0..bytes.1])?;
    Some((key, bytes))
}

/// Frame one reply of `kind` at the start of `buf`.
pub fn parse_response(buf: &[u8], kind: RespKind) -> Result<Option<Response>, Garbled> {
    if let RespKind::Meta(m) = kind {
        return meta::reply::parse(buf, m);
    }
    let mut pos = 0;
    let mut values = 0;
    loop {
        let Some(eol) = find_crlf(&buf[pos..]) else {
            if buf.len() - pos > MAX_LINE {
                return Err(Garbled);
            }
            return Ok(None);
        };
        let line = &buf[pos..pos + eol];
        let next = pos + eol + 2;
        if kind == RespKind::Line || is_error_line(line) {
            if values > 0 && is_error_line(line) {
                return Err(Garbled);
            }
            return Ok(Some(Response {
                len: next,
                values: 0,
                error: is_error_line(line),
            }));
        }
        if line == b"END" {
            return Ok(Some(Response {
                len: next,
                values,
                error: false,
            }));
        }
        let Some((_, bytes)) = value_header(line) else {
            return Err(Garbled);
        };
        let end = next + bytes + 2;
        if buf.len() < end {
            return Ok(None);
        }
        if &buf[end - 2..end] != b"\r\n" {
            return Err(Garbled);
        }
        values += 1;
        pos = end;
    }
}

/// A retrieval reply cut inside the data of one of its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CutValue {
    /// Where the cut value's data starts.
    pub data_start: usize,
    /// The value's length (without its CRLF).
    pub bytes: usize,
    /// Whole `VALUE` blocks before it.
    pub values_before: u32,
}

/// Where the start of a retrieval reply in `buf` is cut inside a value's
/// data: None if the reply is whole, or cut elsewhere (in a line, or in a
/// value's closing CRLF), or not a retrieval reply.
pub fn cut_value(buf: &[u8]) -> Option<CutValue> {
    let mut pos = 0;
    let mut values_before = 0;
    loop {
        let eol = find_crlf(&buf[pos..])?;
        let (_, bytes) = value_header(&buf[pos..pos + eol])?;
        let data_start = pos + eol + 2;
        if buf.len() < data_start + bytes {
            return Some(CutValue {
                data_start,
                bytes,
                values_before,
            });
        }
        values_before += 1;
        pos = data_start + bytes + 2;
        if buf.len() < pos {
            return None;
        }
    }
}

/// Frame what follows a value's data in a retrieval reply: the data's CRLF,
/// then the reply's other `VALUE` blocks and its `END` (the length counts
/// the CRLF; `values` the blocks after it).
pub fn parse_value_tail(buf: &[u8]) -> Result<Option<Response>, Garbled> {
    if buf.len() < 2 {
        return Ok(None);
    }
    if &buf[..2] != b"\r\n" {
        return Err(Garbled);
    }
    match parse_response(&buf[2..], RespKind::Retrieval)? {
        None => Ok(None),
        // an error line cannot follow a value
        Some(r) if r.error => Err(Garbled),
        Some(r) => Ok(Some(Response {
            len: r.len + 2,
            ..r
        })),
    }
}

/// Split a retrieval reply (without its `END`) into `VALUE` blocks:
/// (key range, block range), ranges into `resp`.
pub fn value_blocks(resp: &[u8]) -> Vec<((usize, usize), (usize, usize))> {
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(eol) = find_crlf(&resp[pos..]) {
        let line = &resp[pos..pos + eol];
        let Some(((ks, ke), bytes)) = value_header(line) else {
            break;
        };
        let end = pos + eol + 2 + bytes + 2;
        out.push(((pos + ks, pos + ke), (pos, end)));
        pos = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(b: &[u8]) -> Request {
        match parse_request(b) {
            Parsed::Request(r) => r,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(b)),
        }
    }

    fn bad(b: &[u8]) -> &'static [u8] {
        match parse_request(b) {
            Parsed::Bad { reply, .. } => reply,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(b)),
        }
    }

    #[test]
    fn requests_frame() {
        let b = b"get a bb ccc\r\nrest";
        let r = req(b);
        assert_eq!(r.cmd, Cmd::Get);
        let keys: Vec<&[u8]> = r.keys.iter().map(|&(s, e)| &b[s..e]).collect();
        assert_eq!(keys, vec![&b"a"[..], b"bb", b"ccc"]);
        assert_eq!(r.len, 14);

        let b = b"set k 1 0 5\r\nhello\r\nget k\r\n";
        let r = req(b);
        assert_eq!(
            (r.cmd, r.len, r.line_len, r.noreply),
            (Cmd::Set, 20, 13, None)
        );

        let b = b"cas k 0 0 1 99 noreply\r\nx\r\n";
        let r = req(b);
        assert_eq!(r.cmd, Cmd::Cas);
        let (s, e) = r.noreply.unwrap();
        assert_eq!(&b[s..e], b" noreply");

        for (line, cmd) in [
            (&b"delete k\r\n"[..], Cmd::Delete),
            (b"delete k 0 noreply\r\n", Cmd::Delete),
            (b"incr k 5\r\n", Cmd::Incr),
            (b"decr k 5 noreply\r\n", Cmd::Decr),
            (b"touch k 10\r\n", Cmd::Touch),
            (b"flush_all\r\n", Cmd::FlushAll),
            (b"flush_all 10 noreply\r\n", Cmd::FlushAll),
            (b"version\r\n", Cmd::Version),
            (b"quit\r\n", Cmd::Quit),
            (b"gets a b\r\n", Cmd::Gets),
        ] {
            assert_eq!(req(line).cmd, cmd, "{:?}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn a_bare_lf_ends_a_request_line_as_in_memcached() {
        assert_eq!(bad(b" \nget a\r\n"), ERROR);
        let b = b"get a\nget b\r\n";
        let r = req(b);
        assert_eq!((r.len, r.line_len, r.keys.clone()), (6, 6, vec![(4, 5)]));
        let b = b"set k 0 0 2\nab\r\n";
        assert_eq!((req(b).cmd, req(b).len), (Cmd::Set, b.len()));
        let b = b"mg k v\nmn\n";
        match parse_request(b) {
            Parsed::Meta(m) => assert_eq!(m.len, 7),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn incomplete_and_bad() {
        assert_eq!(parse_request(b"get a"), Parsed::Incomplete);
        assert_eq!(parse_request(b"set k 0 0 5\r\nhel"), Parsed::Incomplete);
        assert_eq!(bad(b"bogus\r\n"), ERROR);
        assert_eq!(bad(b"\r\n"), ERROR);
        assert_eq!(bad(b"get\r\n"), ERROR);
        let long = format!("get {}\r\n", "k".repeat(251));
        assert_eq!(bad(long.as_bytes()), BAD_FORMAT);
        let ok = format!("get {}\r\n", "k".repeat(250));
        assert_eq!(req(ok.as_bytes()).cmd, Cmd::Get);
        assert_eq!(bad(b"set k 0 0 x\r\n"), BAD_FORMAT);
        assert_eq!(bad(b"set k 0 0 2\r\nabc\r\n"), BAD_CHUNK);
        assert_eq!(bad(b"set k 0 0\r\n"), ERROR);
        assert_eq!(
            bad(b"incr k x\r\n"),
            b"CLIENT_ERROR invalid numeric delta argument\r\n"
        );
        let big = format!("set k 0 0 {}\r\n", MAX_VALUE + 1);
        let mut v = big.into_bytes();
        let head = v.len();
        v.resize(head + MAX_VALUE + 3, b'a');
        let n = v.len();
        v[n - 2..].copy_from_slice(b"\r\n");
        match parse_request(&v) {
            Parsed::Bad { skip, reply, .. } => {
                assert_eq!(reply, TOO_LARGE);
                assert_eq!(skip, n);
            }
            o => panic!("{o:?}"),
        }
        match parse_request(&vec![b'a'; MAX_LINE + 1]) {
            Parsed::Bad { close, .. } => assert!(close),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn verbosity_is_framed_as_memcached_does() {
        // What memcached 1.6.18 answers, checked against the binary in
        // tests/proxy_e2e.rs: (request, Some(reply) or None for a request).
        let silent: &[u8] = b"";
        for (line, want) in [
            (&b"verbosity\r\n"[..], Some(ERROR)),
            (b"verbosity 1 2 3\r\n", Some(ERROR)),
            (b"verbosity 1 2 noreply\r\n", Some(ERROR)),
            (b"verbosity junk\r\n", Some(BAD_FORMAT)),
            (b"verbosity -1\r\n", Some(BAD_FORMAT)),
            (b"verbosity 0x1\r\n", Some(BAD_FORMAT)),
            (b"verbosity +\r\n", Some(BAD_FORMAT)),
            (b"verbosity 99999999999999999999\r\n", Some(BAD_FORMAT)),
            (b"verbosity junk noreply\r\n", Some(silent)),
            (b"verbosity noreply\r\n", Some(silent)),
            (b"verbosity 1\r\n", None),
            (b"verbosity +2 junk\r\n", None),
            (b"verbosity -0\r\n", None),
            (b"verbosity 4294967296\r\n", None),
            (b"verbosity 1 noreply\r\n", None),
        ] {
            let what = String::from_utf8_lossy(line);
            match (parse_request(line), want) {
                (Parsed::Bad { reply, skip, close }, Some(w)) => {
                    assert_eq!((reply, skip, close), (w, line.len(), false), "{what}")
                }
                (Parsed::Request(r), None) => {
                    assert_eq!((r.cmd, r.len), (Cmd::Verbosity, line.len()), "{what}");
                    let nr = r.noreply.map(|(s, e)| &line[s..e]);
                    let want_nr = what.contains("noreply").then_some(&b" noreply"[..]);
                    assert_eq!(nr, want_nr, "{what}");
                }
                (got, want) => panic!("{what}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_reply_cut_in_a_value_says_where_the_value_starts() {
        let r = b"VALUE a 0 3\r\nabc\r\nVALUE b 1 10 77\r\nxyz";
        let cut = cut_value(r).unwrap();
        assert_eq!(&r[cut.data_start..], b"xyz");
        assert_eq!((cut.bytes, cut.values_before), (10, 1));
        assert_eq!(cut_value(b"VALUE a 0 3\r\nab").unwrap().values_before, 0);
        // whole, or cut in a line or in the value's CRLF: not in a value
        assert_eq!(cut_value(b"VALUE a 0 3\r\nabc\r\nEND\r\n"), None);
        assert_eq!(cut_value(b"VALUE a 0 3\r\nabc\r"), None);
        assert_eq!(cut_value(b"VALUE a 0 3\r\nabc\r\nVALU"), None);
        assert_eq!(cut_value(b"VALUE a 0 3"), None);
        assert_eq!(cut_value(b"SERVER_ERROR x\r\n"), None);
    }

    #[test]
    fn a_value_tail_frames_the_rest_of_its_reply() {
        let t = parse_value_tail(b"\r\nVALUE b 0 1\r\nx\r\nEND\r\nSTORED\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((t.len, t.values, t.error), (23, 1, false));
        assert_eq!(parse_value_tail(b"\r\nEND\r\n").unwrap().unwrap().len, 7);
        assert_eq!(parse_value_tail(b"\r\nEN"), Ok(None));
        assert_eq!(parse_value_tail(b"\r"), Ok(None));
        assert_eq!(parse_value_tail(b"xx"), Err(Garbled));
        assert_eq!(parse_value_tail(b"\r\nSERVER_ERROR x\r\n"), Err(Garbled));
    }

    #[test]
    fn responses_frame() {
        let r = b"VALUE a 0 3\r\nabc\r\nVALUE b 1 2 77\r\nxy\r\nEND\r\nSTORED\r\n";
        let f = parse_response(r, RespKind::Retrieval).unwrap().unwrap();
        assert_eq!((f.len, f.values, f.error), (r.len() - 8, 2, false));
        let blocks = value_blocks(&r[..f.len - 5]);
        assert_eq!(blocks.len(), 2);
        assert_eq!(&r[blocks[1].0 .0..blocks[1].0 .1], b"b");
        assert_eq!(
            parse_response(b"VALUE a 0 3\r\nab", RespKind::Retrieval),
            Ok(None)
        );
        let f = parse_response(b"SERVER_ERROR out of memory\r\n", RespKind::Retrieval)
            .unwrap()
            .unwrap();
        assert!(f.error);
        let f = parse_response(b"STORED\r\n", RespKind::Line)
            .unwrap()
            .unwrap();
        assert_eq!(f.len, 8);
        assert_eq!(
            parse_response(b"garbage\r\n", RespKind::Retrieval),
            Err(Garbled)
        );
        // a value containing CRLF is framed by its length
        let r = b"VALUE a 0 4\r\n\r\n\r\n\r\nEND\r\n";
        let f = parse_response(r, RespKind::Retrieval).unwrap().unwrap();
        assert_eq!(f.len, r.len());
    }
}
