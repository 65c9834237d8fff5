//! Framing a server's replies to meta commands.
//!
//! A meta reply is one line (`HD`, `NF`, `NS`, `EX`, `EN`, `MN`, `ME ...`,
//! or an error), except `VA <size> <flags>*`, which a data block of `size`
//! bytes and CRLF follows. A quiet request is forwarded with an `mn` behind
//! it on the same server connection, so its reply is whatever the server
//! chose to say (possibly nothing) up to and including that `MN`.

use crate::proto::{find_crlf, is_error_line, num, tokens, Garbled, Response};

/// How to frame the reply of one forwarded meta request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaReply {
    /// An `mn` follows the request: the reply runs up to its `MN`.
    pub quiet: bool,
    /// An `mg`: `VA` and `HD` count as hits.
    pub get: bool,
}

const NOOP: &[u8] = b"MN\r\n";

/// Frame one reply at the start of `buf`.
pub fn parse(buf: &[u8], kind: MetaReply) -> Result<Option<Response>, Garbled> {
    let mut pos = 0;
    let mut resp = Response {
        len: 0,
        values: 0,
        error: false,
    };
    loop {
        let Some((len, line_len)) = one(&buf[pos..])? else {
            return Ok(None);
        };
        let line = &buf[pos..pos + line_len];
        let noop = line == b"MN";
        if !(kind.quiet && noop) {
            resp.error |= is_error_line(line);
            if kind.get && (line.starts_with(b"VA ") || line.starts_with(b"HD")) {
                resp.values += 1;
            }
        }
        pos += len;
        if !kind.quiet || noop {
            resp.len = pos;
            return Ok(Some(resp));
        }
    }
}

/// One reply at the start of `buf`: (its length, the length of its first
/// line without CRLF).
fn one(buf: &[u8]) -> Result<Option<(usize, usize)>, Garbled> {
    let Some(eol) = find_crlf(buf) else {
        if buf.len() > crate::proto::MAX_LINE {
            return Err(Garbled);
        }
        return Ok(None);
    };
    let line = &buf[..eol];
    if !line.starts_with(b"VA ") {
        return Ok(Some((eol + 2, eol)));
    }
    let size = tokens(line)
        .nth(1)
        .and_then(|(s, e)| num::<usize>(&line[s..e]))
        .ok_or(Garbled)?;
    let end = eol + 2 + size + 2;
    if buf.len() < end {
        return Ok(None);
    }
    if &buf[end - 2..end] != b"\r\n" {
        return Err(Garbled);
    }
    Ok(Some((end, eol)))
}

/// What the client sees of a framed reply: a quiet request's reply without
/// the `MN` the proxy asked for. A reply the proxy made up itself (a
/// `SERVER_ERROR` for a failed server) has no `MN` and is shown whole.
pub fn shown(kind: MetaReply, bytes: &[u8]) -> &[u8] {
    if kind.quiet {
        bytes.strip_suffix(NOOP).unwrap_or(bytes)
    } else {
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: MetaReply = MetaReply {
        quiet: false,
        get: false,
    };
    const GET: MetaReply = MetaReply {
        quiet: false,
        get: true,
    };
    const QUIET_GET: MetaReply = MetaReply {
        quiet: true,
        get: true,
    };

    #[test]
    fn replies_frame() {
        let r = parse(b"HD O12 k\r\nNF\r\n", PLAIN).unwrap().unwrap();
        assert_eq!((r.len, r.error), (10, false));
        // a value may hold CRLF and "MN"; it is framed by its size
        let b = b"VA 6 f0 O1\r\nMN\r\n\r\n\r\nEN\r\n";
        let r = parse(b, GET).unwrap().unwrap();
        assert_eq!((r.len, r.values), (b.len() - 4, 1));
        assert_eq!(parse(b"VA 6 f0\r\nMN\r\n", GET), Ok(None));
        assert_eq!(parse(b"VA x\r\n", GET), Err(Garbled));
        assert_eq!(parse(b"VA 1\r\nab\r\n", GET), Err(Garbled));
        assert_eq!(parse(b"EN\r\n", GET).unwrap().unwrap().values, 0);
        let r = parse(b"CLIENT_ERROR bad command line format\r\n", PLAIN)
            .unwrap()
            .unwrap();
        assert!(r.error);
    }

    #[test]
    fn quiet_replies_run_to_the_noop() {
        // a quiet miss: nothing but the MN
        let r = parse(b"MN\r\nHD\r\n", QUIET_GET).unwrap().unwrap();
        assert_eq!((r.len, r.values), (4, 0));
        assert_eq!(shown(QUIET_GET, b"MN\r\n"), b"");
        // a quiet hit
        let b = b"VA 2 Oa\r\nMN\r\nMN\r\n";
        let r = parse(b, QUIET_GET).unwrap().unwrap();
        assert_eq!((r.len, r.values), (b.len(), 1));
        assert_eq!(shown(QUIET_GET, b), b"VA 2 Oa\r\nMN\r\n");
        assert_eq!(parse(b"VA 2 Oa\r\nMN\r\n", QUIET_GET), Ok(None));
        // errors are never quiet
        let r = parse(b"CLIENT_ERROR invalid flag\r\nMN\r\n", QUIET_GET)
            .unwrap()
            .unwrap();
        assert!(r.error);
        assert_eq!(
            shown(QUIET_GET, b"SERVER_ERROR Connection timed out\r\n"),
            b"SERVER_ERROR Connection timed out\r\n"
        );
    }
}
