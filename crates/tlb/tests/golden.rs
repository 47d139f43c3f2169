//! Golden statistics of long mixed streams, per preset and paging, to keep the model's behaviour
//! fixed while its data structures are made faster.
//!
//! Each stream mixes segments of uniform random, sequential and strided 4 KiB accesses, 4 KiB
//! PTEs in coalescable groups (contig_order 3 and 4), arm64 contpte 64 KiB blocks (cont bit),
//! 2 MiB PMDs (some with the cont-PMD bit), a few 1 GiB PUDs, and `flush_range` (4 KiB, 64 KiB,
//! 2 MiB, 1 GiB and odd-sized ranges) and `flush_all` calls in between. For every run the final
//! `TlbStats` and a hash of the sequence of outcomes (every access's L1 hit / L2 hit / walk refs)
//! must equal the table below.
//!
//! The table was produced by the implementation before the speed work of issue #11 item 7
//! (commit 1fd05b7c, branch tlb-speed): run this test, and on a mismatch it panics with the whole
//! table of the current implementation, ready to paste (only when the behaviour is meant to change).

use tlb::{presets, Outcome, PageSize, Paging, Tlb, TlbStats, Translation};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Virtual regions of the stream (all 1 GiB aligned) and their frames.
const R4K: u64 = 0x7f00_0000_0000; // 4 GiB of plain 4 KiB pages
const RCOAL: u64 = 0x7e00_0000_0000; // 256 MiB of 4 KiB PTEs in contiguous groups
const RCONT: u64 = 0x7d00_0000_0000; // 256 MiB of arm64 contpte 64 KiB blocks
const RPMD: u64 = 0x7c00_0000_0000; // 8 GiB of 2 MiB PMDs
const RPUD: u64 = 0x7b00_0000_0000; // 4 GiB of 1 GiB PUDs

fn frame(region: u64, off: u64) -> u64 {
    // A distinct frame range per region, preserving alignment.
    ((region >> 12) & 0xf_ffff_0000) + 0x100_0000 + (off >> 12)
}

fn t4k(page: u64) -> Translation {
    Translation::new(R4K + (page << 12), frame(R4K, page << 12), PageSize::K4)
}

/// One access of a segment of `kind`; `i` is its position in the segment, `a`/`b` its parameters.
fn access(kind: u64, i: u64, a: u64, b: u64, rng: &mut Rng) -> Translation {
    match kind {
        // Uniform random over 4 GiB.
        0 => t4k(rng.below(1 << 20)),
        // Uniform random over a small span (hits in L1/L2).
        1 => t4k(a + rng.below(1 + b % 3000)),
        // Sequential from `a`.
        2 => t4k((a + i) & ((1 << 20) - 1)),
        // Strided from `a` by `b` pages.
        3 => t4k((a + i * (1 + b % 600)) & ((1 << 20) - 1)),
        // 4 KiB PTEs in contiguous groups: order 3 or 4 (or 2, too small to coalesce anywhere).
        4 => {
            let off = (rng.below(1 << 16) << 12) | rng.below(4096);
            Translation { contig_order: [2, 3, 4][(a % 3) as usize], ..Translation::new(RCOAL + off, frame(RCOAL, off), PageSize::K4) }
        }
        // arm64 contpte: 16 PTEs with the contiguous bit (one 64 KiB block), sequential or random.
        5 => {
            let page = if b % 2 == 0 { (a + i) & 0xffff } else { rng.below(1 << 16) };
            Translation { cont: true, contig_order: 4, ..Translation::new(RCONT + (page << 12), frame(RCONT, page << 12), PageSize::K4) }
        }
        // 2 MiB PMDs, random offset; half of the segments with the cont-PMD bit.
        6 => {
            let off = rng.below(1 << 33);
            Translation { cont: b % 2 == 0, ..Translation::new(RPMD + off, frame(RPMD, off), PageSize::M2) }
        }
        // 1 GiB PUDs.
        _ => {
            let off = rng.below(1 << 32);
            Translation::new(RPUD + off, frame(RPUD, off), PageSize::G1)
        }
    }
}

