//! A bounded table keyed by the 5-tuple with O(1) lookup, insert, remove
//! and reordering: a slab of nodes, allocated once, threaded on doubly
//! linked lists by index, and a hash index of slot numbers.
//!
//! Entries sit on one of a few lists ("classes"; the connection table uses
//! one per timeout state). Each list is ordered by when its entries were
//! last moved to its front, newest first, so its tail is its least recently
//! used entry. The caller chooses what to evict when the table is full
//! (conntrack.rs picks the oldest of the lists' tails).
//!
//! The index holds 4-byte slot numbers, not keys: a million entries need
//! about 10 MB of index instead of a hundred, so a lookup misses the cache
//! and the TLB less often. A key is hashed once per packet ([`Hashed`]) and
//! its hash kept in its node, so growing and removing never rehash. Nothing
//! allocates after [`Lru::new`]: slots are reused through a free list and
//! the index is sized for the capacity up front.

use std::hash::{BuildHasher, Hash, Hasher, RandomState};

use hashbrown::HashTable;
use weir_abi::{weir_flow_key, AsBytes};

/// The position of an entry in the slab: stable while the entry lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slot(pub(super) u32);

const NIL: u32 = u32::MAX;

/// The largest capacity a table can have (slot indices are 32-bit, one
/// value marks the end of a list).
pub const MAX_CAPACITY: usize = (u32::MAX - 1) as usize;

/// A flow key and its hash under a [`KeyHasher`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hashed {
    pub key: weir_flow_key,
    pub hash: u64,
}

/// The keyed hash of flow keys (SipHash-1-3 with a random key): senders
/// choose the 5-tuples, so where they land in an index must not be
/// predictable. One per load balancer, shared by its tables, so a packet's
/// key is hashed once for all of them.
#[derive(Debug, Clone)]
pub struct KeyHasher(RandomState);

impl KeyHasher {
    #[allow(clippy::new_without_default)] // a random key: no "default" one
    pub fn new() -> KeyHasher {
        KeyHasher(RandomState::new())
    }

    pub fn hashed(&self, key: &weir_flow_key) -> Hashed {
        // The 40 bytes in one write: one pass of the hasher, not one per field.
        struct Bytes<'a>(&'a [u8]);
        impl Hash for Bytes<'_> {
            fn hash<H: Hasher>(&self, state: &mut H) {
                state.write(self.0);
            }
        }
        Hashed {
            key: *key,
            hash: self.0.hash_one(Bytes(key.as_bytes())),
        }
    }
}

/// A hash index of slot numbers whose keys live elsewhere: `eq` says
/// whether a slot holds the key looked for, `hash_of` gives a slot's
/// stored hash (when the index grows, which it does not after sizing).
#[derive(Debug, Clone)]
pub struct SlotIndex(HashTable<u32>);

impl SlotIndex {
    pub fn with_capacity(capacity: usize) -> SlotIndex {
        SlotIndex(HashTable::with_capacity(capacity))
    }

    pub fn find(&self, hash: u64, eq: impl FnMut(u32) -> bool) -> Option<u32> {
        let mut eq = eq;
        self.0.find(hash, |&s| eq(s)).copied()
    }

    /// Points the key's entry at `slot`; returns the slot it held before.
    pub fn set(
        &mut self,
        hash: u64,
        slot: u32,
        eq: impl FnMut(u32) -> bool,
        hash_of: impl Fn(u32) -> u64,
    ) -> Option<u32> {
        let mut eq = eq;
        if let Some(s) = self.0.find_mut(hash, |&s| eq(s)) {
            return Some(std::mem::replace(s, slot));
        }
        self.0.insert_unique(hash, slot, |&s| hash_of(s));
        None
    }

