//! The end of a replay: every image still alive retired, the counters summed, and the warnings
//! (placement misses among them) one sentence each.

use super::*;

/// Every warning of a replay, placement misses included, one sentence each: what the text output
/// prints and the JSON lists.
pub fn warnings(st: &ReplayStats, misses: &[PlacementMiss]) -> Vec<String> {
    let mut out = st.warnings.clone();
    if st.shmem_unmodelled > 0 {
        out.push(format!(
            "{} calls on shmem files the model could not replay (a write, ftruncate or fallocate that failed in the model where the kernel's succeeded, a fallocate mode it does not know): the pages they reach are not modelled (shmem_unmodelled)",
            st.shmem_unmodelled
        ));
    }
    if st.populate_failed > 0 {
        out.push(format!("{} populating calls failed in the model where the kernel's succeeded (populate_failed)", st.populate_failed));
    }
    let missed = st.placements_checked - st.placements_matched;
    if missed > 0 {
        out.push(format!(
            "{missed} of {} mappings without MAP_FIXED could not be placed where the kernel put them under the recording's knobs; they stay where recorded, and mappings the replay's knobs would move are not relocated from them",
            st.placements_checked
        ));
    }
    for m in misses {
        // An address, or the errno name of a model that found no room.
        let model = if m.model.starts_with("0x") { m.model.clone() } else { format!("nowhere ({})", m.model) };
        out.push(format!(
            "pid {}: {} mapping of {} bytes (hint {}): the kernel put it at {}, the model would at {model}",
            m.pid, m.backing, m.len, m.hint, m.recorded
        ));
    }
    if missed as usize > misses.len() {
        out.push(format!("{} more placement misses not listed", missed as usize - misses.len()));
    }
    out
}

/// Placement misses listed one by one; the rest are counted (`placements_checked` -
/// `placements_matched`).
pub const MAX_MISSES: usize = 20;

impl<'a> Replay<'a> {
    /// Finish: retire every image still alive and build the result.
    pub fn finish(mut self) -> Finished {
        // Children whose parent's clone record never came: their events as recorded.
        let pending: Vec<u32> = self.procs.iter().filter(|(_, p)| p.pending.is_some()).map(|(pid, _)| *pid).collect();
        for pid in pending {
            let (_, events) = self.procs.get_mut(&pid).and_then(|p| p.pending.take()).expect("pending");
            for ev in &events {
                let _ = self.run_event(ev);
            }
        }
        let pids: Vec<u32> = self.procs.keys().copied().collect();
        for pid in pids {
            self.exit(pid);
        }
        if self.images_without_snapshot > 0 {
            let why = if self.every_exec_snapshot {
                "although the recording snapshots every execve (a process killed while stopped there?)"
            } else {
                "the recording has only the first process's (made before thplab snapshotted every execve; record it again)"
            };
            self.stats.warnings.push(format!(
                "{} process images made by an execve have no exec snapshot, {why}: the model does not know their stack, heap, ELF and loader mappings, and checks their placements without them",
                self.images_without_snapshot
            ));
        }
        let passthrough: u64 = self.procs.values().map(|p| p.passthrough).sum();
        let minflt = self.done_minflt + passthrough;
        // One machine: its counters are every image's.
        let mut counters = self.done_counters;
        counters.add(&self.m.counters);
        let khugepaged = self.recorded_time.then(|| self.m.khugepaged_state().clone());
        let timeline = self.m.timeline().to_vec();
        let accesses = self.tlb.as_ref().map(|t| {
            let mut r = t.report_named(&self.access_names);
            r.recorded = Some(self.access_counts.clone());
            r
        });
        // One machine, one memcg: every process's major faults (pgmajfault) are the program's.
        let pressure = crate::pressure_lines(&self.m, self.m.reclaim_stats().pgmajfault);
        Finished { counters, minflt, images: self.done_images, stats: self.stats, misses: self.misses, khugepaged, io: self.io, timeline, accesses, pressure }
    }
}
