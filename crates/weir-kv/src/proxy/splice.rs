//! Large values moved from the server socket to the client socket in the
//! kernel, through a pipe (splice(2)), instead of being copied into the
//! proxy and out again.
//!
//! When a `get`/`gets` reply is cut inside a value of at least
//! [`SPLICE_MIN`] bytes, with [`LEFT_MIN`] of them still to come, and the
//! reply is not part of a multi-key get split over servers, the rest of the
//! value goes from the server socket into a pipe. The client gets nothing
//! of the reply until all of it is framed: the header and the value's start that
//! were read already, the pipe, then the rest of the reply (the value's
//! CRLF, any further values, `END`). So a server that fails mid-value gives
//! the client `SERVER_ERROR`, as on the copying path, never a short value.
//!
//! The pipe then belongs to the client's reply: a reply that waits behind
//! replies from other servers keeps its pipe in its place in the client's
//! order, and once every reply before it is written, the pipe's bytes are
//! written between the client's buffered bytes as the socket takes them.
//! A client that stops reading keeps its values in their pipes (at most
//! [`PIPES_PER_CLIENT`]; later values are copied, and backpressure counts
//! piped bytes as buffered ones); the server connection goes on with the
//! next reply, so no one else waits for it.
//!
//! A pipe holds its size in bytes only if the pages it refers to are full.
//! If it fills before the value is in, the value is read back from it and
//! the reply takes the copying path.
//!
//! Once a reply was spliced, the server connection reads a small chunk
//! first, so that the next value is mostly still in the socket when its
//! header is framed.

use std::io;

use weir_sys::{unread_bytes, SplicePipe};

use super::{errmsg, Client, Worker, READ_CHUNK};
use crate::proto::{self, RespKind, Response};
use crate::stats::{inc, WorkerStats};

/// Smaller values are copied. A spliced value costs the client a write of
/// its own and the server a small read and splices; measured on loopback,
/// that costs more than copying 11 KB values and less than copying 100 KB.
pub(super) const SPLICE_MIN: usize = 32 * 1024;
/// ... and so are values with less than this still to come.
const LEFT_MIN: usize = 16 * 1024;
/// The read after a spliced reply: the end of that reply and the next
/// reply's header line (a 250-byte key and its numbers).
pub(super) const HEADER_READ: usize = 512;
/// What a pipe should hold (`/proc/sys/fs/pipe-max-size` by default).
const PIPE_BYTES: usize = 1 << 20;
/// Empty pipes a worker keeps for the next values.
const IDLE_PIPES: usize = 8;
/// Values a client may have in pipes at once (two descriptors each).
pub(super) const PIPES_PER_CLIENT: usize = 8;

/// A value on its way from a server socket into a pipe.
pub(super) struct Inbound {
    pipe: SplicePipe,
    /// The reply's bytes before the pipe's: its header line(s), the whole
    /// values before the cut one, and the cut value's first bytes.
    head: Vec<u8>,
    /// Value bytes still to move from the socket into the pipe.
    left: usize,
    /// Value bytes in the pipe.
    in_pipe: usize,
    values_before: u32,
}

impl Inbound {
    /// Whether value bytes are still to move into the pipe (the socket is
    /// spliced, not read, until they are).
    pub(super) fn filling(&self) -> bool {
        self.left > 0
    }
}

/// A value in a pipe, owed to a client.
pub(super) struct Outbound {
    pipe: SplicePipe,
    /// Bytes still in the pipe.
    pub(super) len: usize,
    /// Where they go among the client's buffered bytes: after `wbuf[..at]`.
    pub(super) at: usize,
}

/// How moving a value into its pipe went.
pub(super) enum Fill {
    /// The value is in the pipe (or, if the pipe filled, back in the read
    /// buffer): read the rest of the reply.
    Done,
    /// The socket has no more now; its next event continues.
    Wait,
    /// The server connection failed (its requests were answered).
    Failed,
}

