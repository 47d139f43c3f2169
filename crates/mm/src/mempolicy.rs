//! Memory policies (`mbind`, `set_mempolicy`) and the node each folio is allocated on
//! (model-only beyond one node).
//!
//! Kernel sources (6.18, mm/mempolicy.c): `mpol_new` and `mpol_set_nodemask` (the policy's nodes
//! are those given that are online; none left: EINVAL; MPOL_DEFAULT takes no nodes),
//! `get_vma_policy` (the interleave index `ilx` of a fault: the VMA's `vm_pgoff` and the
//! address's offset in the VMA, both in units of the folio's order), `policy_nodemask` (the
//! preferred node and the allowed nodes of each mode), `interleave_nid` (the `ilx`'th node of the
//! mask), `weighted_interleave_nid` (`ilx` modulo the sum of the weights, walked node by node),
//! `alloc_pages_mpol` (a PMD-order THP under a non-interleave policy that allows the node tries
//! that node alone, `__GFP_THISNODE | __GFP_NORETRY`, and falls back to other nodes only when
//! the fault may reclaim directly), `alloc_pages_preferred_many` (the mask first without
//! reclaim, then any node). Node fallback is [`Tiers::zonelist`] order.

use crate::memory_tiers::{NodeId, NodeMask, Tiers};
use crate::Errno;

/// `enum mempolicy_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Default,
    Preferred,
    Bind,
    Interleave,
    PreferredMany,
    WeightedInterleave,
}

impl Mode {
    pub const ALL: [Mode; 6] =
        [Mode::Default, Mode::Preferred, Mode::Bind, Mode::Interleave, Mode::PreferredMany, Mode::WeightedInterleave];
    /// The name a workload statement uses (numactl's words).
    pub fn name(self) -> &'static str {
        match self {
            Mode::Default => "default",
            Mode::Preferred => "preferred",
            Mode::Bind => "bind",
            Mode::Interleave => "interleave",
            Mode::PreferredMany => "preferred-many",
            Mode::WeightedInterleave => "weighted-interleave",
        }
    }
    pub fn parse(s: &str) -> Result<Mode, String> {
        Mode::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
            format!("unknown memory policy '{s}': valid are {}", names.join(", "))
        })
    }
}

/// A policy (`struct mempolicy`): its mode and nodes. Weighted interleave's weights are the
/// system's (/sys/kernel/mm/mempolicy/weighted_interleave/nodeN), carried here per node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mempolicy {
    pub mode: Mode,
    pub nodes: NodeMask,
    /// `iw_table`: weight per node (index = nid); empty: every weight 1.
    pub weights: Vec<u8>,
}

/// An interleave index for an allocation that has none (`NO_INTERLEAVE_INDEX`).
pub const NO_INTERLEAVE_INDEX: u64 = u64::MAX;

impl Mempolicy {
    /// The default policy: allocate on the local node.
    pub fn default_policy() -> Mempolicy {
        Mempolicy { mode: Mode::Default, nodes: NodeMask::default(), weights: Vec::new() }
    }

    /// `mpol_new` and `mpol_set_nodemask`: the policy `mbind`/`set_mempolicy` install, or EINVAL.
    pub fn new(tiers: &Tiers, mode: Mode, nodes: NodeMask, weights: Vec<u8>) -> Result<Mempolicy, Errno> {
        if mode == Mode::Default {
            return if nodes.is_empty() { Ok(Mempolicy::default_policy()) } else { Err(Errno::EINVAL) };
        }
        let nodes = NodeMask(nodes.0 & tiers.online().0);
        if nodes.is_empty() {
            return Err(Errno::EINVAL);
        }
        Ok(Mempolicy { mode, nodes, weights })
    }

    fn weight(&self, nid: NodeId) -> u32 {
        self.weights.get(nid as usize).map_or(1, |&w| w.max(1) as u32)
    }
}

/// `get_vma_policy`'s interleave index of a fault at `addr` in a VMA at `vm_start` with
/// `vm_pgoff`, for a folio of `order`.
pub fn interleave_index(vm_start: u64, vm_pgoff: u64, addr: u64, order: u8) -> u64 {
    (vm_pgoff >> order) + ((addr - vm_start) >> (12 + order as u32))
}

