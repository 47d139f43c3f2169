//! Memory nodes and tiers (model-only beyond one node): a machine's NUMA nodes with capacity,
//! load latency and bandwidth, their memory tiers by abstract distance, and the demotion order
//! between tiers.
//!
//! Kernel sources (6.18): mm/memory-tiers.c (`mt_perf_to_adistance`: a node's abstract distance
//! from its latency and bandwidth relative to DRAM's; `establish_demotion_targets`: the top tier
//! is the first tier holding a node with CPUs, `top_tier_adistance` its start plus one chunk;
//! `node_is_toptier`; `next_demotion_node`), include/linux/memory-tiers.h (`MEMTIER_CHUNK_BITS`,
//! `MEMTIER_ADISTANCE_DRAM`). The kernel sums read and write latency and bandwidth; a node here
//! has one figure of each (read = write). Where the kernel chooses among several nodes of the
//! next lower tier by node distance, the model takes the lowest-numbered one (no distance table).
//!
//! The API is small on purpose (h8's host side uses it): [`Tiers::single`] is the one-node
//! machine every earlier result runs on; [`Tiers::new`] takes [`NodeSpec`]s (presets by
//! [`NodeKind`]); a node's pages are accounted with [`Tiers::charge`]/[`Tiers::uncharge`];
//! [`Tiers::can_alloc`] says whether an order fits; [`Tiers::load_ns`] prices an access.
//! Nothing here is read or written by the fault path yet: a workload's memory is on node 0.

/// A node number (`int nid`).
pub type NodeId = u8;

/// Nodes a machine may have (`MAX_NUMNODES` of a 64-node build).
pub const MAX_NUMNODES: usize = 64;

/// include/linux/memory-tiers.h: one tier spans `1 << MEMTIER_CHUNK_BITS` of abstract distance.
pub const MEMTIER_CHUNK_BITS: u32 = 7;
pub const MEMTIER_CHUNK_SIZE: u32 = 1 << MEMTIER_CHUNK_BITS;
/// The abstract distance of DRAM: 4.5 chunks (576).
pub const MEMTIER_ADISTANCE_DRAM: u32 = 4 * MEMTIER_CHUNK_SIZE + (MEMTIER_CHUNK_SIZE >> 1);

/// A set of nodes (`nodemask_t`), bit `nid` for node `nid`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeMask(pub u64);

impl NodeMask {
    pub fn of(nodes: &[NodeId]) -> NodeMask {
        NodeMask(nodes.iter().fold(0, |m, &n| m | 1u64 << n))
    }
    pub fn contains(self, nid: NodeId) -> bool {
        (nid as usize) < MAX_NUMNODES && self.0 >> nid & 1 == 1
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// `nodes_weight`.
    pub fn weight(self) -> u32 {
        self.0.count_ones()
    }
    /// `first_node`, `None` for an empty mask.
    pub fn first(self) -> Option<NodeId> {
        (self.0 != 0).then(|| self.0.trailing_zeros() as NodeId)
    }
    /// `next_node_in`: the next node after `nid` in the mask, wrapping around.
    pub fn next_in(self, nid: NodeId) -> Option<NodeId> {
        let above = if nid as usize >= MAX_NUMNODES - 1 { 0 } else { self.0 & !((2u64 << nid) - 1) };
        if above != 0 { Some(above.trailing_zeros() as NodeId) } else { self.first() }
    }
    pub fn iter(self) -> impl Iterator<Item = NodeId> {
        (0..MAX_NUMNODES as NodeId).filter(move |&n| self.contains(n))
    }
}

/// The presets of a node (model-only figures, illustrative: one load's latency from the CPU
/// the workload runs on, and the node's bandwidth).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// DRAM on the CPU's socket: 90 ns, 100 GB/s (has CPUs).
    LocalDram,
    /// DRAM on the other socket: 150 ns, 60 GB/s (has CPUs).
    RemoteSocket,
    /// CXL-attached DRAM (a memory-only node): 250 ns, 30 GB/s.
    CxlDram,
    /// A slow tier (persistent-memory class, memory-only): 400 ns, 10 GB/s.
    Slow,
}

impl NodeKind {
    pub const ALL: [NodeKind; 4] = [NodeKind::LocalDram, NodeKind::RemoteSocket, NodeKind::CxlDram, NodeKind::Slow];
    /// (latency in ns, bandwidth in MB/s).
    pub fn preset(self) -> (u32, u32) {
        match self {
            NodeKind::LocalDram => (90, 100_000),
            NodeKind::RemoteSocket => (150, 60_000),
            NodeKind::CxlDram => (250, 30_000),
            NodeKind::Slow => (400, 10_000),
        }
    }
    /// Whether the node has CPUs (`N_CPU`): only DRAM nodes do.
    pub fn has_cpus(self) -> bool {
        matches!(self, NodeKind::LocalDram | NodeKind::RemoteSocket)
    }
    pub fn name(self) -> &'static str {
        match self {
            NodeKind::LocalDram => "dram",
            NodeKind::RemoteSocket => "remote",
            NodeKind::CxlDram => "cxl",
            NodeKind::Slow => "slow",
        }
    }
    /// The kind a name gives (`dram`, `remote`, `cxl`, `slow`).
    pub fn parse(s: &str) -> Result<NodeKind, String> {
        NodeKind::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| {
            let names: Vec<&str> = NodeKind::ALL.iter().map(|k| k.name()).collect();
            format!("unknown node kind '{s}': valid are {}", names.join(", "))
        })
    }
}

