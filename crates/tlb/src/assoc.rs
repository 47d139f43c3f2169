//! Set-associative and fully-associative tag arrays with LRU or tree pseudo-LRU replacement.
//!
//! A tag is any non-zero `u64` (zero marks an invalid way). `SetAssoc` scans the ways of one set;
//! `FullyAssoc` (for large fully-associative arrays such as a 72-entry L1 DTLB) keeps an
//! open-addressing index from tag to slot and an intrusive LRU list, so a lookup and a fill cost
//! O(1) whatever the number of entries. Both answer the same questions: `lookup` (a hit updates the
//! replacement state), `fill` (insert after a miss, evicting the victim), `invalidate_if`.

/// Replacement policy of a set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replacement {
    /// True least-recently-used.
    Lru,
    /// Binary-tree pseudo-LRU (ways must be a power of two).
    TreePlru,
}

/// Geometry of one array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub entries: u32,
    /// Ways per set; `ways == entries` is fully associative.
    pub ways: u32,
    pub replacement: Replacement,
}

impl Geometry {
    pub const fn full(entries: u32) -> Self {
        Geometry { entries, ways: entries, replacement: Replacement::Lru }
    }
    pub const fn assoc(entries: u32, ways: u32) -> Self {
        Geometry { entries, ways, replacement: Replacement::Lru }
    }
    pub const fn plru(entries: u32, ways: u32) -> Self {
        Geometry { entries, ways, replacement: Replacement::TreePlru }
    }
    pub fn sets(&self) -> u32 {
        self.entries / self.ways
    }
}

/// One tag array.
#[derive(Clone, Debug)]
pub enum Array {
    Set(SetAssoc),
    Full(FullyAssoc),
}

impl Array {
    pub fn new(g: Geometry) -> Self {
        assert!(g.entries > 0 && g.ways > 0 && g.entries % g.ways == 0, "bad TLB geometry {g:?}");
        if g.ways > 16 && g.sets() == 1 && g.replacement == Replacement::Lru {
            Array::Full(FullyAssoc::new(g.entries))
        } else {
            Array::Set(SetAssoc::new(g))
        }
    }
    /// Looks `tag` up in the set chosen by `index`; a hit updates the replacement state.
    #[inline]
    pub fn lookup(&mut self, index: u64, tag: u64) -> bool {
        match self {
            Array::Set(s) => s.lookup(index, tag),
            Array::Full(f) => f.lookup(tag),
        }
    }
    /// Inserts `tag` (known to be absent), evicting the set's victim.
    #[inline]
    pub fn fill(&mut self, index: u64, tag: u64) {
        match self {
            Array::Set(s) => s.fill(index, tag),
            Array::Full(f) => f.fill(tag),
        }
    }
    /// Invalidates every valid entry whose tag satisfies `pred`; returns how many.
    pub fn invalidate_if(&mut self, pred: impl Fn(u64) -> bool) -> u64 {
        match self {
            Array::Set(s) => s.invalidate_if(pred),
            Array::Full(f) => f.invalidate_if(pred),
        }
    }
    pub fn clear(&mut self) {
        self.invalidate_if(|_| true);
    }
}

/// A set-associative array; the ways of a set are scanned.
#[derive(Clone, Debug)]
pub struct SetAssoc {
    sets_mask: u64,
    sets: u64,
    ways: usize,
    tags: Vec<u64>,
    /// LRU: last-use stamp per way. Tree-PLRU: one word of tree bits per set (in `stamps[set*ways]`).
    stamps: Vec<u64>,
    clock: u64,
    plru: bool,
}

