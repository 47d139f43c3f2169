//! Set-associative and fully-associative tag arrays with LRU or tree pseudo-LRU replacement.
//!
//! A tag is any non-zero `u64` (zero marks an invalid way). `Sets` (sets of up to 16 ways) keeps
//! a fingerprint byte per way in a 16-byte row and compares a set's fingerprints at once (SSE2 on
//! x86-64), then only the matching tags; `FullyAssoc` (for large fully-associative LRU arrays of
//! up to 128 entries, such as a 72-entry L1 DTLB) hashes a tag to one of 16 buckets, each a row
//! of fingerprints compared the same way, and keeps an intrusive LRU list, so a lookup and a fill
//! cost O(1) whatever the number of entries; `SetAssoc` scans the ways of a set (any other
//! geometry, and the reference the others are tested against). All answer the same questions:
//! `lookup` (a hit updates the replacement state), `fill` (insert after a miss, evicting the
//! victim), `lookup_or_fill` (both, the set found once), `invalidate_if`.

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

/// One tag array. `repr(u8)`: the variant is a tag byte of its own, which each lookup's match
/// reads and compares (without it the variant is encoded in a field of `Sets` and decoded).
#[derive(Clone, Debug)]
#[repr(u8)]
pub enum Array {
    /// Sets of at most 16 ways (the fast form).
    Sets(Sets),
    /// Any other set-associative geometry (more than 16 ways); also the reference the fast forms are tested against.
    Set(SetAssoc),
    Full(Box<FullyAssoc>),
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
    // Nibbles up to and including that one (bit 4p+3 of `z` is its high bit) shift up by one
    // with `way` entering at nibble 0; the others stay.
    let upto = u64::MAX >> (z.trailing_zeros() ^ 63);
    order ^ ((order ^ (order << 4 | way as u64)) & upto)
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

/// The fingerprint of a tag in a row of fingerprints: a byte of a hash of it, never 0 (0 marks
/// an invalid way).
#[inline(always)]
fn fingerprint(tag: u64) -> u8 {
    ((tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8).max(1)
}

/// A row of 16 fingerprint bytes, compared with a byte all at once. A row is always replaced
/// whole (`with`), never written a byte at a time: the next comparison reads the row with one
/// 16-byte load, which a narrower store to it still in the store buffer could not forward to (the
/// load would wait for the store to reach the cache, a stall on every lookup that follows a fill
/// of the same row closely).
#[cfg(target_arch = "x86_64")]
mod row {
    use core::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_cmpeq_epi8, _mm_load_si128, _mm_movemask_epi8, _mm_set1_epi8, _mm_setzero_si128,
        _mm_xor_si128,
    };

    /// SSE2: `pcmpeqb` and `pmovmskb`. The intrinsics are called in `unsafe` blocks because they
    /// are `#[target_feature(enable = "sse2")]` functions; SSE2 is part of the x86-64 baseline, so
    /// every x86-64 CPU runs them.
    #[derive(Clone, Copy, Debug)]
    pub(super) struct Row(__m128i);

    /// `SELECT.0[i]`: 0xFF in byte `i`, 0 elsewhere.
    #[repr(C, align(16))]
    struct Select([[u8; 16]; 16]);
    static SELECT: Select = {
        let mut m = [[0u8; 16]; 16];
        let mut i = 0;
        while i < 16 {
            m[i][i] = 0xFF;
            i += 1;
        }
        Select(m)
    };

    impl Row {
        pub(super) fn zero() -> Row {
            unsafe { Row(_mm_setzero_si128()) }
        }
        /// Bit `i` set iff byte `i` is `b`.
        #[inline(always)]
        pub(super) fn eq_mask(self, b: u8) -> u32 {
            unsafe { _mm_movemask_epi8(_mm_cmpeq_epi8(self.0, _mm_set1_epi8(b as i8))) as u32 }
        }
        /// The row with byte `i % 16` replaced by `b`.
        #[inline(always)]
        pub(super) fn with(self, i: u32, b: u8) -> Row {
            // SAFETY (the load): `SELECT`'s rows are 16 bytes, 16-byte aligned.
            unsafe {
                let sel = _mm_load_si128(SELECT.0[i as usize & 15].as_ptr().cast());
                Row(_mm_xor_si128(self.0, _mm_and_si128(sel, _mm_xor_si128(self.0, _mm_set1_epi8(b as i8)))))
            }
        }
    }
}

/// The portable row: bytes of a `u128`, compared by SWAR. Also built on x86-64 for the test
/// that compares it with the SSE2 one.
#[cfg(any(test, not(target_arch = "x86_64")))]
mod swar_row {
    const LOW7: u128 = 0x7F7F_7F7F_7F7F_7F7F_7F7F_7F7F_7F7F_7F7F;
    const BYTES_1: u128 = 0x0101_0101_0101_0101_0101_0101_0101_0101;

