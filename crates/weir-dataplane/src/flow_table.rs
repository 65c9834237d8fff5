//! A connection table split by address family (bpf/lib/flow_table.h): IPv4
//! tuples sit under the compact `weir_flow_key4` in one map (`conns4`,
//! `rev_nat4`), IPv6 ones under `weir_flow_key` in another (`conns`,
//! `rev_nat`). Callers hold the wire tuple, `weir_flow_key`, whatever its
//! family: [`FlowTable`] picks the map, so no caller branches on it.

use std::marker::PhantomData;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use weir_abi::*;

use crate::maps::{delete_all, read_all};

/// The compact key of an IPv4 tuple; `None` for an IPv6 one.
pub fn compact(key: &weir_flow_key) -> Option<weir_flow_key4> {
    (u32::from(key.family) == WEIR_AF_INET).then(|| weir_flow_key4 {
        src: key.src[0],
        dst: key.dst[0],
        sport: key.sport,
        dport: key.dport,
        proto: key.proto,
        pad: [0; 3],
    })
}

/// The wire tuple of a compact IPv4 key (weir.h: the address in word 0).
pub fn widen(k4: &weir_flow_key4) -> weir_flow_key {
    weir_flow_key {
        src: [k4.src, 0, 0, 0],
        dst: [k4.dst, 0, 0, 0],
        sport: k4.sport,
        dport: k4.dport,
        proto: k4.proto,
        family: WEIR_AF_INET as u8,
        pad: [0; 2],
    }
}

/// One connection table of `V`s (`weir_conn` or `weir_rev_nat`) over its
/// IPv4 and IPv6 maps.
#[derive(Debug)]
pub struct FlowTable<V> {
    v4: MapHandle,
    v6: MapHandle,
    value: PhantomData<V>,
}

impl<V: AsBytes> FlowTable<V> {
    pub(crate) fn new(v4: MapHandle, v6: MapHandle) -> FlowTable<V> {
        FlowTable {
            v4,
            v6,
            value: PhantomData,
        }
    }

    /// The map that holds `key`'s family and the key's bytes in it.
    fn slot(&self, key: &weir_flow_key) -> (&MapHandle, Vec<u8>) {
        match compact(key) {
            Some(k4) => (&self.v4, k4.as_bytes().to_vec()),
            None => (&self.v6, key.as_bytes().to_vec()),
        }
    }

    pub fn get(&self, key: &weir_flow_key) -> Result<Option<V>> {
        let (map, k) = self.slot(key);
        Ok(map
            .lookup(&k, MapFlags::ANY)
            .with_context(|| format!("reading map {}", name(map)))?
            .and_then(|v| V::from_bytes(&v)))
    }

    pub fn insert(&self, key: &weir_flow_key, value: &V) -> Result<()> {
        let (map, k) = self.slot(key);
        map.update(&k, value.as_bytes(), MapFlags::ANY)
            .with_context(|| format!("writing map {}", name(map)))
    }

    /// Inserts many entries, one BPF_MAP_UPDATE_BATCH per family.
    pub fn insert_batch(&self, entries: &[(weir_flow_key, V)]) -> Result<()> {
        let (mut k4, mut v4, mut n4) = (Vec::new(), Vec::new(), 0u32);
        let (mut k6, mut v6, mut n6) = (Vec::new(), Vec::new(), 0u32);
        for (key, value) in entries {
            match compact(key) {
                Some(c) => {
                    k4.extend_from_slice(c.as_bytes());
                    v4.extend_from_slice(value.as_bytes());
                    n4 += 1;
                }
                None => {
                    k6.extend_from_slice(key.as_bytes());
                    v6.extend_from_slice(value.as_bytes());
                    n6 += 1;
                }
            }
        }
        for (map, keys, values, n) in [(&self.v4, k4, v4, n4), (&self.v6, k6, v6, n6)] {
            if n > 0 {
                map.update_batch(&keys, &values, n, MapFlags::ANY, MapFlags::ANY)
                    .with_context(|| format!("batch update of map {}", name(map)))?;
            }
        }
        Ok(())
    }