impl SetAssoc {
    fn new(g: Geometry) -> Self {
        let sets = g.sets() as u64;
        let plru = g.replacement == Replacement::TreePlru;
        if plru {
            assert!(g.ways.is_power_of_two() && g.ways <= 64, "tree pseudo-LRU needs a power-of-two number of ways");
        }
        SetAssoc {
            sets_mask: if sets.is_power_of_two() { sets - 1 } else { u64::MAX },
            sets,
            ways: g.ways as usize,
            tags: vec![0; g.entries as usize],
            stamps: vec![0; g.entries as usize],
            clock: 0,
            plru,
        }
    }
    #[inline]
    fn set_of(&self, index: u64) -> usize {
        let s = if self.sets_mask != u64::MAX { index & self.sets_mask } else { index % self.sets };
        s as usize * self.ways
    }
    #[inline]
    fn touch(&mut self, base: usize, way: usize) {
        if self.plru {
            // Walk from the root to the leaf of `way`, pointing every node away from it.
            let mut bits = self.stamps[base];
            let mut node = 1usize;
            let levels = self.ways.trailing_zeros();
            for l in (0..levels).rev() {
                let right = (way >> l) & 1;
                if right == 1 {
                    bits &= !(1 << node);
                } else {
                    bits |= 1 << node;
                }
                node = node * 2 + right;
            }
            self.stamps[base] = bits;
        } else {
            self.clock += 1;
            self.stamps[base + way] = self.clock;
        }
    }
    #[inline]
    fn lookup(&mut self, index: u64, tag: u64) -> bool {
        let base = self.set_of(index);
        // Branch-free scan: a random stream makes early exits mispredict.
        let ways = &self.tags[base..base + self.ways];
        let mut hit = usize::MAX;
        for (w, &t) in ways.iter().enumerate() {
            hit = if t == tag { w } else { hit };
        }
        if hit == usize::MAX {
            return false;
        }
        self.touch(base, hit);
        true
    }
    #[inline]
    fn fill(&mut self, index: u64, tag: u64) {
        let base = self.set_of(index);
        let victim = if !self.plru {
            // An invalid way has stamp 0, older than any use: the least recent stamp is the
            // victim whether or not the set is full.
            let st = &self.stamps[base..base + self.ways];
            let (mut v, mut m) = (0, u64::MAX);
            for (w, &x) in st.iter().enumerate() {
                let lt = x < m;
                v = if lt { w } else { v };
                m = if lt { x } else { m };
            }
            v
        } else if let Some(free) = self.tags[base..base + self.ways].iter().position(|&t| t == 0) {
            free
        } else {
            // Follow the tree bits: a set bit points right.
            let bits = self.stamps[base];
            let mut node = 1usize;
            for _ in 0..self.ways.trailing_zeros() {
                node = node * 2 + ((bits >> node) & 1) as usize;
            }
            node - self.ways
        };
        self.tags[base + victim] = tag;
        self.touch(base, victim);
    }
    fn invalidate_if(&mut self, pred: impl Fn(u64) -> bool) -> u64 {
        let mut n = 0;
        for (i, t) in self.tags.iter_mut().enumerate() {
            if *t != 0 && pred(*t) {
                *t = 0;
                if !self.plru {
                    self.stamps[i] = 0;
                }
                n += 1;
            }
        }
        n
    }
}

const NIL: u16 = u16::MAX;

/// A fully-associative LRU array: an index (open addressing, linear probing, backward-shift
/// deletion) from tag to slot, and a doubly-linked recency list over the slots.
#[derive(Clone, Debug)]
pub struct FullyAssoc {
    tags: Vec<u64>,
    prev: Vec<u16>,
    next: Vec<u16>,
    head: u16,
    tail: u16,
    used: u16,
    index: Vec<u16>,
    shift: u32,
}

