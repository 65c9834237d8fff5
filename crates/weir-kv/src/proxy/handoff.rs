//! Handing a pool's client connections to the proxy that replaces it when
//! a reload changes the pool (servers, routing, timeouts...), so that no
//! client connection is closed.
//!
//! The old proxy's workers close their listeners and stop reading their
//! clients; a request already read still goes to the old servers and is
//! answered there. A client with nothing outstanding (no reply owed, nothing
//! left to write) is taken off the old worker's poll and sent, with the
//! bytes it sent that were not parsed yet, to a worker of the new proxy,
//! which parses them and routes everything after by the new pool. An old
//! worker ends once it has handed over every client.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, OnceLock};

use mio::net::TcpStream;
use mio::{Interest, Token, Waker};

use super::{Client, Worker, CLIENT_BASE};
use crate::stats::inc;

/// A client connection on its way to another worker.
pub(super) struct Handed {
    sock: TcpStream,
    /// Bytes read from the client and not parsed yet.
    rbuf: Vec<u8>,
    first: bool,
}

/// Where a worker of the new proxy takes handed clients.
#[derive(Clone)]
pub(super) struct Inbox {
    pub(super) tx: Sender<Handed>,
    pub(super) waker: Arc<Waker>,
}

/// The new proxy's inboxes, set once when the old proxy hands over.
pub(super) type Target = Arc<OnceLock<Vec<Inbox>>>;

/// A worker's side of hand-overs: clients it receives, and where its own go.
pub(super) struct Handoff {
    pub(super) inbox: Receiver<Handed>,
    pub(super) target: Target,
    /// Where this worker's next client goes among the target's workers.
    pub(super) next: usize,
}

impl Worker {
    /// Registers a new client connection; None if the poll refused it.
    pub(super) fn add_client(
        &mut self,
        mut sock: TcpStream,
        rbuf: Vec<u8>,
        first: bool,
    ) -> Option<u32> {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.clients.push(None);
                (self.clients.len() - 1) as u32
            }
        };
        if self
            .poll
            .registry()
            .register(
                &mut sock,
                Token(CLIENT_BASE + idx as usize),
                Interest::READABLE | Interest::WRITABLE,
            )
            .is_err()
        {
            self.free.push(idx);
            return None;
        }
        self.next_gen = self.next_gen.wrapping_add(1).max(1);
        self.clients[idx as usize] = Some(Client {
            sock,
            gen: self.next_gen,
            rbuf,
            wbuf: Vec::new(),
            wpos: 0,
            slots: VecDeque::new(),
            head_seq: 0,
            closing: false,
            dead: false,
            first,
            paused: false,
            dirty: false,
            outbound: VecDeque::new(),
        });
        self.nclients.fetch_add(1, Ordering::Relaxed);
        inc(&self.stats.client_connections, 1);
        Some(idx)
    }

    /// Takes the clients another proxy's workers handed to this one, and
    /// serves what they sent meanwhile.
    pub(super) fn adopt(&mut self) {
        let mut adopted = false;
        while let Ok(h) = self.handoff.inbox.try_recv() {
            let pending = !h.rbuf.is_empty();
            // A client the poll refuses is closed by dropping its socket.
            let Some(idx) = self.add_client(h.sock, h.rbuf, h.first) else {
                continue;
            };
            if pending {
                self.client_parse(idx);
            }
            // What arrived while the client was between workers: its
            // socket is edge-triggered, so no event may come for it.
            self.client_read(idx, false);
            adopted = true;
        }
        // The requests it sent go out now, not at the next poll's wake-up.
        if adopted {
            self.flush();
        }
    }

    /// While handing over: closes the listener, passes on every client with
    /// nothing outstanding. True once no client and no request is left.
    pub(super) fn hand_over_idle(&mut self) -> bool {
        let target = self.handoff.target.clone();
        let Some(target) = target.get().filter(|t| !t.is_empty()) else {
            return false;
        };
        // The connections the kernel has accepted for the listener go with
        // the others rather than die with it.
        self.accept();
        if let Some(mut l) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut l);
        }
        let mut left = false;
        for idx in 0..self.clients.len() {
            let Some(c) = self.clients[idx].as_ref() else {
                continue;
            };
            let idle = c.slots.is_empty() && c.unsent() == 0 && !c.closing && !c.dead;
            if !idle {
                left = true;
                continue;
            }
            let mut c = self.clients[idx].take().expect("checked above");
            let _ = self.poll.registry().deregister(&mut c.sock);
            self.free.push(idx as u32);
            self.nclients.fetch_sub(1, Ordering::Relaxed);
            self.stats
                .client_connections
                .fetch_sub(1, Ordering::Relaxed);
            let to = &target[self.handoff.next % target.len()];
            self.handoff.next += 1;
            let handed = Handed {
                sock: c.sock,
                rbuf: c.rbuf,
                first: c.first,
            };
            // A new proxy that is gone already closes the client as it drops.
            if to.tx.send(handed).is_ok() {
                let _ = to.waker.wake();
            }
        }
        // Requests without a reply owed (noreply) may still be on their way
        // to a server: the worker ends once they are written and answered.
        !left
            && self
                .servers
                .iter()
                .all(|s| s.inflight.is_empty() && s.wpos == s.wbuf.len())
    }
}
