//! The structs and constants of `bpf/include/weir.h` and
//! `bpf/include/weir_kv.h`, as the kernel sees them.
//!
//! Generated at build time by bindgen; the header is the only definition.
//! [`AsBytes`] gives the byte view that map updates and lookups take.
#![allow(non_camel_case_types, non_upper_case_globals, dead_code)]

include!(concat!(env!("OUT_DIR"), "/weir_abi.rs"));

/// A plain-old-data type shared with the kernel: no padding the header did
/// not spell out, no pointers, every bit pattern valid.
///
/// # Safety
/// Implement only for `#[repr(C)]` types made of integers and arrays of
/// integers whose size has no implicit padding (weir.h asserts it).
pub unsafe trait AsBytes: Copy + Default {
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: the trait's contract: Self is padding-free POD.
        unsafe {
            std::slice::from_raw_parts(
                self as *const Self as *const u8,
                std::mem::size_of::<Self>(),
            )
        }
    }

    /// Reads a value from exactly `size_of::<Self>()` bytes.
    fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != std::mem::size_of::<Self>() {
            return None;
        }
        let mut v = Self::default();
        // SAFETY: sizes match and every bit pattern is valid for Self.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                &mut v as *mut Self as *mut u8,
                bytes.len(),
            );
        }
        Some(v)
    }
}

macro_rules! pod {
    ($($t:ty),* $(,)?) => { $(unsafe impl AsBytes for $t {})* };
}

pod!(
    weir_flow_key,
    weir_flow_key4,
    weir_conn,
    weir_conn_timeouts,
    weir_endpoint,
    weir_vip_addr,
    weir_nat_endpoint,
    weir_rev_nat,
    weir_half_open,
    weir_vip_key,
    weir_vip,
    weir_vip_slot,
    weir_dip,
    weir_class_ranges,
    weir_class_members,
    weir_iface,
    weir_traffic,
    weir_xsk_meta,
    weir_worker_set,
    // weir_quic.h (QUIC routing by connection ID)
    weir_quic_sid_key,
    weir_quic_route,
    weir_quic_sid_owner,
    weir_quic_counters,
    // weir_kv.h (the memcached switch)
    weir_kv_server,
    weir_kv_point,
    weir_kv_table,
    weir_kv_key,
    weir_kv_entry,
    weir_kv_bucket,
    weir_kv_req_key,
    weir_kv_req,
    weir_kv_sample,
    weir_kv_server_stats,
    // weir_sync.h (connection sync)
    weir_sync_event,
    // weir_decap.h (the backends' decapsulation)
    weir_decap_addr,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_the_header_assertions() {
        assert_eq!(std::mem::size_of::<weir_flow_key>(), 40);
        assert_eq!(std::mem::size_of::<weir_flow_key4>(), 16);
        assert_eq!(std::mem::size_of::<weir_conn>(), 40);
        assert_eq!(std::mem::size_of::<weir_conn_timeouts>(), 20);
        assert_eq!(std::mem::size_of::<weir_endpoint>(), 20);
        assert_eq!(std::mem::size_of::<weir_rev_nat>(), 40);
        assert_eq!(std::mem::size_of::<weir_half_open>(), 80);
        assert_eq!(std::mem::size_of::<weir_vip_addr>(), 20);
        assert_eq!(
            std::mem::size_of::<weir_nat_endpoint>(),
            4 + 20 * WEIR_ENDPOINT_VIPS as usize
        );
        assert_eq!(std::mem::size_of::<weir_dip>(), 60);
        assert_eq!(std::mem::size_of::<weir_iface>(), 12);
        assert_eq!(std::mem::size_of::<weir_class_ranges>(), 136);
        assert_eq!(
            std::mem::size_of::<weir_class_members>(),
            4 + 4 * WEIR_MAX_CLASS_MEMBERS as usize
        );
    }

    #[test]
    fn kv_sizes_match_the_header_assertions() {
        assert_eq!(std::mem::size_of::<weir_kv_server>(), 32);
        assert_eq!(std::mem::size_of::<weir_kv_point>(), 8);
        assert_eq!(std::mem::size_of::<weir_kv_key>(), 256);
        assert_eq!(
            std::mem::size_of::<weir_kv_entry>(),
            64 + (WEIR_KV_LINE_MAX + WEIR_KV_CAS_TEXT + WEIR_KV_DATA_MAX) as usize
        );
        assert_eq!(std::mem::size_of::<weir_kv_req_key>(), 24);
        assert_eq!(std::mem::size_of::<weir_kv_sample>(), 260);
    }

    #[test]
    fn sync_sizes_match_the_header_assertions() {
        assert_eq!(std::mem::size_of::<weir_sync_event>(), 72);
    }

    #[test]
    fn decap_sizes_match_the_header_assertions() {
        assert_eq!(std::mem::size_of::<weir_decap_addr>(), 20);
    }

    #[test]
    fn bytes_round_trip() {
        let key = weir_vip_key {
            addr: [7, 0, 0, 0],
            port: 80u16.to_be(),
            proto: 6,
            family: 2,
        };
        let back = weir_vip_key::from_bytes(key.as_bytes()).unwrap();
        assert_eq!(back, key);
        assert!(weir_vip_key::from_bytes(&[0u8; 3]).is_none());
    }
}
