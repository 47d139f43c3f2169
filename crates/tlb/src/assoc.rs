//! Set-associative and fully-associative tag arrays with LRU or tree pseudo-LRU replacement.
//!
//! A tag is any non-zero `u64` (zero marks an invalid way). `Sets` (sets of up to 16 ways) keeps
//! a fingerprint byte per way and compares a set's fingerprints at once, then only the matching
//! tags; `FullyAssoc` (for large fully-associative LRU arrays of up to 255 entries, such as a
//! 72-entry L1 DTLB) keeps an open-addressing index from tag to slot and an intrusive LRU list, so
//! a lookup and a fill cost O(1) whatever the number of entries; `SetAssoc` scans the ways of a set
//! (any other geometry, and the reference the others are tested against). All answer the same
//! questions: `lookup` (a hit updates the replacement state), `fill` (insert after a miss,
//! evicting the victim), `lookup_or_fill` (both, the set found once), `invalidate_if`.

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
    /// Sets of at most 16 ways (the fast form).
    Sets(Sets),
    /// Any other set-associative geometry (more than 16 ways); also the reference the fast forms are tested against.
    Set(SetAssoc),
    Full(FullyAssoc),
}

macro_rules! each {
    ($self:ident, $a:ident => $e:expr) => {
        match $self {
            Array::Sets($a) => $e,
            Array::Set($a) => $e,
            Array::Full($a) => $e,
        }
    };
}

impl Array {
    pub fn new(g: Geometry) -> Self {
        assert!(g.entries > 0 && g.ways > 0 && g.entries % g.ways == 0, "bad TLB geometry {g:?}");
        if g.ways > 16 && g.sets() == 1 && g.replacement == Replacement::Lru && g.entries <= FULL_MAX {
            Array::Full(FullyAssoc::new(g.entries))
        } else if g.ways <= 16 {
            Array::Sets(Sets::new(g))
        } else {
            Array::Set(SetAssoc::new(g))
        }
    }
    /// Looks `tag` up in the set chosen by `index`; a hit updates the replacement state.
    #[inline]
    pub fn lookup(&mut self, index: u64, tag: u64) -> bool {
        match self {
            Array::Sets(s) => s.lookup(index, tag),
            Array::Set(s) => s.lookup(index, tag),
            Array::Full(f) => f.lookup(tag),
        }
    }
    /// Inserts `tag` (known to be absent), evicting the set's victim.
    #[inline]
    pub fn fill(&mut self, index: u64, tag: u64) {
        match self {
            Array::Sets(s) => s.fill(index, tag),
            Array::Set(s) => s.fill(index, tag),
            Array::Full(f) => f.fill(tag),
        }
    }
    /// `lookup`, and on a miss `fill`: the same effect as the two calls, with the set found once.
    #[inline(always)]
    pub fn lookup_or_fill(&mut self, index: u64, tag: u64) -> bool {
        match self {
            Array::Sets(s) => s.lookup_or_fill(index, tag),
            Array::Set(s) => s.lookup(index, tag) || {
                s.fill(index, tag);
                false
            },
            Array::Full(f) => f.lookup_or_fill(tag),
        }
    }
    /// Invalidates every valid entry whose tag satisfies `pred`; returns how many.
    pub fn invalidate_if(&mut self, pred: impl Fn(u64) -> bool) -> u64 {
        each!(self, a => a.invalidate_if(pred))
    }
    pub fn clear(&mut self) {
        self.invalidate_if(|_| true);
    }
}

const NIBBLES_1: u64 = 0x1111_1111_1111_1111;
const NIBBLES_8: u64 = 0x8888_8888_8888_8888;

/// Moves `way` to the front (most recent, nibble 0) of the recency order `order` (16 nibbles,
/// each way present once among the first `ways`).
#[inline(always)]
fn lru_touch(order: u64, way: u32) -> u64 {
    // The first nibble equal to `way`: the lowest zero nibble of `x` (exact for the lowest one).
    let x = order ^ (way as u64).wrapping_mul(NIBBLES_1);
    let z = x.wrapping_sub(NIBBLES_1) & !x & NIBBLES_8;
    let p = z.trailing_zeros() & !3;
    let low = order & ((1u64 << p) - 1);
    let high = order & ((!0u64 << p) << 4);
    high | (low << 4) | way as u64
}

/// Tree pseudo-LRU: points every node on the path to `way`'s leaf away from it.
#[inline]
fn plru_touch(mut bits: u64, way: usize, ways: usize) -> u64 {
    let mut node = 1usize;
    let levels = ways.trailing_zeros();
    for l in (0..levels).rev() {
        let right = (way >> l) & 1;
        if right == 1 {
            bits &= !(1 << node);
        } else {
            bits |= 1 << node;
        }
        node = node * 2 + right;
    }
    bits
}

