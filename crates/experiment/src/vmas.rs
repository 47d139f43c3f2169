//! Where a recorded program's model and live run part: per process, the address ranges whose
//! VMAs or folios differ. The live run measures each process's VMAs at its exit (smaps and the
//! pagemap census, `live.processes[].vmas`), the model lists its own at the same point (`vmas`,
//! with the recorded pid); both runs disable ASLR, so the same program lays out the same
//! addresses and a range can be set beside its counterpart.
//!
//! Processes are paired greedily in the order the live run saw them: each with the earliest
//! model image of its name (an image that ran to its exit, not replaced by an execve), the
//! images in the order the replay made them (`image`: `per_process` lists them as they ended). A live process's name is its comm
//! (the basename of the path execve was given, cut to the 15 bytes of TASK_COMM_LEN: `ld` for
//! x86_64-linux-gnu-ld.bfd) against the model's executable's, or, after a single execve, its
//! executable's basename; failing a name, the image where half its VMAs start.

use std::collections::BTreeSet;

use uapi::{RunResult, VmaMap};

pub use report::compare::print_parting;
pub use uapi::compare::{PartedRange, Parting};

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The name a process's executable gives it: the basename, cut to 15 bytes (TASK_COMM_LEN).
fn comm_of_exe(exe: &str) -> String {
    let base = basename(exe);
    let mut end = base.len().min(15);
    while !base.is_char_boundary(end) {
        end -= 1;
    }
    base[..end].to_string()
}

/// The VMAs the census measures on both sides: anonymous and shmem, not the model's file
/// placeholders.
fn measured(v: &VmaMap) -> bool {
    v.kind == "anon" || v.kind == "shmem"
}

/// The ranges where a recorded program's model and live run differ, process by process.
/// Empty when either side is not a program run.
pub fn parting(model: &RunResult, live: &RunResult) -> Parting {
    let mut out = Parting::default();
    let Some(images) = model.model.as_ref().and_then(|m| m.replay.as_ref()).map(|r| &r.per_process) else { return out };
    let Some(procs) = live.live.as_ref().and_then(|l| l.program.as_ref()).map(|p| &p.processes) else { return out };
    let mut free: Vec<&uapi::result::ReplayProcess> = images.iter().filter(|p| !p.replaced).collect();
    free.sort_by_key(|p| p.image);
    for lp in procs.iter().filter(|p| p.in_census) {
        let lv: Vec<&VmaMap> = lp.vmas.iter().filter(|v| measured(v)).collect();
        let starts: BTreeSet<&str> = lv.iter().map(|v| v.start.as_str()).collect();
        let model_vmas = |pid: u32| model.vmas.iter().filter(move |v| v.pid == Some(pid) && measured(v));
        let score = |m: &uapi::result::ReplayProcess| model_vmas(m.pid).filter(|v| starts.contains(v.start.as_str())).count();
        let named = |m: &uapi::result::ReplayProcess| match lp.execs {
            1 if !lp.exe.is_empty() => basename(&lp.exe) == basename(&m.exe),
            _ => lp.comm == comm_of_exe(&m.exe),
        };
        // The earliest of its name (processes of one program have one layout: the order they
        // appeared in is what tells them apart); failing a name (a process renamed, or exec'd
        // through a symlink more than once), the one with the most VMAs where its own start,
        // at least half of them.
        let best = free.iter().position(|m| named(m)).or_else(|| {
            free.iter().enumerate().filter(|(_, m)| score(m) >= (lv.len() / 2).max(1)).max_by_key(|(i, m)| (score(m), std::cmp::Reverse(*i))).map(|(i, _)| i)
        });
        let Some(i) = best else {
            out.unpaired_live.push(format!("{} {}", lp.pid, lp.comm));
            continue;
        };
        let m = free.remove(i);
        let mv: Vec<&VmaMap> = model_vmas(m.pid).collect();
        for (start, end, mvs, lvs) in clusters(&mv, &lv) {
            let same = mvs.len() == lvs.len() && mvs.iter().zip(&lvs).all(|(a, b)| a.start == b.start && a.end == b.end && a.census == b.census);
            let empty = |vs: &[&VmaMap]| vs.iter().all(|v| v.census.sizes.is_empty() && v.census.zero_page_ptes == 0 && v.census.huge_zero_pmds == 0);
            // A VMA that maps nothing on either side (a reservation, a guard) is no parting.
            if same || (empty(&mvs) && empty(&lvs)) {
                continue;
            }
            out.ranges.push(PartedRange {
                comm: lp.comm.clone(),
                model_pid: m.pid,
                live_pid: lp.pid,
                start: format!("{start:x}"),
                end: format!("{end:x}"),
                model: mvs.into_iter().cloned().collect(),
                live: lvs.into_iter().cloned().collect(),
            });
        }
    }
    out.unpaired_model = free.iter().map(|m| format!("{} {}", m.pid, comm_of_exe(&m.exe))).collect();
    out
}

