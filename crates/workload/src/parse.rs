//! The parser of the workload language. See docs/workload-format.md for the grammar.

use mm_types::{parse_size, PAGE_SIZE};

use std::collections::HashMap;

use crate::*;

mod hugetlb;

/// The most system calls one statement may stand for (`every=` repetitions, `write` chunks): a
/// statement that would make billions of calls is a mistake, and would take hours and, for
/// munmap holes, a VMA each.
const MAX_REPEATS: u64 = 1 << 24;

/// `every=` as written back in messages.
fn pos_text(b: u64) -> String {
    mm_types::format_size(b)
}

/// What `prot=` and `mprotect` accept (`Prot::parse`).
const PROT_VALID: &str = "none, or the letters r, w, x, each at most once, in any order (r, rw, rx, rwx, w, x, wx)";

struct Ctx<'a> {
    source: &'a str,
    line: usize,
    /// Every name declared so far, so that a lookup costs O(1) and a workload with tens of
    /// thousands of regions parses in linear time.
    names: &'a Names,
}

/// What a declared name refers to: its index in `regions`, `files` or `mounts`, and its line.
#[derive(Clone, Copy)]
enum Decl {
    Region(u32),
    File(u32),
    Mount(u32),
}

#[derive(Default)]
struct Names {
    map: HashMap<String, (Decl, usize)>,
    regions: usize,
    files: usize,
    mounts: usize,
}

impl Names {
    /// Index the declarations `w` gained since the last call.
    fn catch_up(&mut self, w: &Workload) {
        for (i, r) in w.regions.iter().enumerate().skip(self.regions) {
            self.map.insert(r.name.clone(), (Decl::Region(i as u32), r.line));
        }
        for (i, f) in w.files.iter().enumerate().skip(self.files) {
            self.map.insert(f.name.clone(), (Decl::File(i as u32), f.line));
        }
        for (i, m) in w.mounts.iter().enumerate().skip(self.mounts) {
            self.map.insert(m.name.clone(), (Decl::Mount(i as u32), m.line));
        }
        (self.regions, self.files, self.mounts) = (w.regions.len(), w.files.len(), w.mounts.len());
    }
    fn region(&self, name: &str) -> Option<RegionId> {
        match self.map.get(name) {
            Some((Decl::Region(i), _)) => Some(RegionId(*i)),
            _ => None,
        }
    }
    fn file(&self, name: &str) -> Option<FileId> {
        match self.map.get(name) {
            Some((Decl::File(i), _)) => Some(FileId(*i)),
            _ => None,
        }
    }
    fn mount(&self, name: &str) -> Option<MountId> {
        match self.map.get(name) {
            Some((Decl::Mount(i), _)) => Some(MountId(*i)),
            _ => None,
        }
    }
}

impl Ctx<'_> {
    fn err(&self, message: impl Into<String>) -> WorkloadError {
        WorkloadError { source_name: self.source.to_string(), line: self.line, message: message.into() }
    }
}

/// Every statement that opens a block closed by `}`, as the "closes no block" error names them.
pub const BLOCKS: [&str; 6] = ["fork NAME {", "thread NAME {", "vfork NAME {", "in NAME {", "repeat N {", "repeat DURATION {"];

const VERBS: &str =
    "mmap, munmap, mprotect, madvise, mlock, munlock, brk, prctl, touch, access, sleep, phase, repeat, read_direct, tmpfs, memfd, shm_open, file, ftruncate, fallocate, write, fork, thread, vfork, in, exit, wait, fragment, drop_caches, hugetlb_pool";

/// Parse workload text. `source` names it in errors (a path, or `<builtin>`).
pub fn parse(source: &str, text: &str) -> Result<Workload, WorkloadError> {
    let mut w = Workload {
        source: source.to_string(),
        regions: Vec::new(),
        files: Vec::new(),
        mounts: Vec::new(),
        procs: vec![ProcDecl { name: MAIN_PROC.into(), line: 0, parent: None, kind: ProcKind::Main }],
        ops: Vec::new(),
        hugetlb_pools: Vec::new(),
    };
    let mut seen_statement = false;
    let mut names = Names::default();
    let mut procs = Procs::default();
    // A byte-order mark (an editor's UTF-8 marker) at the start is no part of the first line.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    for (idx, raw) in text.lines().enumerate() {
        names.catch_up(&w);
        let cx = Ctx { source, line: idx + 1, names: &names };
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if words[0] == "thplab-workload" {
            if seen_statement {
                return Err(cx.err("the 'thplab-workload VERSION' header must come before any operation"));
            }
            match words.get(1).map(|v| v.parse::<u32>()) {
                Some(Ok(FORMAT_VERSION)) if words.len() == 2 => {}
                _ => {
                    return Err(cx.err(format!(
                        "unsupported header '{line}'; this thplab reads 'thplab-workload {FORMAT_VERSION}'"
                    )))
                }
            }
            continue;
        }
        seen_statement = true;
        if words[0] == "hugetlb_pool" {
            hugetlb::parse_pool(&cx, &mut w, &words[1..])?;
            continue;
        }
        if procs.repeat_block(&cx, &mut w, &words)? || procs.structure(&cx, &mut w, &words)? {
            continue;
        }
        let kind = parse_statement(&cx, &mut w, &words)?;
        let proc = procs.current();
        if procs.exited.contains(&proc) {
            return Err(cx.err(format!("process '{}' has exited (its 'exit' is above); nothing runs in it after that", w.proc(proc).name)));
        }
        if let OpKind::Wait(child) = kind {
            if !procs.exited.contains(&child) {
                return Err(cx.err(format!(
                    "'wait {}' would block forever: '{}' has not exited; end its block with 'exit' first",
                    w.proc(child).name,
                    w.proc(child).name
                )));
            }
            if proc != ProcId::MAIN {
                return Err(cx.err("only main waits for its children"));
            }
        }
        if kind == OpKind::Exit {
            if proc == ProcId::MAIN {
                return Err(cx.err("main exits at the end of the workload; 'exit' belongs in a child's block"));
            }
            procs.exited.push(proc);
        }
        w.ops.push(Op { line: cx.line, proc, kind });
    }
    if let Some(line) = procs.stack.last().map(|(_, l)| *l).or(procs.repeat.map(|r| r.line)) {
        let cx = Ctx { source, line, names: &names };
        return Err(cx.err("this block is never closed: end it with a line holding only '}'"));
    }
    Ok(w)
}