/// What a node is given at boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    pub kind: NodeKind,
    /// Capacity in base pages.
    pub pages: u64,
    pub latency_ns: u32,
    pub bandwidth_mbps: u32,
}

impl NodeSpec {
    /// A node of `kind` with its preset latency and bandwidth.
    pub fn preset(kind: NodeKind, pages: u64) -> NodeSpec {
        let (latency_ns, bandwidth_mbps) = kind.preset();
        NodeSpec { kind, pages, latency_ns, bandwidth_mbps }
    }
}

/// One node (`struct pglist_data`, the parts tiering reads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub id: NodeId,
    pub spec: NodeSpec,
    /// Abstract distance (`mt_perf_to_adistance`).
    pub adistance: u32,
    pub used_pages: u64,
    /// The largest order a free block has (fragmentation: 10 on a fresh node). A folio of a
    /// higher order cannot be allocated here even with enough free pages.
    pub max_free_order: u8,
}

impl Node {
    pub fn free_pages(&self) -> u64 {
        self.spec.pages.saturating_sub(self.used_pages)
    }
    /// The start of the node's memory tier (`memtier->adistance_start`).
    pub fn tier_start(&self) -> u32 {
        self.adistance & !(MEMTIER_CHUNK_SIZE - 1)
    }
}

/// `mt_perf_to_adistance`: DRAM's distance scaled by latency over DRAM's and DRAM's bandwidth
/// over this one's.
pub fn mt_perf_to_adistance(latency_ns: u32, bandwidth_mbps: u32) -> u32 {
    let (dram_lat, dram_bw) = NodeKind::LocalDram.preset();
    let adist = MEMTIER_ADISTANCE_DRAM as u64 * latency_ns as u64 / dram_lat as u64 * dram_bw as u64
        / bandwidth_mbps.max(1) as u64;
    adist.min(u32::MAX as u64) as u32
}

/// A machine's nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tiers {
    pub nodes: Vec<Node>,
    /// `top_tier_adistance`.
    top_tier_adistance: u32,
}

impl Tiers {
    /// One local DRAM node of `pages`: the machine every result ran on before nodes existed.
    pub fn single(pages: u64) -> Tiers {
        Tiers::new(&[NodeSpec::preset(NodeKind::LocalDram, pages)]).expect("one DRAM node is valid")
    }

    /// Nodes 0.. from `specs`; at least one must have CPUs (a DRAM node), at most 64.
    pub fn new(specs: &[NodeSpec]) -> Result<Tiers, String> {
        if specs.is_empty() || specs.len() > MAX_NUMNODES {
            return Err(format!("a machine has 1 to {MAX_NUMNODES} nodes, not {}", specs.len()));
        }
        let nodes: Vec<Node> = specs.iter().enumerate().map(|(i, s)| {
            // DRAM nodes have the default DRAM memory type whatever their latency (the kernel
            // gives CPU nodes `default_dram_type`); memory-only nodes get theirs from perf.
            let adistance = if s.kind.has_cpus() {
                MEMTIER_ADISTANCE_DRAM
            } else {
                mt_perf_to_adistance(s.latency_ns, s.bandwidth_mbps)
            };
            Node { id: i as NodeId, spec: *s, adistance, used_pages: 0, max_free_order: 10 }
        }).collect();
        let top = nodes.iter().filter(|n| n.spec.kind.has_cpus()).map(|n| n.tier_start()).min()
            .ok_or("a machine needs a node with CPUs (dram or remote)")?;
        Ok(Tiers { nodes, top_tier_adistance: top + MEMTIER_CHUNK_SIZE - 1 })
    }