/// Both sides' VMAs (each sorted, non-overlapping) grouped into maximal runs connected by
/// overlap: (start, end, the model's, live's).
#[allow(clippy::type_complexity)]
fn clusters<'a>(model: &[&'a VmaMap], live: &[&'a VmaMap]) -> Vec<(u64, u64, Vec<&'a VmaMap>, Vec<&'a VmaMap>)> {
    let mut all: Vec<(u64, u64, bool, &VmaMap)> =
        model.iter().map(|v| (v.start_addr(), v.end_addr(), true, *v)).chain(live.iter().map(|v| (v.start_addr(), v.end_addr(), false, *v))).collect();
    all.sort_by_key(|&(s, e, is_model, _)| (s, e, !is_model));
    let mut out: Vec<(u64, u64, Vec<&VmaMap>, Vec<&VmaMap>)> = Vec::new();
    for (s, e, is_model, v) in all {
        match out.last_mut() {
            Some(c) if s < c.1 => {
                c.1 = c.1.max(e);
                if is_model { c.2.push(v) } else { c.3.push(v) }
            }
            _ => out.push((s, e, if is_model { vec![v] } else { vec![] }, if is_model { vec![] } else { vec![v] })),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use uapi::result::{LiveProgramRun, LiveSection, ModelSection, ProgramProcess, ReplayProcess, ReplayReport};
    use thp_abi::Census;

    fn vma(start: u64, end: u64, name: &str, sizes: &[(&str, u64)], pid: Option<u32>) -> VmaMap {
        let mut census = Census::default();
        for &(k, n) in sizes {
            let e = census.sizes.entry(k.into()).or_default();
            e.folios = n;
            e.pte_mapped = n;
        }
        VmaMap { start: format!("{start:x}"), end: format!("{end:x}"), perms: "rw-p".into(), name: name.into(), kind: "anon".into(), pid, census, ..Default::default() }
    }

    /// gcc under 512K alone, before the brk fix: cc1's heap was one VMA in the model and the
    /// bss plus [heap] live (read from `thplab compare --record --json`); `as` was equal; a
    /// bash that exec'd gcc is replaced in the model and not measured; ld (comm `ld`, exe
    /// x86_64-linux-gnu-ld.bfd) pairs with the first made of two model images of it (listed as
    /// they ended, the later first); collect2 ran only live.
    #[test]
    fn a_split_heap_is_one_parted_range_of_its_process() {
        let mut model = RunResult::default();
        let image = |pid: u32, exe: &str, replaced: bool| ReplayProcess { pid, image: u64::from(pid - 100), exe: exe.into(), replaced, ..Default::default() };
        model.model = Some(ModelSection {
            replay: Some(ReplayReport {
                per_process: vec![
                    image(100, "/usr/bin/bash", true),
                    image(102, "/usr/lib/gcc/x86_64-linux-gnu/12/cc1", false),
                    image(103, "/usr/bin/x86_64-linux-gnu-as", false),
                    image(105, "/usr/bin/x86_64-linux-gnu-ld.bfd", false),
                    image(104, "/usr/bin/x86_64-linux-gnu-ld.bfd", false),
                ],
                ..Default::default()
            }),
            ..Default::default()
        });
        model.vmas = vec![
            vma(0x23cd000, 0x282d000, "", &[("4kB", 294), ("512kB", 3)], Some(102)),
            vma(0x7ffffffde000, 0x7ffffffff000, "[stack]", &[("4kB", 28)], Some(102)),
            vma(0x555555635000, 0x5555556a2000, "", &[("4kB", 82)], Some(103)),
        ];
        let proc_ = |pid: i32, comm: &str, vmas: Vec<VmaMap>| ProgramProcess { pid, comm: comm.into(), in_census: true, vmas, ..Default::default() };
        let mut live = RunResult::default();
        live.live = Some(LiveSection {
            program: Some(LiveProgramRun {
                processes: vec![
                    proc_(7, "cc1", vec![vma(0x23cd000, 0x256d000, "", &[("4kB", 98), ("512kB", 2)], None), vma(0x256d000, 0x282d000, "[heap]", &[("4kB", 267)], None), vma(0x7ffffffde000, 0x7ffffffff000, "[stack]", &[("4kB", 28)], None)]),
                    ProgramProcess { exe: "/usr/bin/x86_64-linux-gnu-as".into(), execs: 1, ..proc_(8, "as", vec![vma(0x555555635000, 0x5555556a2000, "", &[("4kB", 82)], None)]) },
                    ProgramProcess { exe: "/usr/bin/x86_64-linux-gnu-ld.bfd".into(), execs: 1, ..proc_(9, "ld", vec![]) },
                    proc_(10, "collect2", vec![]),
                ],
                ..Default::default()
            }),
            ..Default::default()
        });
        let p = parting(&model, &live);
        assert_eq!(p.ranges.len(), 1, "{p:#?}");
        let r = &p.ranges[0];
        assert_eq!((r.comm.as_str(), r.model_pid, r.live_pid, r.start.as_str(), r.end.as_str()), ("cc1", 102, 7, "23cd000", "282d000"));
        assert_eq!((r.model.len(), r.live.len()), (1, 2));
        assert_eq!(p.unpaired_model, ["105 x86_64-linux-gn"], "{p:#?}");
        assert_eq!(p.unpaired_live, ["10 collect2"]);
        let mut text = Vec::new();
        print_parting(&mut text, &p, 10).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("      model  23cd000-282d000               rw-p              4kB 294, 512kB 3\n"), "{text}");
        assert!(text.contains("      live   23cd000-256d000               rw-p              4kB 98, 512kB 2\n"), "{text}");
        assert!(text.contains("             256d000-282d000               rw-p [heap]       4kB 267\n"), "{text}");
    }

    #[test]
    fn comm_is_the_executables_basename_cut_to_15_bytes() {
        assert_eq!(comm_of_exe("/usr/bin/x86_64-linux-gnu-ld.bfd"), "x86_64-linux-gn");
        assert_eq!(comm_of_exe("/usr/lib/gcc/x86_64-linux-gnu/12/cc1"), "cc1");
        assert_eq!(comm_of_exe(""), "");
    }
}
