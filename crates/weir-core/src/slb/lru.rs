//! A bounded table keyed by the 5-tuple with O(1) lookup, insert, remove
//! and reordering: a slab of nodes, allocated once, threaded on doubly
//! linked lists by index, and a hash index from key to slot.
//!
//! Entries sit on one of a few lists ("classes"; the connection table uses
//! one per timeout state). Each list is ordered by when its entries were
//! last moved to its front, newest first, so its tail is its least recently
//! used entry. The caller chooses what to evict when the table is full
//! (conntrack.rs picks the oldest of the lists' tails). Nothing here
//! allocates after [`Lru::new`]: slots are reused through a free list and
//! the index is sized for the capacity up front.

use std::collections::HashMap;
use std::hash::{Hash, Hasher, RandomState};

use weir_abi::{weir_flow_key, AsBytes};

/// The position of an entry in the slab: stable while the entry lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slot(u32);

const NIL: u32 = u32::MAX;

/// The largest capacity a table can have (slot indices are 32-bit, one
/// value marks the end of a list).
pub const MAX_CAPACITY: usize = (u32::MAX - 1) as usize;

/// The flow key hashed as its 40 bytes in one write: one pass of the
/// keyed hasher instead of one per field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowKey(pub weir_flow_key);

impl Hash for FlowKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.0.as_bytes());
    }
}

/// A keyed hasher with a random key per table (SipHash-1-3): senders choose
/// the 5-tuples, so the index must not be predictable.
pub type KeyedHash = RandomState;

/// A hash index from flow key to `V` (the reverse tables use it too).
pub type FlowIndex<V> = HashMap<FlowKey, V, KeyedHash>;

/// An empty index with room for `capacity` keys.
pub fn flow_index<V>(capacity: usize) -> FlowIndex<V> {
    HashMap::with_capacity_and_hasher(capacity, KeyedHash::new())
}

#[derive(Debug, Clone, Copy)]
struct Node<V> {
    key: weir_flow_key,
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
    index: FlowIndex<Slot>,
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
            index: flow_index(capacity),
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

    pub fn find(&self, key: &weir_flow_key) -> Option<Slot> {
        self.index.get(&FlowKey(*key)).copied()
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
    pub fn insert(&mut self, key: weir_flow_key, value: V, class: usize) -> Slot {
        assert!(!self.is_full(), "insert into a full table: evict first");
        let node = Node {
            key,
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
        let old = self.index.insert(FlowKey(key), Slot(idx));
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
        self.index.remove(&FlowKey(node.key));
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
    use std::hash::BuildHasher;

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
        let mut t: Lru<u32> = Lru::new(4, 2);
        let a = t.insert(key(1), 10, 0);
        t.insert(key(2), 20, 0);
        let c = t.insert(key(3), 30, 1);
        assert_eq!((order(&t, 0), order(&t, 1)), (vec![1, 2], vec![3]));
        t.move_to_front(a, 0);
        assert_eq!(order(&t, 0), vec![2, 1]);
        t.move_to_front(a, 1);
        assert_eq!((order(&t, 0), order(&t, 1)), (vec![2], vec![3, 1]));
        assert_eq!(t.class(a), 1);
        *t.get_mut(c) += 1;
        assert_eq!(t.remove(c), (key(3), 31));
        assert_eq!(t.find(&key(3)), None);
        assert_eq!(order(&t, 1), vec![1]);
        let d = t.insert(key(4), 40, 1);
        assert_eq!(d, c, "the freed slot is reused");
        assert_eq!(t.find(&key(4)), Some(d));
        t.insert(key(5), 50, 0);
        assert!(t.is_full());
        assert_eq!(t.len(), 4);
        assert_eq!(*t.get(t.find(&key(2)).unwrap()), 20);
    }

    #[test]
    fn removing_heads_tails_and_middles_keeps_lists_whole() {
        let mut t: Lru<u32> = Lru::new(8, 1);
        let slots: Vec<Slot> = (0..8).map(|i| t.insert(key(i), 0, 0)).collect();
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
            t.insert(key(100 + i), 0, 0);
        }
        assert_eq!(order(&t, 0), (100..108).collect::<Vec<_>>());
    }

    #[test]
    #[should_panic(expected = "evict first")]
    fn a_full_table_refuses_an_insert() {
        let mut t: Lru<u32> = Lru::new(1, 1);
        t.insert(key(1), 0, 0);
        t.insert(key(2), 0, 0);
    }

    #[test]
    fn the_index_is_keyed() {
        // Two tables hash the same key differently: the layout of one
        // tells an attacker nothing about another's.
        let (a, b) = (KeyedHash::new(), KeyedHash::new());
        assert_ne!(a.hash_one(FlowKey(key(1))), b.hash_one(FlowKey(key(1))));
    }
}