impl Worker {
    /// Start splicing the value that `reply` (the start of the front
    /// reply of server `s`, not whole) is cut in, if that is safe and
    /// pays. True if it started: the server connection then owns `reply`'s
    /// bytes.
    pub(super) fn start_splice(&mut self, s: usize, reply: &[u8]) -> bool {
        // cut elsewhere (in a header line, say): the next read decides
        let Some(cut) = proto::cut_value(reply).filter(|c| c.bytes >= SPLICE_MIN) else {
            return false;
        };
        let started = self.try_start_splice(s, reply, cut);
        // a large value that is copied is read in full chunks; the next
        // reply's start is read small again (`after_reply`)
        self.servers[s].small_reads = started;
        started
    }

    fn try_start_splice(&mut self, s: usize, reply: &[u8], cut: proto::CutValue) -> bool {
        let left = cut.bytes - (reply.len() - cut.data_start);
        if left < LEFT_MIN {
            return false;
        }
        let Some(p) = self.servers[s].inflight.front() else {
            return false;
        };
        if p.frag != 0 || p.swallow {
            return false;
        }
        let whole_reply = self
            .clients
            .get(p.client as usize)
            .and_then(|c| c.as_ref())
            .filter(|c| c.gen == p.gen && p.seq >= c.head_seq)
            .is_some_and(|c| {
                let held = c.slots.iter().filter(|slot| slot.pipe.is_some()).count();
                c.outbound.len() + held < PIPES_PER_CLIENT
                    && c.slots
                        .get((p.seq - c.head_seq) as usize)
                        .is_some_and(|slot| slot.split.is_none())
            });
        if !whole_reply {
            return false;
        }
        let Some(pipe) = self
            .pipes
            .pop()
            .or_else(|| SplicePipe::new(PIPE_BYTES).ok())
        else {
            return false;
        };
        if left > pipe.capacity() {
            self.pipes.push(pipe);
            return false;
        }
        self.servers[s].inbound = Some(Inbound {
            pipe,
            head: reply.to_vec(),
            left,
            in_pipe: 0,
            values_before: cut.values_before,
        });
        true
    }