    /// Inserts `key` unless it is there; false when it was.
    pub fn insert_new(&self, key: &weir_flow_key, value: &V) -> Result<bool> {
        let (map, k) = self.slot(key);
        match map.update(&k, value.as_bytes(), MapFlags::NO_EXIST) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == libbpf_rs::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e).with_context(|| format!("writing map {}", name(map))),
        }
    }

    /// Deletes `key`; false when it was not there.
    pub fn delete(&self, key: &weir_flow_key) -> Result<bool> {
        let (map, k) = self.slot(key);
        match map.delete(&k) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e).with_context(|| format!("deleting from map {}", name(map))),
        }
    }

    /// Deletes `key`'s entry and returns what it held, in one step
    /// (BPF_MAP_LOOKUP_AND_DELETE_ELEM): the entry deleted is the one
    /// returned. Kernels before 5.14 lack that call for hash maps; there
    /// the entry is read, then deleted.
    pub fn take(&self, key: &weir_flow_key) -> Result<Option<V>> {
        let (map, k) = self.slot(key);
        match map.lookup_and_delete(&k) {
            Ok(v) => Ok(v.and_then(|v| V::from_bytes(&v))),
            Err(e) if unsupported(&e) => {
                let v = self.get(key)?;
                if v.is_some() {
                    self.delete(key)?;
                }
                Ok(v)
            }
            Err(e) => Err(e).with_context(|| format!("taking from map {}", name(map))),
        }
    }

    /// Deletes every entry of `keys` the table holds, a BPF_MAP_DELETE_BATCH
    /// per family and batch; returns how many it deleted.
    pub fn delete_batch(&self, keys: &[weir_flow_key]) -> Result<usize> {
        let (mut k4, mut k6) = (Vec::new(), Vec::new());
        for key in keys {
            match compact(key) {
                Some(c) => k4.extend_from_slice(c.as_bytes()),
                None => k6.extend_from_slice(key.as_bytes()),
            }
        }
        let mut deleted = 0;
        for (map, keys) in [(&self.v4, k4), (&self.v6, k6)] {
            if !keys.is_empty() {
                deleted += delete_all(map, &keys)?;
            }
        }
        Ok(deleted)
    }

    /// Every entry of both families, read in batches. Entries change
    /// meanwhile: each is read whole, but the set is no snapshot.
    pub fn entries(&self) -> Result<Vec<(weir_flow_key, V)>> {
        let v4: Vec<(weir_flow_key4, V)> = read_all(&self.v4)?;
        let mut out: Vec<(weir_flow_key, V)> =
            v4.into_iter().map(|(k, v)| (widen(&k), v)).collect();
        out.extend(read_all::<weir_flow_key, V>(&self.v6)?);
        Ok(out)
    }

    /// Entries of both families (walks the keys: O(n)).
    pub fn len(&self) -> usize {
        self.v4.keys().count() + self.v6.keys().count()
    }

    /// Whether both families are empty: at most one key read each, not a
    /// walk.
    pub fn is_empty(&self) -> bool {
        self.v4.keys().next().is_none() && self.v6.keys().next().is_none()
    }

    /// The IPv4 map and the IPv6 map, for what is per map (their sizes).
    pub fn maps(&self) -> [&MapHandle; 2] {
        [&self.v4, &self.v6]
    }
}

/// Whether the kernel may lack the call for this map type: EINVAL or
/// ENOTSUPP before Linux 5.14 for hash maps (ENOTSUPP has no kind of its
/// own). The fallback's own calls report any other failure.
pub(crate) fn unsupported(e: &libbpf_rs::Error) -> bool {
    use libbpf_rs::ErrorKind;
    matches!(
        e.kind(),
        ErrorKind::InvalidInput | ErrorKind::Unsupported | ErrorKind::Other
    )
}

fn name(map: &MapHandle) -> String {
    map.name().to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv4_tuple_survives_the_compact_key_and_an_ipv6_one_has_none() {
        let v4 = weir_flow_key {
            src: [0x0a00_0001u32.to_be(), 0, 0, 0],
            dst: [0xc0a8_0001u32.to_be(), 0, 0, 0],
            sport: 40000u16.to_be(),
            dport: 80u16.to_be(),
            proto: 6,
            family: WEIR_AF_INET as u8,
            pad: [0; 2],
        };
        let k4 = compact(&v4).expect("an IPv4 tuple has a compact key");
        assert_eq!(widen(&k4).as_bytes(), v4.as_bytes());
        let v6 = weir_flow_key {
            family: WEIR_AF_INET6 as u8,
            src: [1, 2, 3, 4],
            ..v4
        };
        assert!(compact(&v6).is_none());
    }
}