/// Tree pseudo-LRU victim: follows the tree bits (a set bit points right).
#[inline]
fn plru_victim(bits: u64, ways: usize) -> usize {
    let mut node = 1usize;
    for _ in 0..ways.trailing_zeros() {
        node = node * 2 + ((bits >> node) & 1) as usize;
    }
    node - ways
}

const BYTES_1: u128 = 0x0101_0101_0101_0101_0101_0101_0101_0101;
const BYTES_80: u128 = 0x8080_8080_8080_8080_8080_8080_8080_8080;

/// The fingerprint of a tag in a set's fingerprint row: a byte of a hash of it, never 0 (0 marks
/// an invalid way).
#[inline(always)]
fn fingerprint(tag: u64) -> u8 {
    let f = (tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8;
    f | (f == 0) as u8
}

/// The high bit of every byte of `x` that may be zero: exact for the lowest zero byte, and a
/// superset above it (a borrow can flag a 0x01 byte above a zero one).
#[inline(always)]
fn zero_bytes(x: u128) -> u128 {
    x.wrapping_sub(BYTES_1) & !x & BYTES_80
}

/// The replacement state and way fingerprints of one set.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(32))]
struct SetState {
    /// A fingerprint per way (0 = invalid), 0xFF in the bytes beyond the set's ways.
    fp: [u8; 16],
    /// LRU: the recency order (nibble `k` = the `k`-th most recently used way, 0xF beyond the
    /// ways); tree-PLRU: the tree bits.
    order: u64,
}

/// A set-associative array of at most 16 ways per set with the same replacement as `SetAssoc`,
/// found without scanning the tags: the fingerprints of a set's ways are compared all at once
/// (one 128-bit word), and only a way whose fingerprint matches has its tag compared. LRU keeps
/// the recency order of the ways; the victim of a fill is the lowest invalid way, else the last of
/// that order, as `SetAssoc`'s oldest stamp (an invalid way has stamp 0). Tree-PLRU keeps the tree
/// bits as `SetAssoc` does.
#[derive(Clone, Debug)]
pub struct Sets {
    sets_mask: u64,
    sets: u64,
    ways: u32,
    /// 0x80 in the byte of every way.
    ways_bytes: u128,
    plru: bool,
    state: Box<[SetState]>,
    /// `ways` tags per set, 0 = invalid.
    tags: Box<[u64]>,
}

impl Sets {
    fn new(g: Geometry) -> Self {
        assert!(g.ways <= 16);
        let sets = g.sets() as u64;
        let plru = g.replacement == Replacement::TreePlru;
        if plru {
            assert!(g.ways.is_power_of_two(), "tree pseudo-LRU needs a power-of-two number of ways");
        }
        // Initial recency order: ways 0.. in order, 0xF in the unused nibbles (never a way of a
        // set of fewer than 16; an untouched way is invalid, so its place is never used).
        let mut order = !0u64;
        let mut fp = [0xFF; 16];
        let mut ways_bytes = 0u128;
        for w in 0..g.ways {
            order = (order & !(0xF << (4 * w))) | ((w as u64) << (4 * w));
            fp[w as usize] = 0;
            ways_bytes |= 0x80 << (8 * w);
        }
        Sets {
            sets_mask: if sets.is_power_of_two() { sets - 1 } else { u64::MAX },
            sets,
            ways: g.ways,
            ways_bytes,
            plru,
            state: vec![SetState { fp, order: if plru { 0 } else { order } }; sets as usize].into_boxed_slice(),
            tags: vec![0; g.entries as usize].into_boxed_slice(),
        }
    }
    #[inline(always)]
    fn set_of(&self, index: u64) -> usize {
        (if self.sets_mask != u64::MAX { index & self.sets_mask } else { index % self.sets }) as usize
    }
    /// Per way of set `set`, the high bit of its fingerprint byte if it may equal `f` (exact for
    /// the lowest match, possibly more above it); only the set's ways.
    #[inline(always)]
    fn candidates(&self, set: usize, f: u8) -> u128 {
        let fb = f as u64 * 0x0101_0101_0101_0101;
        zero_bytes(u128::from_le_bytes(self.state[set].fp) ^ ((fb as u128) << 64 | fb as u128)) & self.ways_bytes
    }
    /// The way of set `set` holding `tag`, if any.
    #[inline(always)]
    fn find(&self, set: usize, tag: u64) -> Option<u32> {
        let mut c = self.candidates(set, fingerprint(tag));
        let base = set * self.ways as usize;
        while c != 0 {
            let w = c.trailing_zeros() / 8;
            if self.tags[base + w as usize] == tag {
                return Some(w);
            }
            c &= c - 1;
        }
        None
    }
    #[inline(always)]
    fn touch(&mut self, set: usize, way: u32) {
        let st = &mut self.state[set];
        st.order = if self.plru { plru_touch(st.order, way as usize, self.ways as usize) } else { lru_touch(st.order, way) };
    }
    #[inline(always)]
    fn fill_set(&mut self, set: usize, tag: u64) {
        let free = self.candidates(set, 0);
        let st = &self.state[set];
        let victim = if free != 0 {
            free.trailing_zeros() / 8
        } else if self.plru {
            plru_victim(st.order, self.ways as usize) as u32
        } else {
            ((st.order >> (4 * (self.ways - 1))) & 0xF) as u32
        };
        self.state[set].fp[victim as usize & 15] = fingerprint(tag);
        self.tags[set * self.ways as usize + victim as usize] = tag;
        self.touch(set, victim);
    }
    #[inline(always)]
    fn lookup(&mut self, index: u64, tag: u64) -> bool {
        let set = self.set_of(index);
        match self.find(set, tag) {
            Some(w) => {
                self.touch(set, w);
                true
            }
            None => false,
        }
    }
    #[inline(always)]
    fn fill(&mut self, index: u64, tag: u64) {
        let set = self.set_of(index);
        self.fill_set(set, tag);
    }
    #[inline(always)]
    fn lookup_or_fill(&mut self, index: u64, tag: u64) -> bool {
        let set = self.set_of(index);
        match self.find(set, tag) {
            Some(w) => {
                self.touch(set, w);
                true
            }
            None => {
                self.fill_set(set, tag);
                false
            }
        }
    }
    fn invalidate_if(&mut self, pred: impl Fn(u64) -> bool) -> u64 {
        let mut n = 0;
        let ways = self.ways as usize;
        for (i, t) in self.tags.iter_mut().enumerate() {
            if *t != 0 && pred(*t) {
                *t = 0;
                self.state[i / ways].fp[i % ways] = 0;
                n += 1;
            }
        }
        n
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

/// The most entries of a `FullyAssoc` (slot numbers are bytes, 255 = none).
pub const FULL_MAX: u32 = 255;
const NIL: u8 = u8::MAX;
/// Buckets of the index of a `FullyAssoc`: 4 per entry, rounded up to a power of two, at most this.
const BUCKETS: usize = 1024;

/// A fully-associative LRU array of at most `FULL_MAX` entries: an index (open addressing,
/// linear probing, backward-shift deletion; each bucket holds the tag itself, 0 = empty, and its
/// slot) and a doubly-linked recency list over the slots. Fixed-size arrays indexed by a byte or a
/// masked bucket number need no bounds checks.
#[derive(Clone, Debug)]
pub struct FullyAssoc {
    entries: u16,
    used: u16,
    head: u8,
    tail: u8,
    /// Buckets in use - 1.
    mask: usize,
    shift: u32,
    tags: Box<[u64; 256]>,
    prev: Box<[u8; 256]>,
    next: Box<[u8; 256]>,
    keys: Box<[u64; BUCKETS]>,
    slots: Box<[u8; BUCKETS]>,
}

impl FullyAssoc {
    fn new(entries: u32) -> Self {
        assert!(entries <= FULL_MAX);
        let buckets = (entries as usize * 4).next_power_of_two();
        FullyAssoc {
            entries: entries as u16,
            used: 0,
            head: NIL,
            tail: NIL,
            mask: buckets - 1,
            shift: 64 - buckets.trailing_zeros(),
            tags: Box::new([0; 256]),
            prev: Box::new([NIL; 256]),
            next: Box::new([NIL; 256]),
            keys: Box::new([0; BUCKETS]),
            slots: Box::new([NIL; BUCKETS]),
        }
    }
    #[inline(always)]
    fn bucket(&self, tag: u64) -> usize {
        (tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }
    /// The bucket holding `tag`, or the empty bucket where its probe ends.
    #[inline(always)]
    fn probe(&self, tag: u64) -> usize {
        let mask = self.mask & (BUCKETS - 1);
        let mut b = self.bucket(tag) & mask;
        loop {
            let k = self.keys[b];
            if k == tag || k == 0 {
                return b;
            }
            b = (b + 1) & mask;
        }
    }
    #[inline(always)]
    fn unlink(&mut self, s: u8) {
        let (p, n) = (self.prev[s as usize], self.next[s as usize]);
        if p != NIL { self.next[p as usize] = n } else { self.head = n }
        if n != NIL { self.prev[n as usize] = p } else { self.tail = p }
    }
    #[inline(always)]
    fn push_front(&mut self, s: u8) {
        self.prev[s as usize] = NIL;
        self.next[s as usize] = self.head;
        if self.head != NIL {
            self.prev[self.head as usize] = s;
        } else {
            self.tail = s;
        }
        self.head = s;
    }
    #[inline(always)]
    fn to_front(&mut self, s: u8) {
        if self.head != s {
            self.unlink(s);
            self.push_front(s);
        }
    }
    #[inline(always)]
    fn lookup(&mut self, tag: u64) -> bool {
        let b = self.probe(tag);
        if self.keys[b] == 0 {
            return false;
        }
        self.to_front(self.slots[b]);
        true
    }
    #[inline(always)]
    fn lookup_or_fill(&mut self, tag: u64) -> bool {
        let b = self.probe(tag);
        if self.keys[b] != 0 {
            self.to_front(self.slots[b]);
            return true;
        }
        self.fill(tag);
        false
    }
    /// Removes `tag` (present) from the index.
    #[inline(always)]
    fn index_remove(&mut self, tag: u64) {
        let mask = self.mask & (BUCKETS - 1);
        let mut hole = self.probe(tag);
        // Backward-shift deletion keeps every probe chain unbroken.
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let k = self.keys[j];
            if k == 0 {
                break;
            }
            let home = self.bucket(k);
            // Move bucket `j` into the hole unless its home lies cyclically in (hole, j].
            let in_range = if hole <= j { home > hole && home <= j } else { home > hole || home <= j };
            if !in_range {
                self.keys[hole] = k;
                self.slots[hole] = self.slots[j];
                hole = j;
            }
        }
        self.keys[hole] = 0;
    }
    #[inline(always)]
    fn fill(&mut self, tag: u64) {
        let s = if self.used < self.entries {
            self.used += 1;
            // Free slots are taken in order; a slot freed by invalidation is marked by tag 0.
            match self.tags[..self.entries as usize].iter().position(|&t| t == 0) {
                Some(s) => s as u8,
                None => unreachable!("used < entries but no free slot"),
            }
        } else {
            let v = self.tail;
            self.index_remove(self.tags[v as usize]);
            self.unlink(v);
            v
        };
        self.tags[s as usize] = tag;
        let b = self.probe(tag);
        self.keys[b] = tag;
        self.slots[b] = s;
        self.push_front(s);
    }
    fn invalidate_if(&mut self, pred: impl Fn(u64) -> bool) -> u64 {
        let mut n = 0;
        for s in 0..self.entries as usize {
            let t = self.tags[s];
            if t != 0 && pred(t) {
                self.index_remove(t);
                self.unlink(s as u8);
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

#[cfg(test)]
mod fast_forms {
    use super::*;

    /// Random lookups, fills and invalidations on a fast form and on `SetAssoc` (the reference)
    /// of the same geometry give the same hits, the same counts and the same victims.
    fn same_as_reference(g: Geometry) {
        let mut f = Array::new(g);
        assert!(!matches!(f, Array::Set(_)), "{g:?} has no fast form");
        let mut r = Array::Set(SetAssoc::new(g));
        let mut x: u64 = 0x2545_F491_4F6C_DD1D ^ g.entries as u64;
        let distinct = g.entries as u64 * 2;
        for i in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = x % distinct;
            let (index, tag) = (key, (1 << 63) | key);
            if i % 3 == 0 {
                assert_eq!(f.lookup_or_fill(index, tag), r.lookup(index, tag) || { r.fill(index, tag); false }, "{g:?} step {i}");
            } else {
                let (hf, hr) = (f.lookup(index, tag), r.lookup(index, tag));
                assert_eq!(hf, hr, "{g:?} step {i}");
                if !hf {
                    f.fill(index, tag);
                    r.fill(index, tag);
                }
            }
            if i % 5000 == 4999 {
                let m = 2 + (i / 5000) % 7;
                assert_eq!(f.invalidate_if(|t| t % m == 0), r.invalidate_if(|t| t % m == 0));
            }
        }
    }

    #[test]
    fn fast_forms_match_the_reference() {
        for (e, w) in [(1, 1), (2, 2), (4, 4), (10, 10), (16, 16), (96, 6), (32, 4), (1280, 5), (1536, 12), (2048, 16), (24, 3), (40, 8)] {
            same_as_reference(Geometry::assoc(e, w));
        }
        for (e, w) in [(4, 4), (16, 2), (64, 8), (256, 16), (24, 8)] {
            same_as_reference(Geometry::plru(e, w));
        }
    }

    #[test]
    fn lru_touch_moves_to_front() {
        // Order (MRU first) 3 1 0 2, padding F: touching 0 gives 0 3 1 2; touching 2 gives 2 0 3 1.
        let o = 0xFFFF_FFFF_FFFF_2013;
        assert_eq!(lru_touch(o, 0), 0xFFFF_FFFF_FFFF_2130);
        assert_eq!(lru_touch(lru_touch(o, 0), 2), 0xFFFF_FFFF_FFFF_1302);
        assert_eq!(lru_touch(o, 3), o);
    }
}
