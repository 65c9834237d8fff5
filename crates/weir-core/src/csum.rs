//! The Internet checksum (RFC 1071) over bytes as they sit on the wire:
//! big-endian 16-bit words, an odd tail padded with zero.

/// The one's-complement sum of `bytes` added to `initial`, not yet folded
/// (partial sums of several pieces add up).
pub fn sum_be16(bytes: &[u8], initial: u32) -> u32 {
    bytes.chunks(2).fold(initial, |sum, c| {
        sum + u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)]))
    })
}

/// Folds a partial sum to 16 bits and complements it: the checksum field.
pub fn finish(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The checksum of `bytes` starting from the partial sum `initial`.
pub fn checksum(bytes: &[u8], initial: u32) -> u16 {
    finish(sum_be16(bytes, initial))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071, section 3: these bytes sum to 0xddf2 (folded).
        let b = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(finish(sum_be16(&b, 0)), !0xddf2);
        assert_eq!(checksum(&[0xab], 0), !0xab00);
    }
}
