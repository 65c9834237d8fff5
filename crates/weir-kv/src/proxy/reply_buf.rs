//! A server connection's read buffer.
//!
//! Replies are read straight into it and framed where they landed; only the
//! start of a reply that a read cut short stays, and it is moved to the
//! front once, when the room behind it runs out. A reply larger than the
//! room grows the buffer. The reply bytes are thus copied once in user
//! space (into the client's write buffer), not once more per read they span.

#[derive(Default)]
pub(super) struct ReplyBuf {
    buf: Vec<u8>,
    /// The unparsed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
}

impl ReplyBuf {
    /// Room for a read of `chunk` bytes behind the unparsed bytes.
    pub(super) fn space(&mut self, chunk: usize) -> &mut [u8] {
        if self.start == self.end {
            self.clear();
        }
        if self.buf.len() - self.end < chunk {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.buf.len() - self.end < chunk {
                // twice the read, so that a cut reply rarely has to move
                self.buf.resize((self.end + chunk).max(2 * chunk), 0);
            }
        }
        &mut self.buf[self.end..self.end + chunk]
    }

    /// `n` bytes were read into the room `space` gave.
    pub(super) fn filled(&mut self, n: usize) {
        self.end += n;
    }

    pub(super) fn unparsed(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// The first `n` unparsed bytes were complete replies, handled.
    pub(super) fn consume(&mut self, n: usize) {
        self.start += n;
    }

    pub(super) fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::ReplyBuf;

    fn read(b: &mut ReplyBuf, bytes: &[u8], chunk: usize) {
        b.space(chunk)[..bytes.len()].copy_from_slice(bytes);
        b.filled(bytes.len());
    }

    #[test]
    fn a_reply_cut_by_a_read_is_whole_after_the_next() {
        let mut b = ReplyBuf::default();
        read(&mut b, b"END\r\nVALUE k 0 3\r\nab", 32);
        b.consume(5);
        assert_eq!(b.unparsed(), b"VALUE k 0 3\r\nab");
        read(&mut b, b"c\r\nEND\r\n", 32);
        assert_eq!(b.unparsed(), b"VALUE k 0 3\r\nabc\r\nEND\r\n");
    }

    #[test]
    fn the_cut_reply_moves_to_the_front_when_room_runs_out() {
        let mut b = ReplyBuf::default();
        let chunk = 8;
        read(&mut b, b"12345678", chunk);
        b.consume(6);
        read(&mut b, b"abcdefgh", chunk); // room for one more read: no move
        assert_eq!(b.unparsed(), b"78abcdefgh");
        assert_eq!(b.buf.len(), 2 * chunk);
        read(&mut b, b"ijklmnop", chunk); // no room: "78abcdefgh" moves, and grows
        assert_eq!(b.unparsed(), b"78abcdefghijklmnop");
        assert_eq!(b.start, 0);
        b.consume(18);
        assert!(b.unparsed().is_empty());
        assert_eq!(b.space(chunk).len(), chunk);
        assert_eq!(b.end, 0, "an empty buffer reads from its start");
    }
}