    /// Removes the entry that points at `slot`.
    pub fn remove(&mut self, hash: u64, slot: u32) -> bool {
        match self.0.find_entry(hash, |&s| s == slot) {
            Ok(e) => {
                e.remove();
                true
            }
            Err(_) => false,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Node<V> {
    key: weir_flow_key,
    hash: u64,
    value: V,
    prev: u32,
    next: u32,
    class: u8,
}

#[derive(Debug, Clone, Copy)]
struct Ends {
    head: u32,
    tail: u32,
}

const EMPTY: Ends = Ends {
    head: NIL,
    tail: NIL,
};

#[derive(Debug, Clone)]
pub struct Lru<V: Copy> {
    index: SlotIndex,
    nodes: Vec<Node<V>>,
    lists: Vec<Ends>,
    /// Freed slots, chained through `next`.
    free: u32,
    len: usize,
    capacity: usize,
}

impl<V: Copy> Lru<V> {
    /// A table of `capacity` entries (1..=[`MAX_CAPACITY`]) on `classes`
    /// lists (1..=256).
    pub fn new(capacity: usize, classes: usize) -> Lru<V> {
        assert!(
            (1..=MAX_CAPACITY).contains(&capacity),
            "capacity {capacity}"
        );
        assert!((1..=256).contains(&classes), "classes {classes}");
        Lru {
            index: SlotIndex::with_capacity(capacity),
            nodes: Vec::with_capacity(capacity),
            lists: vec![EMPTY; classes],
            free: NIL,
            len: 0,
            capacity,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_full(&self) -> bool {
        self.len == self.capacity
    }

    pub fn find(&self, k: &Hashed) -> Option<Slot> {
        let nodes = &self.nodes;
        self.index
            .find(k.hash, |s| nodes[s as usize].key == k.key)
            .map(Slot)
    }

    pub fn key(&self, slot: Slot) -> &weir_flow_key {
        &self.nodes[slot.0 as usize].key
    }

    pub fn get(&self, slot: Slot) -> &V {
        &self.nodes[slot.0 as usize].value
    }

    pub fn get_mut(&mut self, slot: Slot) -> &mut V {
        &mut self.nodes[slot.0 as usize].value
    }

    pub fn class(&self, slot: Slot) -> usize {
        usize::from(self.nodes[slot.0 as usize].class)
    }

    /// The least recently moved entry of a list.
    pub fn oldest(&self, class: usize) -> Option<Slot> {
        let tail = self.lists[class].tail;
        (tail != NIL).then_some(Slot(tail))
    }

    /// The entry moved to the front just after `slot` (towards the head).
    #[cfg(test)]
    pub fn newer(&self, slot: Slot) -> Option<Slot> {
        let prev = self.nodes[slot.0 as usize].prev;
        (prev != NIL).then_some(Slot(prev))
    }

    /// Adds an entry at the front of list `class`. The key must be absent
    /// and the table not full (the caller evicts first).
    pub fn insert(&mut self, k: &Hashed, value: V, class: usize) -> Slot {
        assert!(!self.is_full(), "insert into a full table: evict first");
        let node = Node {
            key: k.key,
            hash: k.hash,
            value,
            prev: NIL,
            next: NIL,
            class: class as u8,
        };
        let idx = if self.free != NIL {
            let idx = self.free;
            self.free = self.nodes[idx as usize].next;
            self.nodes[idx as usize] = node;
            idx
        } else {
            // Within the capacity reserved in new(): no reallocation.
            self.nodes.push(node);
            (self.nodes.len() - 1) as u32
        };
        let nodes = &self.nodes;
        let old = self.index.set(
            k.hash,
            idx,
            |s| nodes[s as usize].key == k.key,
            |s| nodes[s as usize].hash,
        );
        assert!(old.is_none(), "insert of a key already present");
        self.len += 1;
        self.push_front(idx, class);
        Slot(idx)
    }

    /// Moves an entry to the front of list `class` (its own or another).
    pub fn move_to_front(&mut self, slot: Slot, class: usize) {
        self.unlink(slot.0);
        self.push_front(slot.0, class);
    }

    /// Removes an entry; its slot is free for the next insert.
    pub fn remove(&mut self, slot: Slot) -> (weir_flow_key, V) {
        self.unlink(slot.0);
        let node = self.nodes[slot.0 as usize];
        self.index.remove(node.hash, slot.0);
        self.nodes[slot.0 as usize].next = self.free;
        self.free = slot.0;
        self.len -= 1;
        (node.key, node.value)
    }

    fn push_front(&mut self, idx: u32, class: usize) {
        let ends = &mut self.lists[class];
        let old_head = ends.head;
        ends.head = idx;
        if old_head == NIL {
            ends.tail = idx;
        } else {
            self.nodes[old_head as usize].prev = idx;
        }
        let node = &mut self.nodes[idx as usize];
        node.prev = NIL;
        node.next = old_head;
        node.class = class as u8;
    }

    fn unlink(&mut self, idx: u32) {
        let Node {
            prev, next, class, ..
        } = self.nodes[idx as usize];
        let ends = &mut self.lists[usize::from(class)];
        if prev == NIL {
            ends.head = next;
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next == NIL {
            ends.tail = prev;
        } else {
            self.nodes[next as usize].prev = prev;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u16) -> weir_flow_key {
        weir_flow_key {
            sport: n,
            proto: 6,
            family: 2,
            ..Default::default()
        }
    }

    /// The keys of list `class`, oldest first.
    fn order(t: &Lru<u32>, class: usize) -> Vec<u16> {
        let mut out = Vec::new();
        let mut s = t.oldest(class);
        while let Some(slot) = s {
            out.push(t.key(slot).sport);
            s = t.newer(slot);
        }
        out
    }

    #[test]
    fn lists_keep_move_order_and_slots_are_reused() {
        let h = KeyHasher::new();
        let k = |n| h.hashed(&key(n));
        let mut t: Lru<u32> = Lru::new(4, 2);
        let a = t.insert(&k(1), 10, 0);
        t.insert(&k(2), 20, 0);
        let c = t.insert(&k(3), 30, 1);
        assert_eq!((order(&t, 0), order(&t, 1)), (vec![1, 2], vec![3]));
        t.move_to_front(a, 0);
        assert_eq!(order(&t, 0), vec![2, 1]);
        t.move_to_front(a, 1);
        assert_eq!((order(&t, 0), order(&t, 1)), (vec![2], vec![3, 1]));
        assert_eq!(t.class(a), 1);
        *t.get_mut(c) += 1;
        assert_eq!(t.remove(c), (key(3), 31));
        assert_eq!(t.find(&k(3)), None);
        assert_eq!(order(&t, 1), vec![1]);
        let d = t.insert(&k(4), 40, 1);
        assert_eq!(d, c, "the freed slot is reused");
        assert_eq!(t.find(&k(4)), Some(d));
        t.insert(&k(5), 50, 0);
        assert!(t.is_full());
        assert_eq!(t.len(), 4);
        assert_eq!(*t.get(t.find(&k(2)).unwrap()), 20);
    }

    #[test]
    fn removing_heads_tails_and_middles_keeps_lists_whole() {
        let h = KeyHasher::new();
        let mut t: Lru<u32> = Lru::new(8, 1);
        let slots: Vec<Slot> = (0..8).map(|i| t.insert(&h.hashed(&key(i)), 0, 0)).collect();
        t.remove(slots[0]); // tail
        t.remove(slots[7]); // head
        t.remove(slots[4]); // middle
        assert_eq!(order(&t, 0), vec![1, 2, 3, 5, 6]);
        for s in [1, 2, 3, 5, 6] {
            t.remove(slots[s]);
        }
        assert_eq!(t.oldest(0), None);
        assert_eq!(t.len(), 0);
        for i in 0..8 {
            t.insert(&h.hashed(&key(100 + i)), 0, 0);
        }
        assert_eq!(order(&t, 0), (100..108).collect::<Vec<_>>());
        for i in 0..8 {
            assert!(t.find(&h.hashed(&key(100 + i))).is_some());
            assert!(t.find(&h.hashed(&key(i))).is_none());
        }
    }

    #[test]
    fn colliding_hashes_are_told_apart_by_key() {
        // Every key with the same hash: the index compares the keys.
        let mut t: Lru<u32> = Lru::new(16, 1);
        let same = |n| Hashed {
            key: key(n),
            hash: 7,
        };
        let slots: Vec<Slot> = (0..16)
            .map(|i| t.insert(&same(i), u32::from(i), 0))
            .collect();
        for i in 0..16 {
            assert_eq!(t.find(&same(i)), Some(slots[i as usize]));
        }
        t.remove(slots[3]);
        assert_eq!(t.find(&same(3)), None);
        assert_eq!(*t.get(t.find(&same(4)).unwrap()), 4);
    }

    #[test]
    #[should_panic(expected = "evict first")]
    fn a_full_table_refuses_an_insert() {
        let h = KeyHasher::new();
        let mut t: Lru<u32> = Lru::new(1, 1);
        t.insert(&h.hashed(&key(1)), 0, 0);
        t.insert(&h.hashed(&key(2)), 0, 0);
    }

    #[test]
    fn the_hash_is_keyed() {
        // Two hashers hash the same key differently: one table's layout
        // tells an attacker nothing about another's.
        let (a, b) = (KeyHasher::new(), KeyHasher::new());
        assert_ne!(a.hashed(&key(1)).hash, b.hashed(&key(1)).hash);
        assert_eq!(a.hashed(&key(1)), a.clone().hashed(&key(1)));
    }

    #[test]
    fn the_index_remembers_what_it_replaced() {
        // Slots 1 and 2 hold the same key (as two connections with one
        // reply tuple do): pointing the key at 2 returns 1.
        let keys = [10u32, 20, 20];
        let mut ix = SlotIndex::with_capacity(4);
        let eq = |want: u32| move |s: u32| keys[s as usize] == want;
        assert_eq!(ix.set(1, 0, eq(10), |_| 1), None);
        assert_eq!(ix.set(1, 1, eq(20), |_| 1), None);
        assert_eq!(ix.set(1, 2, eq(20), |_| 1), Some(1));
        assert_eq!((ix.find(1, eq(20)), ix.find(1, eq(10))), (Some(2), Some(0)));
        assert!(!ix.remove(1, 1), "no entry points at 1 any more");
        assert!(ix.remove(1, 2));
        assert_eq!(ix.find(1, eq(20)), None);
    }
}
