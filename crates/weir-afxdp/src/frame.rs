//! A received frame as a value the caller holds ([`Frame`]), its packet
//! bytes, and the metadata an XDP program put in front of the packet
//! (`bpf_xdp_adjust_meta`).
//!
//! **Metadata.** An XDP program may grow the area just before the packet
//! by up to 32 bytes and write into it; the kernel keeps those bytes in
//! front of the packet when it hands it to a socket (in copy mode it copies
//! them along with the packet). The RX descriptor says nothing of them, so
//! xsk-rs offers no view of them: [`Socket::take_meta`] reads them through
//! the UMEM's address, after checking that they lie within the frame's
//! headroom. Whether a packet has metadata is the program's and the
//! reader's convention (a marker in the bytes): stale bytes of an earlier
//! packet in the same frame would look just as valid, which is why the
//! read also clears them.

use crate::socket::Socket;

/// Which UMEM a frame belongs to: sockets only take frames of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GroupId(pub(crate) u64);

/// A frame of a socket group's UMEM that the caller holds: received, and
/// not yet sent or given back. Exactly one value exists per frame (it is
/// neither Clone nor Copy), which is what lets its bytes be handed out as
/// `&mut`. It must go back to a socket of its group
/// ([`Socket::queue_tx`], [`Socket::release`]), or the frame is lost to
/// the UMEM until the group is dropped.
#[derive(Debug)]
#[must_use = "a frame must be sent or released, or its UMEM frame is lost"]
pub struct Frame {
    pub(crate) desc: xsk_rs::FrameDesc,
    pub(crate) group: GroupId,
}

impl Frame {
    /// The packet's length in bytes.
    pub fn len(&self) -> usize {
        self.desc.lengths().data()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Socket {
    /// Whether `frame` belongs to this socket's UMEM (its group).
    pub fn owns(&self, frame: &Frame) -> bool {
        frame.group == self.group
    }

    fn check(&self, frame: &Frame) {
        assert!(
            self.owns(frame),
            "a frame of another UMEM was handed to the socket of {} queue {}",
            self.iface.name,
            self.queue
        );
    }

    /// The packet's bytes.
    ///
    /// # Panics
    /// If `frame` belongs to another group.
    pub fn data<'a>(&'a self, frame: &'a Frame) -> &'a [u8] {
        self.check(frame);
        // SAFETY: the frame is this UMEM's, and the caller holds its only
        // handle: neither the kernel nor another thread touches it.
        unsafe { self.umem.data(&frame.desc) }.contents()
    }

    /// The packet's bytes, writable in place.
    ///
    /// # Panics
    /// If `frame` belongs to another group.
    pub fn data_mut<'a>(&'a self, frame: &'a mut Frame) -> &'a mut [u8] {
        self.check(frame);
        // SAFETY: as in `data`; `&mut Frame` is the only handle, borrowed
        // exclusively for as long as the slice lives.
        let mut data = unsafe { self.umem.data_mut(&mut frame.desc) };
        let len = data.contents().len();
        let slice = data.contents_mut();
        let ptr = slice.as_mut_ptr();
        // SAFETY: the same bytes, reborrowed for the frame's borrow rather
        // than the temporary DataMut's.
        unsafe { std::slice::from_raw_parts_mut(ptr, len) }
    }

    /// Reads and clears the `N` bytes just before the packet, where an XDP
    /// program's metadata ends (see the module's documentation). None if
    /// the frame has less headroom than `N` bytes before the packet.
    ///
    /// # Panics
    /// If `frame` belongs to another group.
    pub fn take_meta<const N: usize>(&self, frame: &mut Frame) -> Option<[u8; N]> {
        self.check(frame);
        let addr = frame.desc.addr();
        // Aligned mode: a frame starts at a multiple of the frame size, and
        // the kernel places the packet after its XDP headroom, metadata
        // last. What lies between the frame's start and the packet is the
        // frame's own.
        if addr % self.frame_size < N || addr > self.umem_len {
            return None;
        }
        let at = self.umem_base + addr - N;
        // The UMEM is a mapping shared with the kernel, outside the memory
        // Rust allocates, so an address within it may be used as a pointer
        // (exposed provenance).
        let ptr = std::ptr::with_exposed_provenance_mut::<[u8; N]>(at);
        // SAFETY: `at..at + N` is within this frame (checked above), which
        // the caller holds alone (`&mut Frame`); no slice handed out covers
        // it (the packet's starts at `addr`).
        unsafe {
            let meta = ptr.read_unaligned();
            ptr.write_unaligned([0; N]);
            Some(meta)
        }
    }
}