    pub fn node(&self, nid: NodeId) -> &Node {
        &self.nodes[nid as usize]
    }
    /// Every node (`node_states[N_MEMORY]`).
    pub fn online(&self) -> NodeMask {
        NodeMask((0..self.nodes.len()).fold(0, |m, n| m | 1u64 << n))
    }
    /// `node_is_toptier`.
    pub fn node_is_toptier(&self, nid: NodeId) -> bool {
        self.node(nid).tier_start() <= self.top_tier_adistance
    }
    /// `next_demotion_node`: a node of the nearest tier below `nid`'s, or `None` at the bottom.
    pub fn next_demotion_node(&self, nid: NodeId) -> Option<NodeId> {
        let mine = self.node(nid).tier_start();
        let next = self.nodes.iter().map(|n| n.tier_start()).filter(|&t| t > mine).min()?;
        self.nodes.iter().find(|n| n.tier_start() == next).map(|n| n.id)
    }
    /// The fastest tier's nodes, for a promotion target.
    pub fn top_tier(&self) -> NodeMask {
        NodeMask(self.nodes.iter().filter(|n| self.node_is_toptier(n.id)).fold(0, |m, n| m | 1u64 << n.id))
    }
    /// The nodes in fallback order from `nid` (the zonelist): `nid` first, then by latency, then
    /// by number.
    pub fn zonelist(&self, nid: NodeId) -> Vec<NodeId> {
        let mut rest: Vec<&Node> = self.nodes.iter().filter(|n| n.id != nid).collect();
        rest.sort_by_key(|n| (n.spec.latency_ns, n.id));
        std::iter::once(nid).chain(rest.into_iter().map(|n| n.id)).collect()
    }
    /// Whether a folio of `order` can be allocated on `nid` now.
    pub fn can_alloc(&self, nid: NodeId, order: u8) -> bool {
        let n = self.node(nid);
        n.free_pages() >= 1u64 << order && order <= n.max_free_order
    }
    pub fn charge(&mut self, nid: NodeId, order: u8) {
        assert!(self.can_alloc(nid, order), "node {nid} has no order-{order} block");
        self.nodes[nid as usize].used_pages += 1u64 << order;
    }
    pub fn uncharge(&mut self, nid: NodeId, order: u8) {
        let n = &mut self.nodes[nid as usize];
        n.used_pages = n.used_pages.checked_sub(1u64 << order).expect("uncharge of pages not charged");
    }
    /// The time of one load from `nid`.
    pub fn load_ns(&self, nid: NodeId) -> u64 {
        self.node(nid).spec.latency_ns as u64
    }
    /// The time to copy `pages` base pages from `src` to `dst`: at the slower node's bandwidth.
    pub fn copy_ns(&self, src: NodeId, dst: NodeId, pages: u64) -> u64 {
        let bw = self.node(src).spec.bandwidth_mbps.min(self.node(dst).spec.bandwidth_mbps).max(1) as u64;
        // MB/s = bytes per µs: ns = bytes * 1000 / bw.
        pages * 4096 * 1000 / bw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dram_is_tier_4_and_cxl_and_slow_sit_below_it() {
        // DRAM: 576, chunk 128: tier start 512. CXL 250 ns, 30 GB/s: 576 * 250/90 = 1600 (integer
        // steps: 576*250 = 144000 / 90 = 1600), * 100000/30000 = 5333; tier start 5248.
        assert_eq!(MEMTIER_ADISTANCE_DRAM, 576);
        assert_eq!(mt_perf_to_adistance(250, 30_000), 5333);
        let t = Tiers::new(&[
            NodeSpec::preset(NodeKind::LocalDram, 1000),
            NodeSpec::preset(NodeKind::CxlDram, 1000),
            NodeSpec::preset(NodeKind::Slow, 1000),
        ]).unwrap();
        assert_eq!(t.node(0).tier_start(), 512);
        assert_eq!(t.node(1).tier_start(), 5248);
        assert!(t.node_is_toptier(0) && !t.node_is_toptier(1) && !t.node_is_toptier(2));
        // Demotion goes one tier at a time: DRAM -> CXL -> slow -> none.
        assert_eq!(t.next_demotion_node(0), Some(1));
        assert_eq!(t.next_demotion_node(1), Some(2));
        assert_eq!(t.next_demotion_node(2), None);
        assert_eq!(t.top_tier(), NodeMask::of(&[0]));
    }

    #[test]
    fn two_sockets_are_both_top_tier_and_demote_nowhere() {
        let t = Tiers::new(&[
            NodeSpec::preset(NodeKind::LocalDram, 10),
            NodeSpec::preset(NodeKind::RemoteSocket, 10),
        ]).unwrap();
        assert!(t.node_is_toptier(1));
        assert_eq!(t.next_demotion_node(0), None);
        assert!(Tiers::new(&[NodeSpec::preset(NodeKind::CxlDram, 10)]).is_err());
    }

    #[test]
    fn nodemask_walks_like_next_node_in() {
        let m = NodeMask::of(&[1, 3]);
        assert_eq!((m.first(), m.next_in(1), m.next_in(3), m.weight()), (Some(1), Some(3), Some(1), 2));
        assert_eq!(NodeMask::default().next_in(0), None);
    }

    #[test]
    fn a_folio_fits_by_free_pages_and_the_largest_free_order() {
        let mut t = Tiers::single(1024);
        assert!(t.can_alloc(0, 9));
        t.charge(0, 9);
        t.charge(0, 8);
        assert!(!t.can_alloc(0, 9) && t.can_alloc(0, 8));
        t.uncharge(0, 8);
        t.nodes[0].max_free_order = 4;
        assert!(!t.can_alloc(0, 9) && t.can_alloc(0, 4));
        // 512 pages at 100 GB/s: 2 MiB / 100000 MB/s = 20971 ns.
        assert_eq!(t.copy_ns(0, 0, 512), 20_971);
    }
}