/// Runs stream `seed` of about `n` accesses through a fresh TLB; returns the stats and a hash of the outcomes.
fn run(p: &'static tlb::CpuPreset, paging: Paging, seed: u64, n: u64) -> (TlbStats, u64) {
    let mut tlb = Tlb::new(p, paging);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ seed.wrapping_mul(0xD1B5_4A32_D192_ED03));
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut done = 0;
    while done < n {
        let r = rng.below(100);
        // Seed 0 is mostly random 4 KiB (the bench's stream), seed 1 mostly large pages, seed 2 even.
        let kind = match seed {
            0 => [0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7][(r % 12) as usize],
            1 => [0, 1, 4, 5, 5, 6, 6, 6, 7, 7][(r % 10) as usize],
            _ => r % 8,
        };
        let len = 1 + rng.below(if kind == 0 { 2000 } else { 300 });
        let (a, b) = (rng.below(1 << 20), rng.next());
        for i in 0..len {
            let t = access(kind, i, a, b, &mut rng);
            let code = match tlb.access(&t) {
                Outcome::L1Hit => 1,
                Outcome::L2Hit => 2,
                Outcome::Walk { refs } => 3 + refs as u64,
            };
            h = (h ^ code).wrapping_mul(0x0100_0000_01b3);
        }
        done += len;
        // Flushes between segments.
        match rng.below(40) {
            0 => tlb.flush_range(R4K + (rng.below(1 << 20) << 12), 4096),
            1 => tlb.flush_range(RCONT + (rng.below(1 << 12) << 16), 1 << 16),
            2 => tlb.flush_range(RPMD + (rng.below(1 << 12) << 21), 1 << 21),
            3 => tlb.flush_range(R4K + (rng.below(4) << 30), 1 << 30),
            4 => tlb.flush_range(RCOAL + rng.below(1 << 28), 1 + rng.below(1 << 22)),
            5 if rng.below(4) == 0 => tlb.flush_all(),
            _ => {}
        }
    }
    (*tlb.stats(), h)
}

type Row = (&'static str, &'static str, u64, [u64; 13], u64);

fn row_of(s: &TlbStats) -> [u64; 13] {
    let (g, ho) = (s.guest_refs, s.host_refs);
    [s.accesses, s.l1_hits, s.l2_hits, s.walks, s.walk_refs, g[0], g[1], g[2], g[3], ho[0], ho[1], ho[2], ho[3]]
}

