//! memcached's UDP frame header (protocol.txt, "UDP protocol"): request id,
//! sequence number, datagram count and a reserved word before the request.

/// Bytes of memcached's UDP frame header.
pub const MEMCACHED_UDP_HLEN: usize = 8;

/// `body` behind the frame header: datagram `seq` of `total` of request `req_id`.
pub fn memcached_udp(req_id: u16, seq: u16, total: u16, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(MEMCACHED_UDP_HLEN + body.len());
    v.extend_from_slice(&req_id.to_be_bytes());
    v.extend_from_slice(&seq.to_be_bytes());
    v.extend_from_slice(&total.to_be_bytes());
    v.extend_from_slice(&[0, 0]);
    v.extend_from_slice(body);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_header_precedes_the_request() {
        assert_eq!(
            memcached_udp(0x1234, 1, 2, b"get k\r\n"),
            b"\x12\x34\x00\x01\x00\x02\x00\x00get k\r\n"
        );
    }
}
