//! Process images: the model's view of one process between execve and exit (its mm, its
//! relocation table for addresses the model placed elsewhere than the recording, its fd table),
//! and their retirement at exit or at a later execve, with the census taken before teardown
//! (kernel/exit.c: `exit_mm`; fs/exec.c: `exec_mmap` replaces the mm).

use super::*;

impl Image {
    /// The model address of a recorded address.
    pub(super) fn tr(&self, a: u64) -> u64 {
        if self.reloc.is_empty() {
            return a;
        }
        match self.reloc.range(..=a).next_back() {
            Some((&s, &(e, m))) if a < e => a - s + m,
            _ => a,
        }
    }

    /// The model ranges of a recorded range.
    pub(super) fn tr_range(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        if self.reloc.is_empty() {
            return vec![(start, end)];
        }
        let mut out = Vec::new();
        let mut at = start;
        while at < end {
            match self.reloc.range(..=at).next_back() {
                Some((&s, &(e, m))) if at < e => {
                    let stop = e.min(end);
                    out.push((at - s + m, stop - s + m));
                    at = stop;
                }
                _ => {
                    let next = self.reloc.range(at..).next().map_or(end, |(&s, _)| s).min(end);
                    out.push((at, next));
                    at = next;
                }
            }
        }
        out
    }

    /// Forget the translation of a recorded range (it was unmapped or replaced).
    pub(super) fn reloc_remove(&mut self, start: u64, end: u64) {
        if self.reloc.is_empty() {
            return;
        }
        let hit: Vec<(u64, (u64, u64))> = self.reloc.range(..end).filter(|(_, &(e, _))| e > start).map(|(&s, &v)| (s, v)).collect();
        for (s, (e, m)) in hit {
            self.reloc.remove(&s);
            if s < start {
                self.reloc.insert(s, (start, m));
            }
            if e > end {
                self.reloc.insert(end, (e, m + (end - s)));
            }
        }
    }

    pub(super) fn file_of(&self, fd: u64) -> FileRef {
        self.fds.get(&(fd as i32)).map_or(FileRef::Other, |&d| self.descs[d].file)
    }

    pub(super) fn install(&mut self, fd: i64, file: FileRef, append: bool, direct: bool) {
        self.descs.push(Desc { file, pos: 0, append, direct });
        self.fds.insert(fd as i32, self.descs.len() - 1);
    }
}

impl<'a> Replay<'a> {
    pub(super) fn new_image(&mut self, pid: u32, exe: String) -> Image {
        self.stats.images += 1;
        let mm = self.m.mm_alloc();
        self.m.switch_mm(mm);
        crate::views::start_explaining(self.m.kernel_mut(), self.explain);
        Image {
            mm,
            pid,
            ordinal: self.stats.images - 1,
            exe,
            stack: None,
            brk_known: false,
            from_exec: true,
            exec_snapshot: false,
            populate_faults: 0,
            files: FilePages::default(),
            file_gup_faults: 0,
            fds: HashMap::new(),
            descs: Vec::new(),
            sbs: HashMap::new(),
            reloc: BTreeMap::new(),
            relocating: false,
            pinned: Vec::new(),
            pinned_unknown: false,
        }
    }

    /// Fold a finished image (exit, or exec when `replaced`) into the totals, with its census,
    /// folio map and peak, taken before teardown.
    pub(super) fn retire(&mut self, img: Image, replaced: bool) {
        self.m.switch_mm(img.mm);
        let census = self.m.census_of_all();
        let mut vmas = crate::views::vma_maps(&self.m, Some(img.pid));
        // The VMA of the stack execve made (`vma_is_initial_stack`), as /proc/PID/maps names it.
        if let Some((_, top)) = img.stack {
            if let Some(v) = vmas.iter_mut().find(|v| v.start_addr() < top && top <= v.end_addr() && v.kind == "anon") {
                v.name = "[stack]".to_string();
            }
        }
        let peak = crate::views::peak_of(&self.m);
        // The mm is torn down at exit and at execve (exit_mmap), and the live kernel's counters
        // see it: folios straddling two VMAs are deferred-split, nr_anon falls back.
        self.m.step_current(Step::Exit);
        if self.check {
            if let Err(e) = self.m.check(None) {
                self.stats.warnings.push(format!("model invariant broken by exit_mmap: {e}"));
            }
        }
        let k = &mut self.m;
        // Faults inside execve (the new stack's top page) are before the program's count; GUP's
        // faults in its file mappings are in it.
        let minflt = k.stats().minflt - img.populate_faults + img.file_gup_faults;
        if img.from_exec && !img.exec_snapshot && img.ordinal != 0 {
            self.images_without_snapshot += 1;
        }
        self.done_minflt += minflt;
        self.stats.modelled_faults += minflt;
        self.done_images.push(ImageResult {
            pid: img.pid,
            image: img.ordinal,
            exe: img.exe,
            exec_snapshot: img.exec_snapshot,
            replaced,
            minflt,
            census,
            vmas,
            peak,
            fallbacks: k.stats().fallbacks,
            explain: k.kernel_mut().stats_mut().explain.take().map(|b| *b),
        });
    }
}