    #[derive(Clone, Copy, Debug)]
    pub(super) struct Row(u128);

    /// The high bits of the bytes of `h` (bits 7, 15, .. 63) gathered into 8 bits.
    #[inline(always)]
    fn gather(h: u64) -> u32 {
        ((h >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56) as u32
    }

    impl Row {
        pub(super) fn zero() -> Row {
            Row(0)
        }
        /// Bit `i` set iff byte `i` is `b`.
        #[inline(always)]
        pub(super) fn eq_mask(self, b: u8) -> u32 {
            let x = self.0 ^ (b as u128 * BYTES_1);
            // The high bit of a byte of `x` is clear iff the byte is 0 (no borrow between bytes).
            let z = !(((x & LOW7) + LOW7) | x) & !LOW7;
            gather(z as u64) | gather((z >> 64) as u64) << 8
        }
        /// The row with byte `i % 16` replaced by `b`.
        #[inline(always)]
        pub(super) fn with(self, i: u32, b: u8) -> Row {
            let s = 8 * (i & 15);
            Row(self.0 & !(0xFF << s) | (b as u128) << s)
        }
    }
}

#[cfg(target_arch = "x86_64")]
use row::Row;
#[cfg(not(target_arch = "x86_64"))]
use swar_row::Row;

/// The replacement state and way fingerprints of one set.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(32))]
struct SetState {
    /// A fingerprint per way (0 = invalid), 0 in the bytes beyond the set's ways.
    fp: Row,
    /// LRU: the recency order (nibble `k` = the `k`-th most recently used way, 0xF beyond the
    /// ways); tree-PLRU: the tree bits.
    order: u64,
}

/// A set-associative array of at most 16 ways per set with the same replacement as `SetAssoc`,
/// found without scanning the tags: the fingerprints of a set's ways are compared all at once
/// (one 16-byte row), and only a way whose fingerprint matches has its tag compared. LRU keeps
/// the recency order of the ways; the victim of a fill is the lowest invalid way, else the last of
/// that order, as `SetAssoc`'s oldest stamp (an invalid way has stamp 0). Tree-PLRU keeps the tree
/// bits as `SetAssoc` does.
#[derive(Clone, Debug)]
pub struct Sets {
    sets_mask: u64,
    sets: u64,
    ways: u32,
    /// The bits of the ways in a row's `eq_mask`.
    ways_mask: u32,
    /// The nibbles of the ways in an LRU order.
    order_mask: u64,
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
        let order_mask = if g.ways == 16 { !0 } else { (1u64 << (4 * g.ways)) - 1 };
        let mut order = !order_mask;
        for w in 0..g.ways {
            order |= (w as u64) << (4 * w);
        }
        Sets {
            sets_mask: if sets.is_power_of_two() { sets - 1 } else { u64::MAX },
            sets,
            ways: g.ways,
            ways_mask: ((1u64 << g.ways) - 1) as u32,
            order_mask,
            plru,
            state: vec![SetState { fp: Row::zero(), order: if plru { 0 } else { order } }; sets as usize].into_boxed_slice(),
            tags: vec![0; g.entries as usize].into_boxed_slice(),
        }
    }
    #[inline(always)]
    fn set_of(&self, index: u64) -> usize {
        (if self.sets_mask != u64::MAX { index & self.sets_mask } else { index % self.sets }) as usize
    }
    /// The way of set `set` holding `tag`, if any; `fp` is the set's fingerprint row.
    #[inline(always)]
    fn find(&self, set: usize, fp: Row, tag: u64) -> Option<u32> {
        // The bytes beyond the ways are 0, never a fingerprint: no need to mask them off.
        let m = fp.eq_mask(fingerprint(tag));
        let base = set * self.ways as usize;
        let mut rest = m;
        while rest != 0 {
            let w = rest.trailing_zeros();
            if self.tags[base + w as usize] == tag {
                return Some(w);
            }
            rest &= rest - 1;
        }
        None
    }
    #[inline(always)]
    fn touch(&mut self, set: usize, way: u32) {
        let st = &mut self.state[set];
        st.order = if self.plru { plru_touch(st.order, way as usize, self.ways as usize) } else { lru_touch(st.order, way) };
    }
    /// Inserts `tag` into set `set`, whose fingerprint row is `fp`.
    #[inline(always)]
    fn fill_set(&mut self, set: usize, fp: Row, tag: u64) {
        let free = fp.eq_mask(0) & self.ways_mask;
        let (plru, ways, order_mask) = (self.plru, self.ways, self.order_mask);
        let st = &mut self.state[set];
        let victim = if free != 0 {
            let w = free.trailing_zeros();
            st.order = if plru { plru_touch(st.order, w as usize, ways as usize) } else { lru_touch(st.order, w) };
            w
        } else if plru {
            let w = plru_victim(st.order, ways as usize) as u32;
            st.order = plru_touch(st.order, w as usize, ways as usize);
            w
        } else {
            // The least recent way, last in the order, moves to the front: a rotation.
            let w = ((st.order >> (4 * (ways - 1))) & 0xF) as u32;
            st.order = ((st.order << 4 | w as u64) & order_mask) | !order_mask;
            w
        };
        st.fp = fp.with(victim, fingerprint(tag));
        self.tags[set * ways as usize + victim as usize] = tag;
    }
    #[inline(always)]
    fn lookup(&mut self, index: u64, tag: u64) -> bool {
        let set = self.set_of(index);
        match self.find(set, self.state[set].fp, tag) {
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
        self.fill_set(set, self.state[set].fp, tag);
    }
    #[inline(always)]
    fn lookup_or_fill(&mut self, index: u64, tag: u64) -> bool {
        let set = self.set_of(index);
        let fp = self.state[set].fp;
        match self.find(set, fp, tag) {
            Some(w) => {
                self.touch(set, w);
                true
            }
            None => {
                self.fill_set(set, fp, tag);
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
                let st = &mut self.state[i / ways];
                st.fp = st.fp.with((i % ways) as u32, 0);
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

/// The most entries of a `FullyAssoc`.
pub const FULL_MAX: u32 = 128;
/// Buckets of a `FullyAssoc`, one row of fingerprints each.
const BUCKETS: usize = 16;
/// The positions of a bucket's row that hold slots: 15 of the 16. Slot 255 (position 15 of the
/// last bucket) is never used: it is the recency list's sentinel.
const BUCKET_SLOTS: u32 = 0x7FFF;
const SENTINEL: u8 = u8::MAX;

/// A fully-associative LRU array of at most `FULL_MAX` entries: a hash table of 16 buckets of 15
/// slots, each bucket a row of fingerprints, and a circular doubly-linked recency list over the
/// slots (most recent after the sentinel, least recent before it). A tag lives in the bucket its
/// hash picks, or if that one is full in the next with room (each bucket counts the entries that
/// went past it, so a lookup goes on to the next bucket only if that count is not 0: F14's
/// overflow counts). A lookup compares one row of fingerprints, then the tags of the slots whose
/// fingerprint matches, like `Sets`; a fill evicts the least recent entry once the array is full
/// and puts the new one first. With 72 entries a bucket holds 4.5 on average, so a miss rarely
/// meets a fingerprint that matches by chance, and a fill's writes to two rows seldom touch the
/// row the next lookup reads. Fixed-size arrays indexed by a byte or a masked bucket number need
/// no bounds checks.
#[derive(Clone, Debug)]
pub struct FullyAssoc {
    entries: u32,
    used: u32,
    /// A fingerprint per slot, 0 = free.
    fp: [Row; BUCKETS],
    /// Per bucket, the entries stored beyond it that hash to it or to a bucket before it.
    overflow: [u8; BUCKETS],
    /// The tag of each slot, 0 = free.
    tags: [u64; 256],
    prev: [u8; 256],
    next: [u8; 256],
}

/// The bucket and the fingerprint of a tag in a `FullyAssoc` (disjoint bits of one hash).
#[inline(always)]
fn bucket_of(tag: u64) -> (usize, u8) {
    let h = tag.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((h >> 60) as usize, ((h >> 52) as u8).max(1))
}

impl FullyAssoc {
    fn new(entries: u32) -> Box<Self> {
        assert!(entries <= FULL_MAX);
        let mut a = Box::new(FullyAssoc {
            entries,
            used: 0,
            fp: [Row::zero(); BUCKETS],
            overflow: [0; BUCKETS],
            tags: [0; 256],
            prev: [0; 256],
            next: [0; 256],
        });
        a.prev[SENTINEL as usize] = SENTINEL;
        a.next[SENTINEL as usize] = SENTINEL;
        a
    }
    /// The slot holding `tag`, if any; `(b, f)` is `bucket_of(tag)`.
    #[inline(always)]
    fn find(&self, tag: u64, (mut b, f): (usize, u8)) -> Option<u8> {
        loop {
            let mut m = self.fp[b].eq_mask(f) & BUCKET_SLOTS;
            while m != 0 {
                let s = (16 * b) as u8 | m.trailing_zeros() as u8;
                if self.tags[s as usize] == tag {
                    return Some(s);
                }
                m &= m - 1;
            }
            if self.overflow[b] == 0 {
                return None;
            }
            b = (b + 1) % BUCKETS;
        }
    }
    #[inline(always)]
    fn unlink(&mut self, s: u8) {
        let (p, n) = (self.prev[s as usize], self.next[s as usize]);
        self.next[p as usize] = n;
        self.prev[n as usize] = p;
    }
    #[inline(always)]
    fn push_front(&mut self, s: u8) {
        let h = self.next[SENTINEL as usize];
        self.next[s as usize] = h;
        self.prev[s as usize] = SENTINEL;
        self.prev[h as usize] = s;
        self.next[SENTINEL as usize] = s;
    }
    #[inline(always)]
    fn touch(&mut self, s: u8) {
        self.unlink(s);
        self.push_front(s);
    }
    #[inline(always)]
    fn lookup(&mut self, tag: u64) -> bool {
        match self.find(tag, bucket_of(tag)) {
            Some(s) => {
                self.touch(s);
                true
            }
            None => false,
        }
    }
    #[inline(always)]
    fn lookup_or_fill(&mut self, tag: u64) -> bool {
        let bf = bucket_of(tag);
        match self.find(tag, bf) {
            Some(s) => {
                self.touch(s);
                true
            }
            None => {
                self.insert(tag, bf);
                false
            }
        }
    }
    #[inline(always)]
    fn fill(&mut self, tag: u64) {
        self.insert(tag, bucket_of(tag));
    }
    /// Frees slot `s` (in use): its fingerprint, tag, list links and the overflow counts of the
    /// buckets its tag's probe passed.
    #[inline(always)]
    fn remove(&mut self, s: u8) {
        let at = s as usize / 16;
        let (mut b, _) = bucket_of(self.tags[s as usize]);
        while b != at {
            self.overflow[b] -= 1;
            b = (b + 1) % BUCKETS;
        }
        let r = &mut self.fp[at];
        *r = r.with(s as u32, 0);
        self.tags[s as usize] = 0;
        self.unlink(s);
    }
    /// Inserts `tag` (absent; `(b, f)` is `bucket_of(tag)`), evicting the least recent entry if
    /// the array is full.
    #[inline(always)]
    fn insert(&mut self, tag: u64, (mut b, f): (usize, u8)) {
        if self.used == self.entries {
            self.remove(self.prev[SENTINEL as usize]);
        } else {
            self.used += 1;
        }
        // 16 buckets of 15 slots hold more than `FULL_MAX` entries: a bucket with room exists.
        let s = loop {
            let free = self.fp[b].eq_mask(0) & BUCKET_SLOTS;
            if free != 0 {
                break (16 * b) as u8 | free.trailing_zeros() as u8;
            }
            self.overflow[b] += 1;
            b = (b + 1) % BUCKETS;
        };
        let r = &mut self.fp[b];
        *r = r.with(s as u32, f);
        self.tags[s as usize] = tag;
        self.push_front(s);
    }
    fn invalidate_if(&mut self, pred: impl Fn(u64) -> bool) -> u64 {
        let mut n = 0;
        for s in 0..SENTINEL {
            let t = self.tags[s as usize];
            if t != 0 && pred(t) {
                self.remove(s);
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
        let distinct = g.entries as u64 * 2;
        same_as_reference_on(g, |x| x % distinct);
    }

    /// `same_as_reference` with the keys `key_of` makes of random numbers (the index is the key,
    /// the tag the key with the top bit set); returns the fast form.
    fn same_as_reference_on(g: Geometry, key_of: impl Fn(u64) -> u64) -> Array {
        let mut f = Array::new(g);
        assert!(!matches!(f, Array::Set(_)), "{g:?} has no fast form");
        let mut r = Array::Set(SetAssoc::new(g));
        let mut x: u64 = 0x2545_F491_4F6C_DD1D ^ g.entries as u64;
        for i in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = key_of(x);
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
        f
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
    fn preset_geometries_match_the_reference() {
        let mut seen = Vec::new();
        for p in crate::PRESETS {
            let specs = p.l1.iter().chain(p.l2).map(|s| s.geometry);
            for g in specs.chain(p.pwc.iter().flatten().copied()) {
                if !seen.contains(&g) {
                    seen.push(g);
                    same_as_reference(g);
                }
            }
        }
        // The fully-associative L1 DTLBs of 32 to 72 entries are `FullyAssoc`s.
        assert!(seen.iter().filter(|g| matches!(Array::new(**g), Array::Full(_))).count() >= 4);
    }

    #[test]
    fn full_bucket_overflow_matches_the_reference() {
        // Keys whose tags hash to the last two of the 16 buckets: 72 entries overflow them into
        // the following ones (wrapping to bucket 0), and lookups, evictions and invalidations
        // must follow and unwind the overflow counts.
        let keys: Vec<u64> = (0..).filter(|&k| bucket_of((1 << 63) | k).0 >= 14).take(150).collect();
        let f = same_as_reference_on(Geometry::full(72), |x| keys[(x % keys.len() as u64) as usize]);
        let Array::Full(f) = f else { panic!("not a FullyAssoc") };
        assert!(f.overflow[14] > 0 && f.overflow[15] > 0, "no overflow: {:?}", f.overflow);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn sse2_row_matches_swar_row() {
        let (mut a, mut b) = (row::Row::zero(), swar_row::Row::zero());
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Few distinct byte values, so that rows hold repeats and zeros.
            let (i, v, probe) = ((x >> 8) as u32 % 16, (x >> 16) as u8 % 6, (x >> 24) as u8 % 6);
            a = a.with(i, v);
            b = b.with(i, v);
            assert_eq!(a.eq_mask(probe), b.eq_mask(probe));
            assert_eq!(a.eq_mask(0), b.eq_mask(0));
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