/// The process structure: which block the parser is in, and which processes have exited.
#[derive(Default)]
struct Procs {
    /// Open `fork NAME {` / `in NAME {` blocks: the process and the line of the block.
    stack: Vec<(ProcId, usize)>,
    exited: Vec<ProcId>,
    /// An open `repeat N {` block.
    repeat: Option<Repeat>,
}

/// `repeat N {` or `repeat DURATION {`: how often (a count, or `None` for a duration, whose
/// loop node is the operation before `first_op`), the first operation of its body, its line.
#[derive(Clone, Copy)]
struct Repeat {
    count: Option<u64>,
    first_op: usize,
    line: usize,
}

/// Most iterations the model runs of one `repeat DURATION` block (each must move its clock).
pub const MAX_REPEAT_ITERATIONS: u64 = 10_000_000;

/// The most operations a workload may have once its `repeat` blocks are written out.
pub const MAX_OPS: usize = 1_000_000;

impl Procs {
    fn current(&self) -> ProcId {
        self.stack.last().map_or(ProcId::MAIN, |(p, _)| *p)
    }

    fn by_name(w: &Workload, name: &str) -> Option<ProcId> {
        w.procs.iter().position(|p| p.name == name).map(|i| ProcId(i as u32))
    }

    /// `repeat N {` and the `}` that ends it: the body's statements run N times in a row (the
    /// parser writes them out N times, so the model and the live executor run the same
    /// operations). In main only, not nested, and without process statements, whose processes
    /// would be made or ended twice. Returns whether the line was one of them.
    fn repeat_block(&mut self, cx: &Ctx, w: &mut Workload, words: &[&str]) -> Result<bool, WorkloadError> {
        match words {
            ["repeat", rest @ ..] => {
                let [n, "{"] = rest else { return Err(cx.err("expected: repeat N {")) };
                let count = match n.parse::<u64>() {
                    Ok(c) if (1..=100_000).contains(&c) => Some(c),
                    _ => match duration_ns(n) {
                        Ok(0) => return Err(cx.err(format!("repeat {n} would run its block no time at all: give a positive duration (repeat 3s {{) or a count (repeat 3 {{)"))),
                        Ok(_) => None,
                        Err(_) => {
                            return Err(cx.err(format!(
                                "invalid repeat '{n}': write a count from 1 to 100000 (repeat 10 {{) or a duration with a unit ns, us, ms or s (repeat 3s {{)"
                            )))
                        }
                    },
                };
                if self.repeat.is_some() {
                    return Err(cx.err("repeat blocks do not nest: close the open one with '}' first"));
                }
                if !self.stack.is_empty() {
                    return Err(cx.err("repeat runs in main only: close the process block with '}' first"));
                }
                if count.is_none() {
                    // The loop node; its body's length is known at the '}'.
                    let ns = duration_ns(n).map_err(|m| cx.err(m))?;
                    w.ops.push(Op { line: cx.line, proc: ProcId::MAIN, kind: OpKind::RepeatFor { ns, body: 0 } });
                }
                self.repeat = Some(Repeat { count, first_op: w.ops.len(), line: cx.line });
                Ok(true)
            }
            ["}"] if self.stack.is_empty() => {
                let Some(r) = self.repeat.take() else { return Ok(false) };
                let Some(count) = r.count else {
                    // repeat DURATION: one loop node that both sides run until their clock says
                    // stop. Without a profile the model's clock moves only with sleeps and paced
                    // touches: a block with neither would never end there.
                    let body = &w.ops[r.first_op..];
                    let moves = body.iter().any(|o| match o.kind {
                        OpKind::Sleep { ns } => ns > 0,
                        OpKind::Touch(t) => t.pace.is_some(),
                        _ => false,
                    });
                    if !moves {
                        let cx = Ctx { line: r.line, ..*cx };
                        return Err(cx.err(
                            "this repeat DURATION block has no sleep and no paced touch: it takes no time in the model (without a profile only 'sleep' and \
                             touches with rate= or duration= move the simulated clock) and would never end there; add 'sleep DURATION' or a paced touch to the \
                             block, or repeat a count (repeat N {)",
                        ));
                    }
                    let n = body.len();
                    let OpKind::RepeatFor { body, .. } = &mut w.ops[r.first_op - 1].kind else { unreachable!("the loop node precedes its body") };
                    *body = n;
                    return Ok(true);
                };
                let body = w.ops[r.first_op..].to_vec();
                if w.ops.len() + body.len() * (count as usize - 1) > MAX_OPS {
                    return Err(cx.err(format!("repeat {} of {} statements makes more than {MAX_OPS} operations", count, body.len())));
                }
                for _ in 1..count {
                    w.ops.extend_from_slice(&body);
                }
                Ok(true)
            }
            [verb @ ("fork" | "thread" | "vfork" | "in" | "exit" | "wait"), ..] if self.repeat.is_some() => {
                let line = self.repeat.map_or(0, |r| r.line);
                Err(cx.err(format!("'{verb}' cannot be repeated (repeat on line {line}): it would make or end a process more than once")))
            }
            ["brk", ..] if self.repeat.is_some_and(|r| r.count.is_none()) => {
                let line = self.repeat.map_or(0, |r| r.line);
                Err(cx.err(format!(
                    "'brk' cannot be repeated for a time (repeat on line {line}): the heap's length would depend on how many times the block ran; repeat a count (repeat N {{) instead"
                )))
            }
            _ => Ok(false),
        }
    }

