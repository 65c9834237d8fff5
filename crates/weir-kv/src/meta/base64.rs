//! memcached's base64 key decoder (`base64.c`), byte for byte.
//!
//! A meta command's `b` flag says its key is base64. memcached decodes it
//! leniently: characters outside the alphabet are skipped, and decoding
//! stops after the first block with padding. The proxy must hash exactly
//! the bytes memcached stores, so it decodes as memcached does rather than
//! as a strict decoder would.

/// The 6-bit value of an alphabet character (`=` counts as 0), or None for
/// a character memcached skips.
fn sextet(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        b'=' => Some(0),
        _ => None,
    }
}

/// The decoded key, or None where memcached's `base64_decode` returns 0
/// (no alphabet characters, a count not a multiple of 4, more than two
/// padding characters in a block, or an empty result): memcached refuses
/// such a request.
pub fn decode(src: &[u8]) -> Option<Vec<u8>> {
    let count = src.iter().filter(|&&c| sextet(c).is_some()).count();
    if count == 0 || count % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(count / 4 * 3);
    let mut block = [0u8; 4];
    let mut n = 0;
    let mut pad = 0;
    for &c in src {
        let Some(v) = sextet(c) else {
            continue;
        };
        if c == b'=' {
            pad += 1;
        }
        block[n] = v;
        n += 1;
        if n == 4 {
            out.push((block[0] << 2) | (block[1] >> 4));
            out.push((block[1] << 4) | (block[2] >> 2));
            out.push((block[2] << 6) | block[3]);
            n = 0;
            if pad > 0 {
                if pad > 2 {
                    return None;
                }
                out.truncate(out.len() - pad);
                break;
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::decode;

    #[test]
    fn decodes_as_memcached_does() {
        assert_eq!(decode(b"Zm9v").unwrap(), b"foo");
        assert_eq!(decode(b"Zm8=").unwrap(), b"fo");
        assert_eq!(decode(b"Zg==").unwrap(), b"f");
        assert_eq!(decode(b"AAEC/w==").unwrap(), [0, 1, 2, 255]);
        // characters outside the alphabet are skipped
        assert_eq!(decode(b"Zm-9v").unwrap(), b"foo");
        // decoding stops after the first padded block
        assert_eq!(decode(b"Zg==Zm9v").unwrap(), b"f");
        assert_eq!(decode(b"Zm9"), None);
        assert_eq!(decode(b"!!!!"), None);
        assert_eq!(decode(b"Z==="), None);
        assert_eq!(decode(b""), None);
    }
}
