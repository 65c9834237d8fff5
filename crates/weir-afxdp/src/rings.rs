//! The rings a socket group shares: the UMEM's fill and completion rings,
//! one per (interface, queue) whatever the number of sockets on it, and the
//! free frames between them. They are single-producer, single-consumer
//! rings, so the group's sockets take turns behind a lock, once per burst:
//! each gives back the frames it is done with, takes the completed sends
//! off the completion ring, and refills the fill ring.

use xsk_rs::{CompQueue, FillQueue, FrameDesc};

use crate::socket::Socket;

pub(crate) struct Rings {
    fill: FillQueue,
    comp: CompQueue,
    /// Frames in no ring and held by no socket.
    free: Vec<FrameDesc>,
    /// Frames the group's sockets put on their TX rings that the
    /// completion ring has not returned yet.
    tx_outstanding: u32,
}

impl Rings {
    pub(crate) fn new(fill: FillQueue, comp: CompQueue, frames: Vec<FrameDesc>) -> Rings {
        Rings {
            fill,
            comp,
            free: frames,
            tx_outstanding: 0,
        }
    }

    /// Moves up to `n` free frames to `out`, for new packets.
    pub(crate) fn take_free(&mut self, n: usize, out: &mut Vec<FrameDesc>) {
        let from = self.free.len().saturating_sub(n);
        out.extend(self.free.drain(from..));
    }

    /// Takes `done` back and `posted` more sends into account, reclaims the
    /// completed sends and fills the fill ring. Returns whether the kernel
    /// asks for an RX wakeup (need_wakeup).
    fn service(&mut self, done: &mut Vec<FrameDesc>, posted: u32) -> bool {
        self.free.append(done);
        self.tx_outstanding += posted;
        if self.tx_outstanding > 0 {
            let start = self.free.len();
            // Within capacity: the free list can hold every frame of the UMEM.
            self.free
                .resize(start + self.tx_outstanding as usize, FrameDesc::default());
            // SAFETY: the completion ring returns frames of this UMEM that a
            // socket of the group sent; consume only writes the descriptors.
            let n = unsafe { self.comp.consume(&mut self.free[start..]) };
            self.free.truncate(start + n);
            self.tx_outstanding -= n as u32;
        }
        let have = self.free.len();
        let n = have.min(self.fill.nb_free(have as u32) as usize);
        if n > 0 {
            // SAFETY: free frames are this UMEM's, in no ring, referenced
            // nowhere else. Reservation is all or nothing.
            let produced = unsafe { self.fill.produce(&self.free[have - n..]) };
            self.free.truncate(have - produced);
        }
        self.fill.needs_wakeup()
    }
}

impl Socket {
    /// Services the group's rings (see [`Rings`]). With `wait` false it
    /// gives way to a socket of the group that holds them: an idle poll
    /// has nothing that cannot wait for the next one. Returns whether it
    /// ran.
    pub(crate) fn service_rings(&mut self, wait: bool) -> bool {
        let mut rings = if wait {
            self.rings.lock().unwrap_or_else(|e| e.into_inner())
        } else {
            match self.rings.try_lock() {
                Ok(r) => r,
                Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return false,
            }
        };
        self.rx_wakeup = rings.service(&mut self.done, self.tx_posted);
        self.tx_posted = 0;
        true
    }
}