    /// `fork NAME [{]`, `thread NAME [{]`, `vfork NAME {`, `in NAME {` and `}`. Returns whether
    /// the line was one of them (a `fork`, `thread` or `vfork` is also pushed as an operation).
    fn structure(&mut self, cx: &Ctx, w: &mut Workload, words: &[&str]) -> Result<bool, WorkloadError> {
        match words {
            ["}"] => {
                let Some((p, _)) = self.stack.pop() else {
                    let kinds: Vec<String> = BLOCKS.iter().map(|b| format!("'{b}'")).collect();
                    return Err(cx.err(format!("'}}' closes no block (blocks open with {})", kinds.join(", "))));
                };
                if w.proc(p).kind == ProcKind::Vfork && !self.exited.contains(&p) {
                    let name = &w.proc(p).name;
                    return Err(cx.err(format!(
                        "main is suspended in vfork until '{name}' exits (vfork on line {}), so nothing else can run: end the block of '{name}' with 'exit' before '}}'",
                        w.proc(p).line
                    )));
                }
                Ok(true)
            }
            [verb @ ("fork" | "thread" | "vfork"), rest @ ..] => {
                let kind = match *verb {
                    "fork" => ProcKind::Fork,
                    "thread" => ProcKind::Thread,
                    _ => ProcKind::Vfork,
                };
                let usage = if kind == ProcKind::Vfork { "vfork NAME {".to_string() } else { format!("{verb} NAME [{{]") };
                let (name, open) = match rest {
                    [name] => (*name, false),
                    [name, "{"] => (*name, true),
                    _ => return Err(cx.err(format!("expected: {usage}"))),
                };
                if !valid_name(name) || name == MAIN_PROC {
                    return Err(cx.err(format!("invalid process name '{name}': letters, digits, '_' and '-', and not 'main'")));
                }
                if let Some(p) = Self::by_name(w, name) {
                    let was = w.proc(p).kind.word();
                    let done = if was == "fork" { "forked".to_string() } else { format!("created ('{was}')") };
                    return Err(cx.err(format!("process '{name}' is already {done} on line {}", w.proc(p).line)));
                }
                if self.current() != ProcId::MAIN {
                    let what = if kind == ProcKind::Fork { "a child that forks" } else { "a child or thread that creates tasks" };
                    return Err(cx.err(format!("{verb} runs in main only ({what} is not supported yet)")));
                }
                if cx.names.map.contains_key(name) {
                    return Err(cx.err(format!("'{name}' already names a region, file or mount")));
                }
                if kind == ProcKind::Vfork && !open {
                    // kernel/fork.c: the parent of clone(CLONE_VFORK) sleeps in wait_for_vfork_done
                    // until the child releases the mm (mm_release: exit or exec).
                    return Err(cx.err(format!(
                        "expected: {usage} (main is suspended until '{name}' exits, so its statements follow at once in a block that ends with 'exit')"
                    )));
                }
                let id = ProcId(w.procs.len() as u32);
                w.procs.push(ProcDecl { name: name.into(), line: cx.line, parent: Some(ProcId::MAIN), kind });
                let op = match kind {
                    ProcKind::Thread => OpKind::Thread(id),
                    ProcKind::Vfork => OpKind::Vfork(id),
                    _ => OpKind::Fork(id),
                };
                w.ops.push(Op { line: cx.line, proc: ProcId::MAIN, kind: op });
                if open {
                    self.stack.push((id, cx.line));
                }
                Ok(true)
            }
            ["in", rest @ ..] => {
                let [name, "{"] = rest else { return Err(cx.err("expected: in NAME {")) };
                let Some(id) = Self::by_name(w, name) else {
                    return Err(cx.err(format!("no process '{name}': fork it first ('fork {name}')")));
                };
                if !self.stack.is_empty() {
                    return Err(cx.err("'in' blocks do not nest: close the open block with '}' first"));
                }
                if self.exited.contains(&id) {
                    return Err(cx.err(format!("process '{name}' has exited; nothing runs in it after that")));
                }
                self.stack.push((id, cx.line));
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

fn parse_statement(cx: &Ctx, w: &mut Workload, words: &[&str]) -> Result<OpKind, WorkloadError> {
    let verb = words[0];
    let args = &words[1..];
    if verb != "touch" {
        if let Some(key) = args.iter().find_map(|a| ["rate=", "duration="].into_iter().find(|k| a.starts_with(k))) {
            return Err(cx.err(format!(
                "{key} paces a touch only ({TOUCH_USAGE}); '{verb}' takes no {key} (to wait, write 'sleep DURATION'; to repeat for a time, 'repeat DURATION {{')"
            )));
        }
    }
    match verb {
        "mmap" => parse_mmap(cx, w, args),
        "munmap" => {
            let (pos, opts) = split_options(cx, args, &["every"])?;
            expect_positional(cx, "munmap RANGE [every=SIZE]", &pos, 1)?;
            let range = parse_range(cx, w, pos[0], &opts, true)?;
            Ok(OpKind::Munmap(range))
        }
        "mlock" | "munlock" => {
            let (pos, opts) = split_options(cx, args, &["every"])?;
            expect_positional(cx, &format!("{verb} RANGE [every=SIZE]"), &pos, 1)?;
            let range = parse_range(cx, w, pos[0], &opts, true)?;
            Ok(if verb == "mlock" { OpKind::Mlock(range) } else { OpKind::Munlock(range) })
        }
        "mprotect" => {
            let (pos, opts) = split_options(cx, args, &["every"])?;
            expect_positional(cx, "mprotect RANGE PROT [every=SIZE]", &pos, 2)?;
            let range = parse_range(cx, w, pos[0], &opts, true)?;
            let prot = Prot::parse(pos[1]).ok_or_else(|| {
                cx.err(format!("invalid protection '{}'; valid: {PROT_VALID}", pos[1]))
            })?;
            Ok(OpKind::Mprotect(range, prot))
        }
        "madvise" => {
            let (pos, opts) = split_options(cx, args, &["every"])?;
            expect_positional(cx, "madvise RANGE ADVICE [every=SIZE]", &pos, 2)?;
            let range = parse_range(cx, w, pos[0], &opts, true)?;
            let advice = Advice::parse(pos[1]).ok_or_else(|| {
                cx.err(format!("unknown advice '{}'; valid: {}", pos[1], Advice::WORDS.join(", ")))
            })?;
            Ok(OpKind::Madvise(range, advice))
        }
        "brk" => parse_brk(cx, w, args),
        "prctl" => {
            let form = match args {
                ["thp_disable"] => ThpDisable::Completely,
                ["thp_disable", "except_advised"] => ThpDisable::ExceptAdvised,
                ["thp_enable"] => ThpDisable::Clear,
                _ => {
                    return Err(cx.err(
                        "valid forms: 'prctl thp_disable', 'prctl thp_disable except_advised', 'prctl thp_enable'",
                    ))
                }
            };
            Ok(OpKind::Prctl(form))
        }
        "touch" => parse_touch(cx, w, args),
        "fragment" => parse_fragment(cx, args),
        "drop_caches" => parse_drop_caches(cx, args),
        "exit" => {
            expect_positional(cx, "exit", args, 0)?;
            Ok(OpKind::Exit)
        }
        "wait" => {
            expect_positional(cx, "wait NAME", args, 1)?;
            match Procs::by_name(w, args[0]) {
                Some(p) if p != ProcId::MAIN => Ok(OpKind::Wait(p)),
                _ => Err(cx.err(format!("no child process '{}' to wait for", args[0]))),
            }
        }
        "phase" => {
            expect_positional(cx, "phase NAME", args, 1)?;
            Ok(OpKind::Phase(args[0].to_string()))
        }
        "sleep" => {
            let (pos, _) = split_options(cx, args, &[])?;
            expect_positional(cx, "sleep DURATION", &pos, 1)?;
            Ok(OpKind::Sleep { ns: duration_ns(pos[0]).map_err(|m| cx.err(m))? })
        }
        "access" => parse_access(cx, w, args),
        "read_direct" => parse_read_direct(cx, w, args),
        "tmpfs" => parse_tmpfs(cx, w, args),
        "memfd" | "shm_open" | "file" => parse_file_decl(cx, w, verb, args),
        "ftruncate" => {
            let (pos, _) = split_options(cx, args, &[])?;
            expect_positional(cx, "ftruncate FILE SIZE", &pos, 2)?;
            let file = file_ref(cx, w, pos[0])?;
            Ok(OpKind::Ftruncate { file, size: size_sum(cx, pos[1])? })
        }
        "fallocate" | "write" => parse_fallocate_write(cx, w, verb, args),
        _ => Err(cx.err(format!("unknown operation '{verb}'; valid: {VERBS}"))),
    }
}

/// `fragment [unmovable=PERCENT]` (model only: `mm::Kernel::fragment_free_memory`).
fn parse_fragment(cx: &Ctx, args: &[&str]) -> Result<OpKind, WorkloadError> {
    let usage = "fragment [unmovable=PERCENT]";
    let (pos, opts) = split_options(cx, args, &["unmovable"])?;
    expect_positional(cx, usage, &pos, 0)?;
    let unmovable_pct = match opt(&opts, "unmovable") {
        None => 0,
        Some(v) => v
            .strip_suffix('%')
            .unwrap_or(v)
            .parse::<u32>()
            .ok()
            .filter(|p| *p <= 100)
            .ok_or_else(|| cx.err(format!("unmovable={v}: give a percentage of pageblocks from 0 to 100, such as unmovable=25%")))?,
    };
    Ok(OpKind::Fragment { unmovable_pct })
}

/// `drop_caches 2`: the shrinkers (`mm::Kernel::drop_slab`).
fn parse_drop_caches(cx: &Ctx, args: &[&str]) -> Result<OpKind, WorkloadError> {
    expect_positional(cx, "drop_caches 2", args, 1)?;
    if args[0] != "2" {
        return Err(cx.err(format!(
            "drop_caches {}: only 2 (slab objects: the shrinkers, the THP deferred split queue's among them) is supported; 1 and 3 drop the page cache, which the model does not reclaim",
            args[0]
        )));
    }
    Ok(OpKind::DropSlab)
}

/// `brk +SIZE | brk -SIZE` (declares the `heap` region on first use).
fn parse_brk(cx: &Ctx, w: &mut Workload, args: &[&str]) -> Result<OpKind, WorkloadError> {
    let (pos, _) = split_options(cx, args, &[])?;
    expect_positional(cx, "brk +SIZE | brk -SIZE", &pos, 1)?;
    let text = pos[0];
    let (sign, rest) = match text.as_bytes().first() {
        Some(b'+') => (1i64, &text[1..]),
        Some(b'-') => (-1i64, &text[1..]),
        _ => return Err(cx.err(format!("brk takes +SIZE or -SIZE, not '{text}'"))),
    };
    let n = size(cx, rest)?;
    if cx.names.region(HEAP).is_none() {
        w.regions.push(RegionDecl { name: HEAP.into(), len: 0, line: cx.line });
    }
    Ok(OpKind::Brk { delta: sign * n as i64 })
}

/// `read_direct RANGE block=SIZE`: O_DIRECT reads of whole 4 KiB pages into a range.
fn parse_read_direct(cx: &Ctx, w: &mut Workload, args: &[&str]) -> Result<OpKind, WorkloadError> {
    let usage = "read_direct RANGE block=SIZE";
    let (pos, opts) = split_options(cx, args, &["block"])?;
    expect_positional(cx, usage, &pos, 1)?;
    let range = parse_range(cx, w, pos[0], &[], true)?;
    let block = match opt(&opts, "block") {
        Some(b) => size(cx, b)?,
        None => return Err(cx.err(format!("read_direct needs block=SIZE (the bytes one read(2) asks for); expected: {usage}"))),
    };
    if block == 0 || block % 4096 != 0 {
        return Err(cx.err(format!("block={block}: O_DIRECT reads here are whole 4 KiB pages; give a positive multiple of 4K")));
    }
    if range.len != TO_END {
        let calls = range.len.div_ceil(block);
        if calls > MAX_REPEATS {
            return Err(cx.err(format!("read_direct of {} bytes in blocks of {block} is {calls} calls; at most {MAX_REPEATS} (give a larger block=)", range.len)));
        }
    }
    Ok(OpKind::ReadDirect { range, block })
}

/// `tmpfs NAME [huge=...]`: a tmpfs mount and its huge= option.
fn parse_tmpfs(cx: &Ctx, w: &mut Workload, args: &[&str]) -> Result<OpKind, WorkloadError> {
    let (pos, opts) = split_options(cx, args, &["huge"])?;
    expect_positional(cx, "tmpfs NAME [huge=never|always|within_size|advise]", &pos, 1)?;
    let name = new_name(cx, pos[0])?;
    let huge = match opt(&opts, "huge") {
        None => TmpfsHuge::Never,
        Some(h) => TmpfsHuge::parse(h).ok_or_else(|| {
            cx.err(format!("invalid huge= '{h}'; valid: {}", TmpfsHuge::WORDS.join(", ")))
        })?,
    };
    w.mounts.push(MountDecl { name, huge, line: cx.line });
    Ok(OpKind::Mount(MountId(w.mounts.len() as u32 - 1)))
}

/// `memfd NAME`, `shm_open NAME [on=MOUNT]`, `file NAME on=MOUNT`: a shmem file created.
fn parse_file_decl(cx: &Ctx, w: &mut Workload, verb: &str, args: &[&str]) -> Result<OpKind, WorkloadError> {
    if verb == "memfd" {
        if let Some(op) = hugetlb::parse_memfd(cx, w, args)? {
            return Ok(op);
        }
    }
    let (pos, opts) = split_options(cx, args, if verb == "memfd" { &[] } else { &["on"] })?;
    let usage = match verb {
        "memfd" => "memfd NAME [hugetlb[=2M|1G]]",
        "shm_open" => "shm_open NAME [on=MOUNT]",
        _ => "file NAME on=MOUNT",
    };
    expect_positional(cx, usage, &pos, 1)?;
    let name = new_name(cx, pos[0])?;
    let mount = opt(&opts, "on").map(|m| mount_ref(cx, w, m)).transpose()?;
    let kind = match verb {
        "memfd" => FileKind::Memfd,
        "shm_open" => FileKind::PosixShm { mount },
        _ => FileKind::Tmpfs { mount: mount.ok_or_else(|| cx.err(format!("expected: {usage}")))? },
    };
    w.files.push(FileDecl { name, kind, line: cx.line });
    Ok(OpKind::Create(FileId(w.files.len() as u32 - 1)))
}

/// `fallocate FILE[OFFSET+LENGTH] [keep | punch]` and `write FILE[OFFSET+LENGTH] [chunk=SIZE]`.
fn parse_fallocate_write(cx: &Ctx, w: &mut Workload, verb: &str, args: &[&str]) -> Result<OpKind, WorkloadError> {
    let (mut pos, opts) = split_options(cx, args, if verb == "write" { &["chunk"] } else { &[] })?;
    let usage = if verb == "write" { "write FILE[OFFSET+LENGTH] [chunk=SIZE]" } else { "fallocate FILE[OFFSET+LENGTH] [keep | punch]" };
    let mode = match (verb, pos.get(1).copied()) {
        ("fallocate", Some("keep")) if pos.len() == 2 => Some(FallocMode::KeepSize),
        ("fallocate", Some("punch")) if pos.len() == 2 => Some(FallocMode::PunchHole),
        _ => None,
    };
    if mode.is_some() {
        pos.pop();
    }
    expect_positional(cx, usage, &pos, 1)?;
    let (file, offset, len) = file_range(cx, w, pos[0], usage)?;
    if verb == "fallocate" {
        return Ok(OpKind::Fallocate { file, offset, len, mode: mode.unwrap_or(FallocMode::Allocate) });
    }
    let chunk = opt(&opts, "chunk").map(|c| size(cx, c)).transpose()?.unwrap_or(len);
    if chunk == 0 {
        return Err(cx.err("chunk= must be positive"));
    }
    let calls = len.div_ceil(chunk);
    if calls > MAX_REPEATS {
        return Err(cx.err(format!("write of {len} bytes in chunks of {chunk} is {calls} calls; at most {MAX_REPEATS} (give a larger chunk=)")));
    }
    Ok(OpKind::Write { file, offset, len, chunk })
}

fn parse_mmap(cx: &Ctx, w: &mut Workload, args: &[&str]) -> Result<OpKind, WorkloadError> {
    let usage = "mmap NAME SIZE [shared | file=FILE [private] [pgoff=SIZE] | hugetlb[=2M|1G] [shared] [noreserve]] [prot=PROT] [align=SIZE] [offset=SIZE] [at=ADDRESS]";
    if let Some(op) = hugetlb::parse_mmap(cx, w, args, usage)? {
        return Ok(op);
    }
    let (mut pos, opts) = split_options(cx, args, &["prot", "align", "offset", "at", "file", "pgoff"])?;
    // A third word says how a mapping is shared: `shared` (anonymous) or `private` (a file).
    let (shared, private) = match pos.get(2).copied() {
        Some("shared") if pos.len() == 3 => (true, false),
        Some("private") if pos.len() == 3 => (false, true),
        _ => (false, false),
    };
    if shared || private {
        pos.pop();
    }
    expect_positional(cx, usage, &pos, 2)?;
    let backing = match (shared, private, opt(&opts, "file"), opt(&opts, "pgoff")) {
        (false, false, None, None) => Backing::PrivateAnon,
        (true, _, None, None) => Backing::SharedAnon,
        (_, true, None, _) => return Err(cx.err("'private' goes with file=FILE (anonymous memory is private without it)")),
        (false, _, Some(f), pgoff) => {
            let file = file_ref(cx, w, f)?;
            let pgoff = pgoff.map(|p| size(cx, p)).transpose()?.unwrap_or(0);
            if pgoff % PAGE_SIZE != 0 {
                return Err(cx.err("pgoff= must be a multiple of 4K (the kernel returns EINVAL)"));
            }
            if private { Backing::PrivateFile { file, pgoff } } else { Backing::SharedFile { file, pgoff } }
        }
        (true, _, Some(_), _) => return Err(cx.err("a file mapping is shared already: write file=FILE without 'shared' (or 'private' for MAP_PRIVATE)")),
        (_, _, None, Some(_)) => return Err(cx.err("pgoff= goes with file=FILE")),
    };
    let name = new_name(cx, pos[0])?;
    let name = name.as_str();
    let len = size_sum(cx, pos[1])?;
    if len == 0 {
        return Err(cx.err("mmap of 0 bytes: the kernel returns EINVAL"));
    }
    let len = len.div_ceil(PAGE_SIZE) * PAGE_SIZE;
    let prot = match opt(&opts, "prot") {
        Some(p) => Prot::parse(p).ok_or_else(|| cx.err(format!("invalid protection '{p}'; valid: {PROT_VALID}")))?,
        None => Prot::RW,
    };
    let placement = match (opt(&opts, "align"), opt(&opts, "offset"), opt(&opts, "at")) {
        (None, None, None) => Placement::Kernel,
        (_, _, Some(at)) if opt(&opts, "align").is_none() && opt(&opts, "offset").is_none() => {
            let addr = parse_addr(at).ok_or_else(|| cx.err(format!("invalid address '{at}'; write it in hex: 0x7e0000000000")))?;
            if addr % PAGE_SIZE != 0 {
                return Err(cx.err(format!("address {at} is not 4 KiB aligned")));
            }
            Placement::Fixed(addr)
        }
        (_, _, Some(_)) => return Err(cx.err("at= fixes the address; it cannot be combined with align= or offset=")),
        (align, offset, None) => {
            let align = align.map(|a| size(cx, a)).transpose()?.unwrap_or(mm_types::PMD_SIZE);
            if !align.is_power_of_two() || align < PAGE_SIZE {
                return Err(cx.err(format!("align= must be a power of two of at least 4K, not {align}")));
            }
            let offset = offset.map(|o| size(cx, o)).transpose()?.unwrap_or(0);
            if offset >= align || offset % PAGE_SIZE != 0 {
                return Err(cx.err("offset= must be a multiple of 4K smaller than align="));
            }
            Placement::Aligned { align, offset }
        }
    };
    let id = RegionId(w.regions.len() as u32);
    w.regions.push(RegionDecl { name: name.to_string(), len, line: cx.line });
    Ok(OpKind::Mmap { region: id, len, prot, placement, backing })
}

/// What `touch` accepts.
const TOUCH_USAGE: &str = "touch RANGE read|write [order=seq|reverse|random] [stride=SIZE] [seed=N] [count=N] [rate=SIZE/s | duration=DURATION]";

fn parse_touch(cx: &Ctx, w: &Workload, args: &[&str]) -> Result<OpKind, WorkloadError> {
    let usage = TOUCH_USAGE;
    let (pos, opts) = split_options(cx, args, &["order", "stride", "seed", "count", "rate", "duration"])?;
    expect_positional(cx, usage, &pos, 2)?;
    let range = parse_range(cx, w, pos[0], &[], false)?;
    let write = match pos[1] {
        "read" => false,
        "write" => true,
        other => return Err(cx.err(format!("touch takes 'read' or 'write', not '{other}'"))),
    };
    let seed = opt(&opts, "seed").map(|s| s.parse::<u64>().map_err(|_| cx.err(format!("seed must be an integer, not '{s}'")))).transpose()?;
    let order = match opt(&opts, "order").unwrap_or("seq") {
        "seq" => TouchOrder::Sequential,
        "reverse" => TouchOrder::Reverse,
        "random" => TouchOrder::Random { seed: seed.unwrap_or(0) },
        other => return Err(cx.err(format!("unknown order '{other}'; valid: seq, reverse, random"))),
    };
    if seed.is_some() && !matches!(order, TouchOrder::Random { .. }) {
        return Err(cx.err("seed= only goes with order=random"));
    }
    let stride = opt(&opts, "stride").map(|s| size(cx, s)).transpose()?.unwrap_or(PAGE_SIZE);
    if stride == 0 || stride % PAGE_SIZE != 0 {
        return Err(cx.err(format!("stride= must be a positive multiple of 4K, not {stride}")));
    }
    let count = opt(&opts, "count")
        .map(|s| s.parse::<u64>().map_err(|_| cx.err(format!("count must be an integer, not '{s}'"))))
        .transpose()?;
    let pace = match (opt(&opts, "rate"), opt(&opts, "duration")) {
        (None, None) => None,
        (Some(_), Some(_)) => {
            return Err(cx.err("give rate= or duration=, not both: rate=SIZE/s paces the touch at that speed, duration=DURATION spreads it over that time"))
        }
        (Some(r), None) => Some(Pace::Rate { bytes_per_sec: rate(cx, r)? }),
        (None, Some(d)) => match duration_ns(d).map_err(|m| cx.err(format!("duration=: {m}")))? {
            0 => return Err(cx.err("duration=0 leaves no time to spread the touch over: give a positive duration (100ms, 3s), or leave duration= out to touch at full speed")),
            ns => Some(Pace::Duration { ns }),
        },
    };
    Ok(OpKind::Touch(Touch { range, write, order, stride, count, pace }))
}

/// `rate=SIZE/s`: bytes of selected pages per second, positive.
fn rate(cx: &Ctx, text: &str) -> Result<u64, WorkloadError> {
    let valid = "write rate=SIZE/s, a size with an optional unit K, M, G, T per second (100M/s, 512K/s, 1048576/s)";
    let Some(sz) = text.strip_suffix("/s") else {
        return Err(cx.err(format!("invalid rate '{text}': {valid}")));
    };
    let n = parse_size(sz).ok_or_else(|| cx.err(format!("invalid rate '{text}': {valid}")))?;
    let n = at_most_max(cx, sz, n)?;
    if n == 0 {
        return Err(cx.err(format!("rate={text} would never finish the touch: give a positive rate ({valid}), or leave rate= out to touch at full speed")));
    }
    Ok(n)
}

fn parse_access(cx: &Ctx, w: &Workload, args: &[&str]) -> Result<OpKind, WorkloadError> {
    use crate::access::{AccessStream, Pattern};
    let usage = "access RANGE seq|stride|uniform|gaussian|zipf|chase [count=N] [writes=PCT] [seed=N] [elem=SIZE] [stride=SIZE] [median=SIZE stddev=SIZE] [s=EXPONENT]";
    let (pos, opts) = split_options(cx, args, &["count", "writes", "seed", "elem", "stride", "median", "stddev", "s"])?;
    expect_positional(cx, usage, &pos, 2)?;
    let range = parse_range(cx, w, pos[0], &[], false)?;
    let int = |key: &str| -> Result<Option<u64>, WorkloadError> {
        opt(&opts, key).map(|v| v.parse::<u64>().map_err(|_| cx.err(format!("{key}= must be an integer, not '{v}'")))).transpose()
    };
    let sz = |key: &str| opt(&opts, key).map(|v| size(cx, v)).transpose();
    let pattern = match pos[1] {
        "seq" => Pattern::Seq,
        "stride" => {
            let st = sz("stride")?.ok_or_else(|| cx.err("access ... stride needs stride=SIZE"))?;
            if st == 0 {
                return Err(cx.err("stride= must be positive"));
            }
            Pattern::Stride(st)
        }
        "uniform" => Pattern::Uniform,
        "gaussian" => {
            let (m, d) = (sz("median")?, sz("stddev")?);
            match (m, d) {
                (Some(median), Some(stddev)) if stddev > 0 => Pattern::Gaussian { median, stddev },
                _ => return Err(cx.err("access ... gaussian needs median=SIZE and stddev=SIZE (a positive byte offset and spread inside the range)")),
            }
        }
        "zipf" => {
            let text = opt(&opts, "s").unwrap_or("1");
            let s: f64 = text.parse().map_err(|_| cx.err(format!("s= must be a number, not '{text}'")))?;
            if !(0.0..=10.0).contains(&s) {
                return Err(cx.err(format!("s= must be between 0 and 10, not {s}")));
            }
            Pattern::Zipf { s_milli: (s * 1000.0).round() as u32 }
        }
        "chase" => Pattern::Chase,
        other => return Err(cx.err(format!("unknown access pattern '{other}'; valid: {}", Pattern::WORDS.join(", ")))),
    };
    for (key, used_by) in [("stride", "stride"), ("median", "gaussian"), ("stddev", "gaussian"), ("s", "zipf")] {
        if opt(&opts, key).is_some() && pattern.name() != used_by {
            return Err(cx.err(format!("{key}= only goes with the {used_by} pattern")));
        }
    }
    let writes = int("writes")?.unwrap_or(0);
    if writes > 100 {
        return Err(cx.err(format!("writes= is a percentage (0..100), not {writes}")));
    }
    let elem = sz("elem")?.unwrap_or(64);
    if !elem.is_power_of_two() || !(8..=4096).contains(&elem) {
        return Err(cx.err(format!("elem= must be a power of two from 8 to 4K, not {elem}")));
    }
    Ok(OpKind::Access(AccessStream { range, pattern, count: int("count")?, writes_pct: writes as u8, seed: int("seed")?.unwrap_or(0), elem }))
}

/// `NAME`, `NAME[OFF..END]`, `NAME[OFF+LEN]` or `NAME[OFF..]`.
fn parse_range(
    cx: &Ctx,
    w: &Workload,
    text: &str,
    opts: &[(&str, &str)],
    page_aligned: bool,
) -> Result<Range, WorkloadError> {
    let (name, inner) = match text.find('[') {
        Some(i) => {
            let inner = text[i + 1..]
                .strip_suffix(']')
                .ok_or_else(|| cx.err(format!("range '{text}' lacks its closing ']'")))?;
            (&text[..i], Some(inner))
        }
        None => (text, None),
    };
    let region = cx.names.region(name).ok_or_else(|| {
        let known: Vec<&str> = w.regions.iter().map(|r| r.name.as_str()).collect();
        let known = if known.is_empty() { "none (declare one with mmap)".into() } else { known.join(", ") };
        match cx.names.map.get(name) {
            Some((Decl::File(_), line)) => cx.err(format!(
                "'{name}' is a file (line {line}), not a mapped region; map it first (mmap NAME SIZE file={name}) and name the mapping; regions so far: {known}"
            )),
            Some((Decl::Mount(_), line)) => cx.err(format!("'{name}' is a tmpfs mount (line {line}), not a mapped region; regions so far: {known}")),
            _ => cx.err(format!("unknown region '{name}'; declared so far: {known}")),
        }
    })?;
    let region_len = w.region(region).len;
    let is_heap = name == HEAP;
    // The heap's length is only known as brk runs: "to the end" stays symbolic.
    let to_end = if is_heap { None } else { Some(region_len) };
    let (offset, len) = match inner {
        None => (0, to_end.unwrap_or(TO_END)),
        Some(inner) => {
            let forms = "write NAME[OFFSET..END], NAME[OFFSET+LENGTH] or NAME[OFFSET..]";
            match span(cx, text, inner, true, forms)? {
                (a, Some(len)) => (a, len),
                (a, None) if is_heap => return Ok(Range { region, offset: a, len: TO_END, every: None }),
                (a, None) => {
                    let len = region_len.checked_sub(a).ok_or_else(|| cx.err(format!("range '{text}' ends before it starts")))?;
                    (a, len)
                }
            }
        }
    };
    // The heap's length is only known as brk runs; it is checked then.
    if !is_heap && offset + len > region_len {
        return Err(cx.err(format!(
            "range '{text}' runs past the end of region '{name}' ({} bytes)",
            region_len
        )));
    }
    if page_aligned && offset % PAGE_SIZE != 0 {
        return Err(cx.err(format!("range '{text}' must start on a 4 KiB boundary (the kernel returns EINVAL)")));
    }
    let every = opt(opts, "every").map(|e| size(cx, e)).transpose()?;
    if let Some(e) = every {
        if e == 0 || e % PAGE_SIZE != 0 {
            return Err(cx.err("every= must be a positive multiple of 4K"));
        }
        if e < len {
            return Err(cx.err("every= is smaller than the range it repeats"));
        }
        if let Some(total) = to_end {
            let n = (total - offset.min(total)) / e;
            if n > MAX_REPEATS {
                return Err(cx.err(format!("every={} repeats the range {n} times; at most {MAX_REPEATS} (give a larger every=)", pos_text(e))));
            }
        }
    }
    Ok(Range { region, offset, len, every })
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A fresh name for a region, file or mount (they share one namespace).
fn new_name(cx: &Ctx, name: &str) -> Result<String, WorkloadError> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(cx.err(format!("name '{name}' may hold only letters, digits, '_' and '-'")));
    }
    if let Some((_, line)) = cx.names.map.get(name) {
        return Err(cx.err(format!("'{name}' is already declared at line {line}")));
    }
    if name == HEAP {
        return Err(cx.err("'heap' is the region that brk grows; choose another name"));
    }
    Ok(name.to_string())
}

fn mount_ref(cx: &Ctx, w: &Workload, name: &str) -> Result<MountId, WorkloadError> {
    cx.names.mount(name).ok_or_else(|| {
        let known: Vec<&str> = w.mounts.iter().map(|m| m.name.as_str()).collect();
        cx.err(format!(
            "unknown tmpfs mount '{name}'; declared so far: {}",
            if known.is_empty() { "none (declare one with tmpfs NAME huge=...)".into() } else { known.join(", ") }
        ))
    })
}

fn file_ref(cx: &Ctx, w: &Workload, name: &str) -> Result<FileId, WorkloadError> {
    cx.names.file(name).ok_or_else(|| {
        let known: Vec<&str> = w.files.iter().map(|f| f.name.as_str()).collect();
        let known = if known.is_empty() { "none (declare one with memfd, shm_open or file)".into() } else { known.join(", ") };
        match cx.names.map.get(name) {
            Some((Decl::Region(_), line)) => cx.err(format!("'{name}' is a mapped region (line {line}), not a file; files so far: {known}")),
            Some((Decl::Mount(_), line)) => cx.err(format!("'{name}' is a tmpfs mount (line {line}), not a file; files so far: {known}")),
            _ => cx.err(format!("unknown file '{name}'; declared so far: {known}")),
        }
    })
}

/// The inside of a range's brackets: `OFF..END`, `OFF+LEN`, or (with `open_end`) `OFF..`.
/// Returns the offset and the length, `None` for an open end.
fn span(cx: &Ctx, text: &str, inner: &str, open_end: bool, forms: &str) -> Result<(u64, Option<u64>), WorkloadError> {
    if let Some((a, b)) = inner.split_once("..") {
        let a = size(cx, a)?;
        if b.is_empty() && open_end {
            return Ok((a, None));
        }
        let b = size(cx, b)?;
        if b < a {
            return Err(cx.err(format!("range '{text}' ends before it starts")));
        }
        Ok((a, Some(b - a)))
    } else if let Some((a, l)) = inner.split_once('+') {
        Ok((size(cx, a)?, Some(size(cx, l)?)))
    } else {
        Err(cx.err(format!("range '{text}': {forms}")))
    }
}

/// `FILE[OFF+LEN]` or `FILE[OFF..END]`.
fn file_range(cx: &Ctx, w: &Workload, text: &str, usage: &str) -> Result<(FileId, u64, u64), WorkloadError> {
    let (name, inner) = text
        .split_once('[')
        .and_then(|(n, rest)| Some((n, rest.strip_suffix(']')?)))
        .ok_or_else(|| cx.err(format!("expected: {usage}")))?;
    let file = file_ref(cx, w, name)?;
    let (off, len) = match span(cx, text, inner, false, "write FILE[OFFSET+LENGTH] or FILE[OFFSET..END]")? {
        (a, Some(len)) => (a, len),
        (_, None) => unreachable!("span gives an open end only when asked"),
    };
    if len == 0 {
        return Err(cx.err(format!("range '{text}' is empty")));
    }
    off.checked_add(len).ok_or_else(|| cx.err(format!("range '{text}' overflows")))?;
    Ok((file, off, len))
}

fn split_options<'a>(
    cx: &Ctx,
    args: &[&'a str],
    allowed: &[&str],
) -> Result<(Vec<&'a str>, Vec<(&'a str, &'a str)>), WorkloadError> {
    let mut pos = Vec::new();
    let mut opts: Vec<(&str, &str)> = Vec::new();
    for a in args {
        // A range such as big[0+8K] is positional even though it has no '='.
        match a.split_once('=') {
            Some((k, v)) if !a.contains('[') => {
                if !allowed.contains(&k) {
                    let valid = if allowed.is_empty() { "none".into() } else { allowed.join(", ") };
                    return Err(cx.err(format!("unknown option '{k}='; valid options here: {valid}")));
                }
                if opts.iter().any(|(seen, _)| *seen == k) {
                    return Err(cx.err(format!("option '{k}=' given twice")));
                }
                opts.push((k, v));
            }
            _ => pos.push(*a),
        }
    }
    Ok((pos, opts))
}

fn expect_positional(cx: &Ctx, usage: &str, pos: &[&str], n: usize) -> Result<(), WorkloadError> {
    if pos.len() != n {
        return Err(cx.err(format!("expected: {usage}")));
    }
    Ok(())
}

fn opt<'a>(opts: &[(&str, &'a str)], key: &str) -> Option<&'a str> {
    opts.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