/// `interleave_nid`.
pub fn interleave_nid(pol: &Mempolicy, ilx: u64) -> NodeId {
    let target = ilx % pol.nodes.weight() as u64;
    let mut nid = pol.nodes.first().expect("a policy's nodes are not empty");
    for _ in 0..target {
        nid = pol.nodes.next_in(nid).expect("non-empty");
    }
    nid
}

/// `weighted_interleave_nid`.
pub fn weighted_interleave_nid(pol: &Mempolicy, ilx: u64) -> NodeId {
    let total: u64 = pol.nodes.iter().map(|n| pol.weight(n) as u64).sum();
    let mut target = ilx % total;
    let mut nid = pol.nodes.first().expect("a policy's nodes are not empty");
    while target != 0 {
        let w = pol.weight(nid) as u64;
        if target < w {
            break;
        }
        target -= w;
        nid = pol.nodes.next_in(nid).expect("non-empty");
    }
    nid
}

/// `policy_nodemask`: the node to try first and the nodes allowed (`None`: any).
pub fn policy_nodemask(pol: &Mempolicy, ilx: u64, local: NodeId) -> (NodeId, Option<NodeMask>) {
    match pol.mode {
        Mode::Default => (local, None),
        Mode::Preferred => (pol.nodes.first().unwrap_or(local), None),
        Mode::PreferredMany | Mode::Bind => (local, Some(pol.nodes)),
        Mode::Interleave => (interleave_nid(pol, ilx), None),
        Mode::WeightedInterleave => (weighted_interleave_nid(pol, ilx), None),
    }
}