impl FullyAssoc {
    fn new(entries: u32) -> Self {
        assert!(entries < NIL as u32);
        let buckets = (entries as usize * 4).next_power_of_two();
        FullyAssoc {
            tags: vec![0; entries as usize],
            prev: vec![NIL; entries as usize],
            next: vec![NIL; entries as usize],
            head: NIL,
            tail: NIL,
            used: 0,
            index: vec![NIL; buckets],
            shift: 64 - buckets.trailing_zeros(),
        }
    }
    #[inline]
    fn bucket(&self, tag: u64) -> usize {
        (tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }
    #[inline]
    fn find(&self, tag: u64) -> Option<u16> {
        let mask = self.index.len() - 1;
        let mut b = self.bucket(tag);
        loop {
            let s = self.index[b];
            if s == NIL {
                return None;
            }
            if self.tags[s as usize] == tag {
                return Some(s);
            }
            b = (b + 1) & mask;
        }
    }
    fn unlink(&mut self, s: u16) {
        let (p, n) = (self.prev[s as usize], self.next[s as usize]);
        if p != NIL { self.next[p as usize] = n } else { self.head = n }
        if n != NIL { self.prev[n as usize] = p } else { self.tail = p }
    }
    fn push_front(&mut self, s: u16) {
        self.prev[s as usize] = NIL;
        self.next[s as usize] = self.head;
        if self.head != NIL {
            self.prev[self.head as usize] = s;
        } else {
            self.tail = s;
        }
        self.head = s;
    }
    #[inline]
    fn lookup(&mut self, tag: u64) -> bool {
        match self.find(tag) {
            Some(s) => {
                if self.head != s {
                    self.unlink(s);
                    self.push_front(s);
                }
                true
            }
            None => false,
        }
    }
    fn index_remove(&mut self, tag: u64) {
        let mask = self.index.len() - 1;
        let mut b = self.bucket(tag);
        while self.tags[self.index[b] as usize] != tag {
            b = (b + 1) & mask;
        }
        // Backward-shift deletion keeps every probe chain unbroken.
        let mut hole = b;
        let mut j = b;
        loop {
            j = (j + 1) & mask;
            let s = self.index[j];
            if s == NIL {
                break;
            }
            let home = self.bucket(self.tags[s as usize]);
            // Move `s` into the hole unless its home lies cyclically in (hole, j].
            let in_range = if hole <= j { home > hole && home <= j } else { home > hole || home <= j };
            if !in_range {
                self.index[hole] = s;
                hole = j;
            }
        }
        self.index[hole] = NIL;
    }
    #[inline]
    fn fill(&mut self, tag: u64) {
        let s = if (self.used as usize) < self.tags.len() {
            self.used += 1;
            // Free slots are taken in order; a slot freed by invalidation is marked by tag 0.
            match self.tags.iter().position(|&t| t == 0) {
                Some(s) => s as u16,
                None => unreachable!("used < entries but no free slot"),
            }
        } else {
            let v = self.tail;
            let old = self.tags[v as usize];
            self.index_remove(old);
            self.unlink(v);
            v
        };
        self.tags[s as usize] = tag;
        let mask = self.index.len() - 1;
        let mut b = self.bucket(tag);
        while self.index[b] != NIL {
            b = (b + 1) & mask;
        }
        self.index[b] = s;
        self.push_front(s);
    }
    fn invalidate_if(&mut self, pred: impl Fn(u64) -> bool) -> u64 {
        let mut n = 0;
        for s in 0..self.tags.len() {
            let t = self.tags[s];
            if t != 0 && pred(t) {
                self.index_remove(t);
                self.unlink(s as u16);
                self.tags[s] = 0;
                self.used -= 1;
                n += 1;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_set_evicts_least_recent() {
        // 1 set of 2 ways: A B, touch A, C evicts B.
        let mut a = Array::new(Geometry::assoc(2, 2));
        assert!(!a.lookup(0, 1));
        a.fill(0, 1);
        assert!(!a.lookup(0, 2));
        a.fill(0, 2);
        assert!(a.lookup(0, 1));
        assert!(!a.lookup(0, 3));
        a.fill(0, 3);
        assert!(a.lookup(0, 1));
        assert!(!a.lookup(0, 2));
    }

    #[test]
    fn tree_plru_four_ways() {
        // Fill 1,2,3,4 (ways 0..3), touch 1 and 3: the tree points at way 1 (tag 2) as victim.
        let mut a = Array::new(Geometry::plru(4, 4));
        for t in 1..=4 {
            a.fill(0, t);
        }
        assert!(a.lookup(0, 1));
        assert!(a.lookup(0, 3));
        a.fill(0, 5);
        assert!(!a.lookup(0, 2));
        assert!(a.lookup(0, 1) && a.lookup(0, 3) && a.lookup(0, 4) && a.lookup(0, 5));
    }

    #[test]
    fn fully_assoc_matches_set_assoc_lru() {
        // A 20-entry fully-associative array (hash index) against the scanning one of 1 set.
        let mut f = Array::new(Geometry::full(20));
        let mut s = Array::Set(SetAssoc::new(Geometry::full(20)));
        assert!(matches!(f, Array::Full(_)));
        let mut x: u64 = 7;
        for i in 0..20_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let tag = (x >> 59) + 1 + (i % 3);
            let (hf, hs) = (f.lookup(0, tag), s.lookup(0, tag));
            assert_eq!(hf, hs, "step {i}");
            if !hf {
                f.fill(0, tag);
                s.fill(0, tag);
            }
            if i % 1000 == 999 {
                assert_eq!(f.invalidate_if(|t| t % 5 == 0), s.invalidate_if(|t| t % 5 == 0));
            }
        }
    }
}