/// (preset, paging, seed, [accesses, l1_hits, l2_hits, walks, walk_refs, guest_refs[0..4], host_refs[0..4]], flushed) and the outcome hash
/// in `HASHES` at the same index. Produced by commit 1fd05b7c (before the speed work).
#[rustfmt::skip]
const GOLDEN: &[Row] = &[
    ("zen4", "native", 0, [150155, 3279, 1842, 145034, 152380, 36, 224, 10693, 141427, 0, 0, 0, 0], 12219),
    ("zen4", "native", 1, [150075, 22489, 14849, 112737, 125062, 101, 999, 33933, 90029, 0, 0, 0, 0], 21319),
    ("zen4", "native", 2, [150460, 10040, 5626, 134794, 150894, 90, 658, 26097, 124049, 0, 0, 0, 0], 35381),
    ("zen4", "nested-4k", 0, [150155, 343, 449, 149363, 472675, 36, 3100, 10847, 142727, 82, 362, 9448, 306073], 12103),
    ("zen4", "nested-4k", 1, [150075, 1052, 723, 148300, 529099, 101, 22026, 39198, 99304, 230, 1557, 57754, 308929], 19937),
    ("zen4", "nested-4k", 2, [150460, 1375, 696, 148389, 506702, 90, 9170, 27076, 128162, 151, 889, 28277, 312887], 34986),
    ("zen4", "nested-2m", 0, [150155, 475, 718, 148962, 462782, 36, 2854, 10695, 142722, 211, 995, 305269, 0], 12111),
    ("zen4", "nested-2m", 1, [150075, 2051, 9411, 138613, 446405, 101, 16676, 34859, 99295, 734, 5196, 289544, 0], 20188),
    ("zen4", "nested-2m", 2, [150460, 1771, 2282, 146407, 474689, 90, 8091, 26164, 128160, 512, 2760, 308912, 0], 35046),
    ("zen4", "nested-1g", 0, [150155, 3279, 554, 146322, 453971, 36, 223, 10694, 142714, 315, 299989, 0, 0], 12128),
    ("zen4", "nested-1g", 1, [150075, 22489, 5301, 122285, 392590, 101, 992, 34259, 99251, 1099, 256888, 0, 0], 21033),
    ("zen4", "nested-1g", 2, [150460, 10040, 1500, 138920, 449785, 90, 658, 26125, 128147, 825, 293940, 0, 0], 35241),
    ("zen1", "native", 0, [150155, 3257, 1646, 145252, 277446, 47, 326, 135451, 141622, 0, 0, 0, 0], 3921),
    ("zen1", "native", 1, [150075, 22383, 12682, 115010, 193640, 142, 1347, 101797, 90354, 0, 0, 0, 0], 5567),
    ("zen1", "native", 2, [150460, 9940, 5228, 135292, 234584, 118, 874, 109346, 124246, 0, 0, 0, 0], 11228),
    ("zen1", "nested-4k", 0, [150155, 324, 295, 149536, 858610, 47, 3200, 135629, 142900, 238, 654, 144630, 431312], 3851),
    ("zen1", "nested-4k", 1, [150075, 981, 686, 148408, 737660, 142, 22377, 105436, 99405, 966, 2675, 130891, 375768], 5034),
    ("zen1", "nested-4k", 2, [150460, 1291, 640, 148529, 770423, 118, 9381, 110188, 128300, 605, 1626, 123689, 396516], 11007),
    ("zen1", "nested-2m", 0, [150155, 445, 511, 149199, 713284, 47, 2994, 135499, 142900, 183, 1022, 430639, 0], 3848),
    ("zen1", "nested-2m", 1, [150075, 1899, 5729, 142447, 591416, 142, 19027, 102813, 99400, 687, 5518, 363829, 0], 5051),
    ("zen1", "nested-2m", 2, [150460, 1654, 1674, 147132, 643580, 118, 8620, 109548, 128302, 466, 2806, 393720, 0], 11041),
    ("zen1", "nested-1g", 0, [150155, 3257, 372, 146526, 704395, 47, 326, 135496, 142895, 341, 425290, 0, 0], 3848),
    ("zen1", "nested-1g", 1, [150075, 22383, 3378, 124314, 531950, 142, 1340, 102369, 99390, 1154, 327555, 0, 0], 5362),
    ("zen1", "nested-1g", 2, [150460, 9940, 1168, 139352, 617835, 118, 874, 109515, 128299, 871, 378158, 0, 0], 11102),
    ("golden-cove", "native", 0, [150155, 3361, 402, 146392, 278833, 69, 2016, 133909, 142839, 0, 0, 0, 0], 5091),
    ("golden-cove", "native", 1, [150075, 22902, 4039, 123134, 211030, 243, 12311, 99131, 99345, 0, 0, 0, 0], 7617),
    ("golden-cove", "native", 2, [150460, 10293, 1170, 138997, 241169, 184, 5735, 107003, 128247, 0, 0, 0, 0], 15009),
    ("golden-cove", "nested-4k", 0, [150155, 384, 290, 149481, 858702, 101, 5033, 134051, 142845, 558, 5871, 138732, 431511], 5052),
    ("golden-cove", "nested-4k", 1, [150075, 1209, 503, 148363, 770160, 375, 35615, 102911, 99363, 1531, 17505, 126233, 386627], 6747),
    ("golden-cove", "nested-4k", 2, [150460, 1497, 474, 148489, 780199, 253, 14854, 107780, 128261, 1137, 9727, 118550, 399637], 14597),
    ("golden-cove", "nested-2m", 0, [150155, 449, 588, 149118, 779720, 101, 4734, 133917, 142845, 606, 66802, 430715, 0], 5078),
    ("golden-cove", "nested-2m", 1, [150075, 1747, 7129, 141199, 658326, 375, 30072, 99705, 99371, 1883, 56198, 370722, 0], 6943),
    ("golden-cove", "nested-2m", 2, [150460, 1709, 1871, 146880, 697729, 253, 13596, 107035, 128259, 1397, 51166, 396023, 0], 14817),
    ("golden-cove", "nested-1g", 0, [150155, 3361, 402, 146392, 1100873, 69, 2016, 133909, 142839, 396815, 425225, 0, 0], 5091),
    ("golden-cove", "nested-1g", 1, [150075, 22902, 4039, 123134, 807716, 243, 12311, 99131, 99345, 262522, 334164, 0, 0], 7617),
    ("golden-cove", "nested-1g", 2, [150460, 10293, 1170, 138997, 926828, 184, 5735, 107003, 128247, 305493, 380166, 0, 0], 15009),
    ("neoverse-n1", "native", 0, [150155, 4410, 997, 144748, 277025, 45, 1872, 133528, 141580, 0, 0, 0, 0], 3390),
    ("neoverse-n1", "native", 1, [150075, 31145, 10402, 108528, 193520, 132, 9984, 93943, 89461, 0, 0, 0, 0], 4727),
    ("neoverse-n1", "native", 2, [150460, 13640, 4394, 132426, 233298, 111, 4761, 104505, 123921, 0, 0, 0, 0], 9481),
    ("neoverse-n1", "nested-4k", 0, [150155, 259, 319, 149577, 858787, 45, 5033, 134141, 142941, 342, 5787, 138761, 431737], 3292),
    ("neoverse-n1", "nested-4k", 1, [150075, 842, 808, 148425, 769100, 140, 35618, 102961, 99420, 1012, 17297, 126088, 386564], 4169),
    ("neoverse-n1", "nested-4k", 2, [150460, 1098, 818, 148544, 779623, 117, 14853, 107826, 128316, 755, 9612, 118488, 399656], 9237),
    ("neoverse-n1", "nested-2m", 0, [150155, 1665, 566, 147924, 775824, 45, 4771, 133993, 141612, 307, 66751, 428345, 0], 3389),
    ("neoverse-n1", "nested-2m", 1, [150075, 10938, 6131, 133006, 632897, 140, 31235, 100180, 89632, 1022, 56495, 354193, 0], 4283),
    ("neoverse-n1", "nested-2m", 2, [150460, 5536, 1936, 142988, 685131, 117, 13838, 107150, 124059, 771, 51044, 388152, 0], 9335),
    ("neoverse-n1", "nested-1g", 0, [150155, 4410, 965, 144780, 699290, 45, 1869, 133543, 141612, 372, 421849, 0, 0], 3389),
    ("neoverse-n1", "nested-1g", 1, [150075, 31145, 10304, 108626, 496971, 138, 9999, 94002, 89544, 979, 302309, 0, 0], 4723),
    ("neoverse-n1", "nested-1g", 2, [150460, 13640, 4267, 132553, 600421, 111, 4770, 104601, 124051, 802, 366086, 0, 0], 9455),
    ("cortex-a57", "native", 0, [150155, 1518, 3602, 145035, 278955, 45, 1961, 135312, 141637, 0, 0, 0, 0], 2729),
    ("cortex-a57", "native", 1, [150075, 10261, 27938, 111876, 200956, 139, 11607, 99577, 89633, 0, 0, 0, 0], 3557),
    ("cortex-a57", "native", 2, [150460, 5088, 11567, 133805, 237751, 113, 5374, 108189, 124075, 0, 0, 0, 0], 7507),
    ("cortex-a57", "nested-4k", 0, [150155, 180, 374, 149601, 887908, 45, 5033, 135691, 142965, 353, 23523, 146963, 433335], 2644),
    ("cortex-a57", "nested-4k", 1, [150075, 664, 964, 148447, 789138, 140, 35620, 105447, 99440, 1094, 26170, 132133, 389094], 3256),
    ("cortex-a57", "nested-4k", 2, [150460, 842, 1055, 148563, 802099, 117, 14853, 110204, 128335, 815, 20560, 125143, 402072], 7359),
    ("cortex-a57", "nested-2m", 0, [150155, 1518, 665, 147972, 779069, 45, 4790, 135541, 141640, 305, 66760, 429988, 0], 2729),
    ("cortex-a57", "nested-2m", 1, [150075, 10261, 5962, 133852, 640991, 140, 31814, 102979, 89710, 1013, 56840, 358495, 0], 3332),
    ("cortex-a57", "nested-2m", 2, [150460, 5088, 2254, 143118, 690385, 117, 13911, 109578, 124085, 776, 51109, 390809, 0], 7425),
    ("cortex-a57", "nested-1g", 0, [150155, 1518, 3602, 145035, 703319, 45, 1961, 135312, 141637, 374, 423990, 0, 0], 2729),
    ("cortex-a57", "nested-1g", 1, [150075, 10261, 27938, 111876, 514775, 139, 11607, 99577, 89633, 987, 312832, 0, 0], 3557),
    ("cortex-a57", "nested-1g", 2, [150460, 5088, 11567, 133805, 610123, 113, 5374, 108189, 124075, 816, 371556, 0, 0], 7507),
    ("cortex-a53", "native", 0, [150155, 1388, 3804, 144963, 336070, 97, 63500, 130772, 141701, 0, 0, 0, 0], 1597),
    ("cortex-a53", "native", 1, [150075, 9883, 28953, 111239, 228063, 368, 46009, 91862, 89824, 0, 0, 0, 0], 1781),
    ("cortex-a53", "native", 2, [150460, 4495, 12551, 133414, 270827, 250, 45346, 101084, 124147, 0, 0, 0, 0], 4172),
    ("cortex-a53", "nested-4k", 0, [150155, 64, 428, 149663, 1034166, 97, 66725, 131352, 143027, 543, 66164, 135394, 490864], 1528),
    ("cortex-a53", "nested-4k", 1, [150075, 424, 1151, 148500, 874317, 374, 71885, 98574, 99490, 1523, 62165, 121483, 418823], 1710),
    ("cortex-a53", "nested-4k", 2, [150460, 292, 1545, 148623, 892114, 257, 55605, 103687, 128394, 1240, 52473, 113892, 436566], 4072),
    ("cortex-a53", "nested-2m", 0, [150155, 1388, 693, 148074, 1736954, 97, 66493, 131226, 141701, 452232, 457614, 487591, 0], 1597),
    ("cortex-a53", "nested-2m", 1, [150075, 9883, 4526, 135666, 1271877, 374, 68996, 97126, 89879, 302053, 321408, 392041, 0], 1737),
    ("cortex-a53", "nested-2m", 2, [150460, 4495, 2539, 143426, 1397905, 257, 54776, 103260, 124146, 340178, 349423, 425865, 0], 4090),
    ("cortex-a53", "nested-1g", 0, [150155, 1388, 3804, 144963, 1268327, 97, 63500, 130772, 141701, 451224, 481033, 0, 0], 1597),
    ("cortex-a53", "nested-1g", 1, [150075, 9883, 28953, 111239, 857718, 368, 46009, 91862, 89824, 290353, 339302, 0, 0], 1781),
    ("cortex-a53", "nested-1g", 2, [150460, 4495, 12551, 133414, 1010435, 250, 45346, 101084, 124147, 335367, 404241, 0, 0], 4172),
];
#[rustfmt::skip]
const HASHES: &[u64] = &[
    0xaebd04bff88ba83a, 0x38bd71f32409c875, 0xc6a213f6d614bbc3, 0xabc3370fec30779c, 0xec3f9e5cbf7d3302, 0xc8bf0fe1452892d5,
    0x2d0b3657925a70de, 0x174700393a6c715c, 0xb1795a102b783cd8, 0x2903e7b0cf982adb, 0xf2c8d58dbf0a3379, 0x60dc996b200d8e24,
    0x445b89919bac762c, 0x2b0c27639858bc3c, 0x263a6cc31c4c831f, 0x6120e2e937160dcb, 0xe92b56a27f21e570, 0xe94020e8ca5051da,
    0xb8aae763a5bf5d8d, 0xf206e55c231fb03d, 0x9e0f5be2aee41c9d, 0x1218356f368cb3a1, 0xd21ffd90c15b0996, 0xd889fc96fde17418,
    0x2b71a981679bf2df, 0x93c3e1b9d81da4cf, 0x6a5028ce5c1a40ae, 0xf8a503842bcc3c5a, 0xd9a6715638b445e7, 0x1c2e0091b7eecdce,
    0x0b9ad98837c737f8, 0x6b0b105a0d73ba13, 0x899613a83f567887, 0x30f505fb8262fdf3, 0xc072d566a2e95453, 0xe03b7551a87ac31f,
    0x8eb0d8d6828ca970, 0x798f0560402f630a, 0xf50fa2d47e1648bb, 0xd0adc81cbf4a2a00, 0x7ac7562b847763ca, 0x19e6dd3e9296d482,
    0x71be4f1ab3299758, 0xa533a7fe82f7d1f8, 0x2424ffd0ea00ab18, 0x55f1f7312fde0643, 0x9329e3d50401639b, 0x887f825d6ea77c89,
    0xf6da0b9d687eff2f, 0x690318995a5362c4, 0x5bf210dd05f37da1, 0x1379633d28fc90d0, 0x4e48218c561641ba, 0xb539631c2edc2c95,
    0xd6021e142fb405c0, 0x247b5d6ad1299d53, 0xbdaa82ca1d9f1bae, 0xe0f96347e83eb15b, 0x8cca1690f2d54321, 0xd62dc080f71b55fd,
    0xb3c6f694afc31ad8, 0x0f50bfbafe4fc4cc, 0x5010dcfc4555aa91, 0xd973ff65d9194348, 0x1cbcaced137410c2, 0xf668c7339e4bd8a0,
    0xec34a1aca95ee13f, 0x03bfb9e720f117b3, 0x3cc486b035c3ae01, 0x03a1f28bc129d13f, 0xce36eebd08f4a769, 0x67dc8ffac570d13b,
];