/// `alloc_pages_mpol`: the node a folio of `order` at interleave index `ilx` is allocated on,
/// or `None` (the allocation fails: the fault falls back to a smaller order). `may_reclaim`:
/// the fault's GFP allows direct reclaim (defrag and MADV_HUGEPAGE decide it for a THP).
pub fn alloc_node(tiers: &Tiers, pol: &Mempolicy, order: u8, ilx: u64, local: NodeId, may_reclaim: bool) -> Option<NodeId> {
    let (nid, mask) = policy_nodemask(pol, ilx, local);
    let allowed = |n: NodeId| mask.is_none_or(|m| m.contains(n));
    if pol.mode == Mode::PreferredMany {
        // The preferred nodes first without reclaim, then every node.
        let first = tiers.zonelist(nid).into_iter().find(|&n| allowed(n) && tiers.can_alloc(n, order));
        return first.or_else(|| tiers.zonelist(nid).into_iter().find(|&n| tiers.can_alloc(n, order)));
    }
    let interleaved = matches!(pol.mode, Mode::Interleave | Mode::WeightedInterleave);
    if order == 9 && ilx != NO_INTERLEAVE_INDEX && !interleaved && allowed(nid) {
        if tiers.can_alloc(nid, order) {
            return Some(nid);
        }
        if !may_reclaim {
            return None;
        }
    }
    // Preferred's node is first in its own zonelist (the start node is not in `mask`'s way).
    let start = if allowed(nid) { nid } else { mask.and_then(|m| m.first()).unwrap_or(nid) };
    tiers.zonelist(start).into_iter().find(|&n| allowed(n) && tiers.can_alloc(n, order))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory_tiers::{NodeKind, NodeSpec};

    fn three(pages: u64) -> Tiers {
        Tiers::new(&[
            NodeSpec::preset(NodeKind::LocalDram, pages),
            NodeSpec::preset(NodeKind::RemoteSocket, pages),
            NodeSpec::preset(NodeKind::CxlDram, pages),
        ]).unwrap()
    }

    /// Place `n` order-0 folios of a VMA at 0 with pgoff 0 and list their nodes.
    fn place(t: &mut Tiers, pol: &Mempolicy, n: u64) -> Vec<NodeId> {
        (0..n).map(|i| {
            let nid = alloc_node(t, pol, 0, interleave_index(0, 0, i * 4096, 0), 0, true).expect("room");
            t.charge(nid, 0);
            nid
        }).collect()
    }

    #[test]
    fn each_policy_places_as_derived_by_hand() {
        // Default: local (0) until it is full (4 pages), then the zonelist: remote (150 ns)
        // before CXL (250 ns).
        let mut t = three(4);
        assert_eq!(place(&mut t, &Mempolicy::default_policy(), 9), [0, 0, 0, 0, 1, 1, 1, 1, 2]);
        // Bind {2}: node 2 only; the fifth fails.
        let mut t = three(4);
        let bind = Mempolicy::new(&t, Mode::Bind, NodeMask::of(&[2]), vec![]).unwrap();
        assert_eq!(place(&mut t, &bind, 4), [2, 2, 2, 2]);
        assert_eq!(alloc_node(&t, &bind, 0, 4, 0, true), None);
        // Preferred {2}: node 2, then the zonelist from 2: 0 (90 ns), then 1.
        let mut t = three(2);
        let pref = Mempolicy::new(&t, Mode::Preferred, NodeMask::of(&[2]), vec![]).unwrap();
        assert_eq!(place(&mut t, &pref, 5), [2, 2, 0, 0, 1]);
        // Interleave {0,2}: page i on the (i mod 2)'th node.
        let mut t = three(8);
        let il = Mempolicy::new(&t, Mode::Interleave, NodeMask::of(&[0, 2]), vec![]).unwrap();
        assert_eq!(place(&mut t, &il, 5), [0, 2, 0, 2, 0]);
        // Weighted interleave {0:3, 2:1}: ilx mod 4 = 0,1,2 -> node 0, 3 -> node 2.
        let mut t = three(8);
        let wil = Mempolicy::new(&t, Mode::WeightedInterleave, NodeMask::of(&[0, 2]), vec![3, 1, 1]).unwrap();
        assert_eq!(place(&mut t, &wil, 6), [0, 0, 0, 2, 0, 0]);
    }

    #[test]
    fn a_thp_under_bind_tries_its_node_alone_unless_it_may_reclaim() {
        let mut t = three(1024);
        t.nodes[0].max_free_order = 8;
        let pol = Mempolicy::default_policy();
        // Order 9 at a fault (ilx given): node 0 only without reclaim, so no THP.
        assert_eq!(alloc_node(&t, &pol, 9, 0, 0, false), None);
        // With direct reclaim (defrag=always or MADV_HUGEPAGE): any node, remote first.
        assert_eq!(alloc_node(&t, &pol, 9, 0, 0, true), Some(1));
        // Interleave allocates the standard way: the interleave node, else the zonelist.
        let il = Mempolicy::new(&t, Mode::Interleave, NodeMask::of(&[0, 2]), vec![]).unwrap();
        assert_eq!(alloc_node(&t, &il, 9, 0, 0, false), Some(1));
        assert_eq!(alloc_node(&t, &il, 9, 1, 0, false), Some(2));
    }

    #[test]
    fn mbind_wants_online_nodes() {
        let t = three(4);
        // Node 5 does not exist: the mask is empty once offline nodes are dropped.
        assert_eq!(Mempolicy::new(&t, Mode::Bind, NodeMask::of(&[5]), vec![]), Err(Errno::EINVAL));
        assert_eq!(Mempolicy::new(&t, Mode::Interleave, NodeMask::default(), vec![]), Err(Errno::EINVAL));
        assert_eq!(Mempolicy::new(&t, Mode::Default, NodeMask::of(&[0]), vec![]), Err(Errno::EINVAL));
        // {0, 5}: node 5 dropped, node 0 kept.
        assert_eq!(Mempolicy::new(&t, Mode::Bind, NodeMask::of(&[0, 5]), vec![]).unwrap().nodes, NodeMask::of(&[0]));
        assert_eq!(interleave_index(0x10000, 2, 0x10000 + 5 * 4096, 0), 7);
        assert_eq!(interleave_index(0, 0, 3 << 21, 9), 3);
    }
}
