//! Forwarding meta commands (`mg ms md ma mn me`).
//!
//! A meta request goes to the server of its key (the decoded key for a
//! base64 `b` key), on the same pipelined connection and in the same
//! client order as the classic commands, so a pipeline mixing both, over
//! several servers, is answered in request order. `mn` is answered by the
//! proxy in its place in that order: every reply before it has been written
//! when the client reads `MN`.
//!
//! Quiet mode (`q`) leaves out the nominal reply, and which replies are
//! nominal is the server's business (it differs between commands and
//! memcached versions). So a quiet request goes to the server with an `mn`
//! behind it, and its reply is whatever the server says before that `MN`:
//! nothing, a hit, or an error. The client never sees the `MN`.
//!
//! Requests that may change an item (`ms`, `md`, `ma`, `mg` with `T` or
//! `N`) pass through the cache invalidation like classic writes: before
//! they are forwarded and again when the reply arrives, and a failed
//! invalidation refuses the request with `SERVER_ERROR`.

use super::{push_local, push_local_owned, Client, Pending, Slot, Worker};
use crate::meta::{MetaCmd, MetaRequest};
use crate::proto::RespKind;
use crate::stats::inc;

const NOOP_REPLY: &[u8] = b"MN\r\n";
const NOOP_REQUEST: &[u8] = b"mn\r\n";

impl Worker {
    pub(super) fn dispatch_meta(&mut self, idx: u32, c: &mut Client, req: &[u8], m: &MetaRequest) {
        inc(&self.stats.requests, 1);
        if m.cmd == MetaCmd::Noop {
            push_local(c, NOOP_REPLY);
            return;
        }
        let seq = c.head_seq + c.slots.len() as u64;
        let key = m.stored_key(req);
        // A key memcached cannot decode is refused by whichever server gets
        // it, with the error memcached gives for the whole request.
        let srv = key.map_or(0, |k| self.dist.server_for_key(k));
        if m.cmd == MetaCmd::Get {
            inc(&self.stats.get_keys, 1);
        }
        let mut inval_key = None;
        if m.mutates {
            inc(&self.stats.writes, 1);
            if let (Some(inv), Some(k)) = (&self.inval, key) {
                inc(&self.stats.invalidations, 1);
                if let Err(e) = inv.key(k) {
                    inc(&self.stats.invalidation_failures, 1);
                    push_local_owned(
                        c,
                        format!("SERVER_ERROR cache invalidation failed: {e}\r\n"),
                    );
                    return;
                }
                inval_key = Some(k.to_vec().into_boxed_slice());
            }
        }
        c.slots.push_back(Slot::new(1));
        let p = Pending::new(idx, c.gen, seq, RespKind::Meta(m.reply())).invalidating(inval_key);
        if m.quiet {
            let mut bytes = std::mem::take(&mut self.scratch);
            bytes.clear();
            bytes.extend_from_slice(req);
            bytes.extend_from_slice(NOOP_REQUEST);
            self.send(srv, &bytes, p);
            self.scratch = bytes;
        } else {
            self.send(srv, req, p);
        }
    }
}