#[test]
fn golden_mixed_streams() {
    let mut rows = Vec::new();
    let mut hashes = Vec::new();
    for p in presets::PRESETS {
        for paging in [Paging::Native, Paging::Nested { host: PageSize::K4 }, Paging::Nested { host: PageSize::M2 }, Paging::Nested { host: PageSize::G1 }] {
            for seed in 0..3 {
                let (s, h) = run(p, paging, seed, 150_000);
                assert_eq!(s.accesses, s.l1_hits + s.l2_hits + s.walks);
                rows.push((p.name, paging.name(), seed, row_of(&s), s.flushed));
                hashes.push(h);
            }
        }
    }
    if rows.as_slice() != GOLDEN || hashes.as_slice() != HASHES {
        let mut t = String::from("const GOLDEN: &[Row] = &[\n");
        for r in &rows {
            t += &format!("    {r:?},\n");
        }
        t += "];\nconst HASHES: &[u64] = &[\n";
        for c in hashes.chunks(6) {
            t += &format!("    {},\n", c.iter().map(|h| format!("{h:#018x}")).collect::<Vec<_>>().join(", "));
        }
        t += "];\n";
        let first = rows.iter().zip(GOLDEN).position(|(a, b)| a != b);
        panic!("golden statistics differ (first differing row: {first:?}); the current implementation gives:\n{t}");
    }
}
