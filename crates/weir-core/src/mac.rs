//! Ethernet addresses as the configuration writes them.

/// Parses `aa:bb:cc:dd:ee:ff`; the error says what is wrong with `s`.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return Err(format!(
            "{s:?} is not a MAC address (expected six hex bytes like 02:00:00:00:00:01)"
        ));
    }
    let mut mac = [0u8; 6];
    for (b, p) in mac.iter_mut().zip(parts) {
        *b = u8::from_str_radix(p, 16)
            .ok()
            .filter(|_| p.len() == 2)
            .ok_or_else(|| format!("{s:?} is not a MAC address: bad byte {p:?}"))?;
    }
    Ok(mac)
}