/// The largest size the language accepts: the largest user address space (5-level paging,
/// 64 PiB). Refusing more keeps every offset + length + every= sum (and a region's address plus
/// them) far from u64 overflow, in the parser and in whoever runs the workload.
const MAX_SIZE: u64 = 1 << 56;

fn size(cx: &Ctx, text: &str) -> Result<u64, WorkloadError> {
    let n = parse_size(text).ok_or_else(|| {
        cx.err(format!("invalid size '{text}'; write a number with an optional unit K, M, G, T (4K, 2M, 1G, 1T)"))
    })?;
    at_most_max(cx, text, n)
}

fn at_most_max(cx: &Ctx, text: &str, n: u64) -> Result<u64, WorkloadError> {
    if n > MAX_SIZE {
        return Err(cx.err(format!("size '{text}' is larger than any address space (at most 65536T)")));
    }
    Ok(n)
}

/// `256M+12K`: a sum of sizes.
fn size_sum(cx: &Ctx, text: &str) -> Result<u64, WorkloadError> {
    let sum = text.split('+').try_fold(0u64, |acc, part| Ok(acc.saturating_add(size(cx, part)?)))?;
    at_most_max(cx, text, sum)
}

fn parse_addr(text: &str) -> Option<u64> {
    let hex = text.strip_prefix("0x")?;
    u64::from_str_radix(&hex.replace('_', ""), 16).ok()
}

#[cfg(test)]
mod tests;

/// `DURATION`: a decimal number with a unit, `ns`, `us`, `ms` or `s` (`1.5s`, `100ms`), at most
/// one day.
pub fn duration_ns(text: &str) -> Result<u64, String> {
    let bad = || format!("invalid duration '{text}'; give a number and a unit: ns, us, ms or s (such as 100ms or 1.5s), at most 1 day");
    let split = text.find(|c: char| c.is_ascii_alphabetic()).ok_or_else(bad)?;
    let (num, unit) = text.split_at(split);
    let scale = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return Err(bad()),
    };
    let v: f64 = num.parse().map_err(|_| bad())?;
    let ns = v * scale;
    if !(ns.is_finite() && (0.0..=86_400e9).contains(&ns)) {
        return Err(bad());
    }
    Ok(ns.round() as u64)
}
