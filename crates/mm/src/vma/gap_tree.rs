//! The free gaps of an address space in a search tree that knows the largest gap of every
//! subtree: the part of the maple tree (`lib/maple_tree.c`: `ma_gaps`, `mas_rev_awalk`,
//! `mas_empty_area_rev`) that makes `unmapped_area_topdown` logarithmic.
//!
//! A treap in an arena: nodes are ordered by key (the start of the VMA above the gap) and
//! heap-ordered by a priority that is a fixed hash of the key, so the shape is deterministic
//! (no randomness) and balanced in expectation for any set of addresses. Every node caches the
//! largest gap size in its subtree; insert and remove are split/merge at one key, O(log n);
//! `highest_fitting` descends only into subtrees whose largest gap is big enough.

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Node {
    /// The end of the gap (the start of the VMA above it).
    key: u64,
    /// The start of the gap (the end of the VMA below it, 0 for the lowest).
    start: u64,
    prio: u64,
    /// The largest `key - start` in this subtree.
    max: u64,
    left: u32,
    right: u32,
}

#[derive(Debug)]
pub(crate) struct GapTree {
    nodes: Vec<Node>,
    free: Vec<u32>,
    root: u32,
}

impl Default for GapTree {
    fn default() -> Self {
        GapTree { nodes: Vec::new(), free: Vec::new(), root: NIL }
    }
}

/// SplitMix64's finaliser: a priority from the key, well spread for page-aligned addresses.
fn priority(key: u64) -> u64 {
    let mut z = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl GapTree {
    fn max_of(&self, n: u32) -> u64 {
        if n == NIL {
            0
        } else {
            self.nodes[n as usize].max
        }
    }

    fn pull(&mut self, n: u32) {
        let Node { key, start, left, right, .. } = self.nodes[n as usize];
        let m = (key - start).max(self.max_of(left)).max(self.max_of(right));
        self.nodes[n as usize].max = m;
    }

    /// Split `t` into keys `< key` and keys `>= key`.
    fn split(&mut self, t: u32, key: u64) -> (u32, u32) {
        if t == NIL {
            return (NIL, NIL);
        }
        if self.nodes[t as usize].key < key {
            let (l, r) = self.split(self.nodes[t as usize].right, key);
            self.nodes[t as usize].right = l;
            self.pull(t);
            (t, r)
        } else {
            let (l, r) = self.split(self.nodes[t as usize].left, key);
            self.nodes[t as usize].left = r;
            self.pull(t);
            (l, t)
        }
    }

    /// Join two treaps, every key of `a` below every key of `b`.
    fn merge(&mut self, a: u32, b: u32) -> u32 {
        if a == NIL {
            return b;
        }
        if b == NIL {
            return a;
        }
        if self.nodes[a as usize].prio > self.nodes[b as usize].prio {
            let r = self.merge(self.nodes[a as usize].right, b);
            self.nodes[a as usize].right = r;
            self.pull(a);
            a
        } else {
            let l = self.merge(a, self.nodes[b as usize].left);
            self.nodes[b as usize].left = l;
            self.pull(b);
            b
        }
    }

    /// Insert the gap `[start, key)`, replacing any gap with the same key.
    pub fn insert(&mut self, key: u64, start: u64) {
        debug_assert!(start <= key);
        if let Some(n) = self.find(key) {
            if self.nodes[n as usize].start == start {
                return;
            }
        }
        self.remove(key);
        let node = Node { key, start, prio: priority(key), max: key - start, left: NIL, right: NIL };
        let n = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        let (l, r) = self.split(self.root, key);
        let l = self.merge(l, n);
        self.root = self.merge(l, r);
    }

    /// Remove the gap with `key`, if there is one.
    pub fn remove(&mut self, key: u64) {
        if self.find(key).is_none() {
            return;
        }
        let (l, r) = self.split(self.root, key);
        let (m, r) = self.split(r, key + 1);
        debug_assert!(m != NIL && self.nodes[m as usize].left == NIL && self.nodes[m as usize].right == NIL);
        self.free.push(m);
        self.root = self.merge(l, r);
    }

    fn find(&self, key: u64) -> Option<u32> {
        let mut t = self.root;
        while t != NIL {
            let n = &self.nodes[t as usize];
            if key == n.key {
                return Some(t);
            }
            t = if key < n.key { n.left } else { n.right };
        }
        None
    }

    /// The gap with the highest key below `limit` whose size is at least `length`, as
    /// `(start, end)`.
    pub fn highest_fitting(&self, limit: u64, length: u64) -> Option<(u64, u64)> {
        self.highest_in(self.root, limit, length)
    }

    fn highest_in(&self, t: u32, limit: u64, length: u64) -> Option<(u64, u64)> {
        if t == NIL || self.nodes[t as usize].max < length {
            return None;
        }
        let n = self.nodes[t as usize];
        if n.key >= limit {
            return self.highest_in(n.left, limit, length);
        }
        // Every key in the left subtree is below the limit: once the descent is there, a
        // subtree whose `max` is large enough always holds an answer, so the search is one
        // path from the root plus one descent.
        if let Some(found) = self.highest_in(n.right, limit, length) {
            return Some(found);
        }
        if n.key - n.start >= length {
            return Some((n.start, n.key));
        }
        self.highest_in(n.left, limit, length)
    }

    /// Every gap in key order as `(key, start)`.
    pub fn entries(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut stack = Vec::new();
        let mut t = self.root;
        while t != NIL || !stack.is_empty() {
            while t != NIL {
                stack.push(t);
                t = self.nodes[t as usize].left;
            }
            let n = stack.pop().expect("stack is not empty");
            out.push((self.nodes[n as usize].key, self.nodes[n as usize].start));
            t = self.nodes[n as usize].right;
        }
        out
    }

    /// Heap order of the priorities and the cached maxima.
    pub fn check(&self) -> Result<(), String> {
        self.check_node(self.root).map(|_| ())
    }

    fn check_node(&self, t: u32) -> Result<u64, String> {
        if t == NIL {
            return Ok(0);
        }
        let n = self.nodes[t as usize];
        for c in [n.left, n.right] {
            if c != NIL && self.nodes[c as usize].prio > n.prio {
                return Err(format!("gap tree: node {:#x} is below a child of higher priority", n.key));
            }
        }
        let m = (n.key - n.start).max(self.check_node(n.left)?).max(self.check_node(n.right)?);
        if m != n.max {
            return Err(format!("gap tree: node {:#x} caches max {:#x}, its subtree has {m:#x}", n.key, n.max));
        }
        Ok(m)
    }
}