    /// Move what server `s` has of its spliced value into the pipe.
    pub(super) fn fill(&mut self, s: usize) -> Fill {
        loop {
            let sc = &mut self.servers[s];
            let (Some(sock), Some(inb)) = (sc.sock.as_ref(), sc.inbound.as_mut()) else {
                return Fill::Failed;
            };
            inc(&self.stats.socket_reads, 1);
            match inb.pipe.fill_from(sock, inb.left) {
                Ok(0) => {
                    self.fail_server(s, "Connection closed by server");
                    return Fill::Failed;
                }
                Ok(n) => {
                    inb.left -= n;
                    inb.in_pipe += n;
                    sc.connected = true;
                    self.health.answered(s);
                    if inb.left == 0 {
                        return Fill::Done;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Either the socket is empty, or the pipe is full: its
                    // pages are not full, and it holds less than its size.
                    if inb.in_pipe > 0 && unread_bytes(sock).is_ok_and(|n| n > 0) {
                        return match self.unsplice(s) {
                            Ok(()) => Fill::Done,
                            Err(e) => {
                                self.fail_server(s, &errmsg(&e));
                                Fill::Failed
                            }
                        };
                    }
                    inc(&self.stats.idle_reads, 1);
                    return Fill::Wait;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let m = errmsg(&e);
                    self.fail_server(s, &m);
                    return Fill::Failed;
                }
            }
        }
    }

    /// Put a value whose pipe filled back into the read buffer, and let its
    /// reply take the copying path.
    fn unsplice(&mut self, s: usize) -> io::Result<()> {
        let sc = &mut self.servers[s];
        let inb = sc.inbound.take().expect("unsplice of a spliced value");
        let mut bytes = inb.head;
        let mut have = bytes.len();
        bytes.resize(have + inb.in_pipe, 0);
        while have < bytes.len() {
            match inb.pipe.read_back(&mut bytes[have..]) {
                Ok(0) => return Err(io::Error::other("splice pipe came back short")),
                Ok(n) => have += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        sc.rbuf.clear();
        sc.rbuf
            .space(bytes.len().max(READ_CHUNK))
            .get_mut(..bytes.len())
            .expect("room for the bytes")
            .copy_from_slice(&bytes);
        sc.rbuf.filled(bytes.len());
        sc.small_reads = false;
        if let Some(p) = sc.inflight.front_mut() {
            p.no_splice = true;
        }
        self.pipes.push(inb.pipe);
        Ok(())
    }

    /// After a reply of `len` bytes was framed on server `s`: the next reply
    /// starts with a small read if this one was a large value's, which the
    /// next may be too.
    pub(super) fn after_reply(&mut self, s: usize, kind: RespKind, len: usize) {
        self.servers[s].small_reads = kind == RespKind::Retrieval && len >= SPLICE_MIN;
    }

    /// Whether server `s`'s front reply has its value in a pipe, and
    /// `proto::parse_value_tail` frames the rest of it.
    pub(super) fn value_in_pipe(&self, s: usize) -> bool {
        self.servers[s].inbound.is_some()
    }

    /// The rest of the spliced reply (`tail`, framed as `r`) is here: the
    /// client gets the head, the pipe and the tail, in its place (now, or
    /// once the replies before it are in).
    pub(super) fn finish_splice(&mut self, s: usize, tail: &[u8], r: Response) {
        let p = self.servers[s]
            .inflight
            .pop_front()
            .expect("a spliced reply has its request");
        let inb = self.servers[s]
            .inbound
            .take()
            .expect("finish of a spliced value");
        inc(
            &self.stats.get_hits,
            u64::from(inb.values_before) + 1 + u64::from(r.values),
        );
        inc(&self.stats.spliced_values, 1);
        inc(&self.stats.spliced_bytes, inb.in_pipe as u64);
        let Some(c) = self
            .clients
            .get_mut(p.client as usize)
            .and_then(|c| c.as_mut())
            .filter(|c| c.gen == p.gen && p.seq >= c.head_seq)
        else {
            return; // the client is gone; its pipe closes with the value in it
        };
        let i = (p.seq - c.head_seq) as usize;
        if i > 0 {
            let Some(slot) = c.slots.get_mut(i) else {
                return;
            };
            slot.resp.extend_from_slice(&inb.head);
            let at = slot.resp.len();
            slot.resp.extend_from_slice(tail);
            slot.pipe = Some(Box::new(Outbound {
                pipe: inb.pipe,
                len: inb.in_pipe,
                at,
            }));
            slot.frags = 0;
            slot.done = true;
            return;
        }
        c.wbuf.extend_from_slice(&inb.head);
        let at = c.wbuf.len();
        c.wbuf.extend_from_slice(tail);
        c.outbound.push_back(Outbound {
            pipe: inb.pipe,
            len: inb.in_pipe,
            at,
        });
        c.slots.pop_front();
        c.head_seq += 1;
        self.mark_client(p.client);
    }
}

/// Move the client's next piped value to its socket; true once its pipe is
/// empty (it goes back to `pipes`), false if the socket takes no more now.
pub(super) fn drain_outbound(
    c: &mut Client,
    pipes: &mut Vec<SplicePipe>,
    stats: &WorkerStats,
) -> io::Result<bool> {
    let Some(o) = c.outbound.front_mut() else {
        return Ok(true);
    };
    while o.len > 0 {
        inc(&stats.socket_writes, 1);
        match o.pipe.drain_to(&c.sock, o.len) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => o.len -= n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let o = c.outbound.pop_front().expect("checked above");
    if pipes.len() < IDLE_PIPES {
        pipes.push(o.pipe);
    }
    Ok(true)
}
