//! Named inputs: a path, or `-` for standard input, wherever thplab takes a file (workloads,
//! recordings, settings files, `trace show|stats`). Text inputs are read with a size limit;
//! recordings are recognised by their magic bytes, also on a pipe, and read with the byte
//! offset of every record so that a replay error can name it. A damaged recording's error names
//! the command that salvages it; `sim --salvage` reads the whole blocks before the damage and
//! says where it cut the recording, what it kept and what it lost.

use std::io::{Cursor, Read};
use std::path::Path;

use anyhow::{bail, Context, Result};
use uapi::result::SalvageReport;
use thp_abi::ThpSettings;

use crate::examples;
use crate::simulate::SimInput;

use report::print::span;

/// `-` names standard input.
pub fn is_stdin(arg: &Path) -> bool {
    arg.as_os_str() == "-"
}

/// How an input is named in messages: its path, or `<stdin>`.
pub fn display(arg: &Path) -> String {
    if is_stdin(arg) {
        "<stdin>".to_string()
    } else {
        arg.display().to_string()
    }
}

/// Open an input for reading; `what` names it in the error ("workload", "settings file").
pub fn open(arg: &Path, what: &str) -> Result<Box<dyn Read>> {
    if is_stdin(arg) {
        return Ok(Box::new(std::io::stdin().lock()));
    }
    let f = std::fs::File::open(arg).with_context(|| format!("cannot read {what} {}", arg.display()))?;
    Ok(Box::new(f))
}

/// Read text of at most `limit` bytes from `r`, saying which input and what is wrong: too
/// large (a device, a binary file), a NUL byte (binary), or invalid UTF-8.
pub fn read_text(r: impl Read, name: &str, what: &str, limit: u64) -> Result<String> {
    let mut buf = Vec::new();
    r.take(limit + 1).read_to_end(&mut buf).with_context(|| format!("cannot read {what} {name}"))?;
    if buf.len() as u64 > limit {
        bail!("{what} {name} is larger than {} MiB: not a {what} (is it a device or a binary file?)", limit >> 20);
    }
    if let Some(at) = buf.iter().position(|&b| b == 0) {
        bail!("{what} {name} is not text: a NUL byte at byte {at} (is it a binary file or a damaged recording?)");
    }
    String::from_utf8(buf).map_err(|e| anyhow::anyhow!("{what} {name} is not text: invalid UTF-8 at byte {}", e.utf8_error().valid_up_to()))
}

/// A recording read whole, with the byte offset of each event.
pub struct Recording {
    pub header: trace::Header,
    pub events: Vec<trace::Event>,
    pub offsets: Vec<u64>,
}

/// What a workload argument holds.
pub enum Loaded {
    Recording(Recording),
    Text(String),
}

/// Read a workload argument that names a file or `-`: a recording (by its magic bytes) or text
/// of at most `text_limit` bytes. `Ok(None)` when it names no file (a built-in example, maybe).
pub fn load(arg: &str, text_limit: u64) -> Result<Option<Loaded>> {
    let path = Path::new(arg);
    if !is_stdin(path) && !path.exists() {
        return Ok(None);
    }
    let name = display(path);
    let mut r = open(path, "workload")?;
    let mut head = Vec::new();
    (&mut r).take(trace::MAGIC.len() as u64).read_to_end(&mut head).with_context(|| format!("cannot read {name}"))?;
    if head == trace::MAGIC[..] {
        let src = Cursor::new(head).chain(r);
        let mut rd = trace::TraceReader::new(src).with_context(|| name.clone())?;
        let (mut events, mut offsets) = (Vec::new(), Vec::new());
        while let Some(e) = rd.next_event().map_err(|e| damaged(&name, e, &rd))? {
            events.push(e);
            offsets.push(rd.record_offset());
        }
        return Ok(Some(Loaded::Recording(Recording { header: rd.header().clone(), events, offsets })));
    }
    if !head.is_empty() && head.len() < trace::MAGIC.len() && trace::MAGIC.starts_with(&head) {
        bail!(
            "{name} is {} bytes, the start of a recording's magic \"THPTRACE\": an empty or truncated recording (was the recorder killed?)",
            head.len()
        );
    }
    let text = read_text(Cursor::new(head).chain(r), &name, "workload", text_limit)?;
    if text.trim().is_empty() {
        bail!("{name} is empty: not a workload (no statements), and if it was meant to be a recording, it is an empty or truncated recording (was the recorder killed?)");
    }
    Ok(Some(Loaded::Text(text)))
}

/// A recording whose header read but whose records do not (cut short or damaged): where and
/// what, and the command that replays the records before it.
pub fn damaged<R: Read>(name: &str, e: trace::TraceError, rd: &trace::TraceReader<R>) -> anyhow::Error {
    let what = match e {
        trace::TraceError::Truncated { .. } => "cut short",
        _ => "damaged",
    };
    let kept = if rd.major_version() >= 3 {
        match rd.blocks_read() {
            0 => " (none: no block before it is whole)".to_string(),
            1 => " (the 1 block before it is whole)".to_string(),
            n => format!(" (the {n} blocks before it are whole)"),
        }
    } else {
        " (a 2.x recording has no block checksums: the records before the damage were not checked, and any of them may be misread)".to_string()
    };
    let how = if name == "<stdin>" {
        "save it to a file and run `thplab sim --salvage FILE`".to_string()
    } else {
        format!("`thplab sim --salvage {name}`")
    };
    anyhow::Error::new(Damaged {
        message: format!("{name}: {e}: the recording is {what}; {how} replays the records before the damage{kept}"),
        offset: e.offset(),
    })
}

/// A recording damaged after its header: the whole message (where, what, the command that
/// salvages) and the byte the reader stopped at (an error object's `byte`).
#[derive(Debug)]
pub struct Damaged {
    pub message: String,
    pub offset: u64,
}

impl std::fmt::Display for Damaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Damaged {}

/// A trace reader on a path or `-`.
pub fn open_trace(arg: &Path) -> Result<trace::TraceReader<Box<dyn Read>>> {
    let r = open(arg, "recording")?;
    trace::TraceReader::new(r).with_context(|| display(arg))
}

/// What `--salvage` of `path` lost, in a sentence: where the recording was cut, what was kept
/// (records, blocks, time span) and what was lost.
pub fn salvage_sentence(s: &SalvageReport, path: &str) -> String {
    let records = match s.records_lost {
        Some(n) => format!("{n} of the {} records the header counts", n + s.records_read),
        None => "an unknown number of records (the header counts none: the recorder did not finish the file)".to_string(),
    };
    let place = match (s.block, s.blocks_kept) {
        (Some(b), _) => format!(", in block {b}"),
        (None, Some(_)) => ", in its trailer (every block is whole)".to_string(),
        (None, None) => String::new(),
    };
    let kept = match s.blocks_kept {
        Some(0) => " (no block before it is whole)".to_string(),
        Some(1) => " (block 1, checked by its CRC-32C)".to_string(),
        Some(n) => format!(" (blocks 1 to {n}, each checked by its CRC-32C)"),
        None if s.unchecked => " (a 2.x recording has no block checksums: they were not checked, and any of them may be misread, as far back as where the damage is; record again for checked blocks)".to_string(),
        None => String::new(),
    };
    format!(
        "{path} is damaged at byte {}{place} ({}); --salvage replayed the {} records before it{kept}{}, cut the recording at byte {} and lost {} bytes ({} of {}) and {records}",
        s.offset,
        s.error,
        s.records_read,
        span(s),
        s.offset,
        s.bytes_lost,
        sim::human_bytes(s.bytes_lost),
        sim::human_bytes(s.file_bytes),
    )
}

/// [`load_recording`], or with `salvage` the records before any damage and what was lost.
pub fn load_recording_salvaged(path: &str, salvage: bool) -> Result<Option<(trace::Header, Vec<trace::Event>, Option<SalvageReport>)>> {
    let p = std::path::Path::new(path);
    if !p.is_file() {
        return Ok(None);
    }
    let mut magic = [0u8; 8];
    let mut f = std::fs::File::open(p).with_context(|| format!("cannot open {path}"))?;
    use std::io::Read;
    if f.read(&mut magic).unwrap_or(0) < magic.len() || magic != *trace::MAGIC {
        return Ok(None);
    }
    let file = std::fs::File::open(p).with_context(|| format!("cannot open {path}"))?;
    if !salvage {
        let mut rd = trace::TraceReader::new(std::io::BufReader::new(file)).with_context(|| path.to_string())?;
        let mut events = Vec::new();
        while let Some(e) = rd.next_event().map_err(|e| damaged(path, e, &rd))? {
            events.push(e);
        }
        return Ok(Some((rd.header().clone(), events, None)));
    }
    let file_bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
    let s = trace::read_salvage(std::io::BufReader::new(file)).with_context(|| format!("{path}: the header is damaged, nothing can be salvaged"))?;
    let report = s.damage.map(|e| SalvageReport {
        error: e.to_string(),
        offset: s.cut_at,
        bytes_lost: file_bytes.saturating_sub(s.cut_at),
        file_bytes,
        records_read: s.records_read,
        records_lost: s.records_expected.map(|n| n.saturating_sub(s.records_read)),
        block: s.block,
        blocks_kept: (s.major >= 3).then_some(s.blocks_kept),
        kept_from_ns: s.events.first().map(|e| e.time_ns),
        kept_to_ns: s.events.last().map(|e| e.time_ns),
        duration_ns: Some(s.header.duration_ns),
        unchecked: s.major < 3,
    });
    Ok(Some((s.header, s.events, report)))
}

/// The largest workload file read (a workload is text; a larger input is a mistake, such as
/// /dev/zero or a recording that lost its header).
pub const MAX_WORKLOAD_BYTES: u64 = 64 << 20;
/// The largest settings file read (a `grep -r` dump of the THP tree is about 2 KiB).
pub const MAX_SETTINGS_BYTES: u64 = 1 << 20;

/// Read a text input of at most `limit` bytes (`-`: standard input), saying which file and
/// what the limit is.
pub fn read_text_limited(path: &std::path::Path, what: &str, limit: u64) -> Result<String> {
    read_text(open(path, what)?, &display(path), what, limit)
}

/// Read a workload from a path or a built-in example name.
pub fn load_workload(arg: &str) -> Result<workload::Workload> {
    let (name, text) = match load(arg, MAX_WORKLOAD_BYTES)? {
        Some(Loaded::Text(text)) => (display(std::path::Path::new(arg)), text),
        Some(Loaded::Recording(_)) => {
            bail!("{arg} is a recording; `thplab sim` replays recordings, this command runs workloads (docs/workload-format.md)")
        }
        None => match examples::get(arg) {
            Some(text) => (format!("<builtin {arg}>"), text.to_string()),
            None => bail!("no workload file '{arg}' and no built-in example of that name; built-in examples: {}", examples::names().join(", ")),
        },
    };
    Ok(workload::parse(&name, &text)?)
}

/// A recording (`thplab record`), if `path` is one: read whole.
pub fn load_recording(path: &str) -> Result<Option<(trace::Header, Vec<trace::Event>)>> {
    Ok(load_recording_salvaged(path, false)?.map(|(h, e, _)| (h, e)))
}

/// The companion file of the recording at `path` (`record --accesses`: `path.accesses`), when
/// there is one, checked against the recording (its trailer's CRC-32 and record count).
pub fn load_accesses(path: &str, records: u64, salvage: bool) -> Result<Option<(String, std::sync::Arc<trace::accesses::AccessTrace>)>> {
    let p = std::path::Path::new(path);
    if is_stdin(p) || !p.is_file() {
        return Ok(None);
    }
    let c = trace::accesses::companion_path(p);
    if !c.is_file() {
        return Ok(None);
    }
    let shown = c.display().to_string();
    if salvage {
        eprintln!("thplab sim: warning: --salvage: {shown} is left out (its accesses are placed by the whole recording's records)");
        return Ok(None);
    }
    let f = std::fs::File::open(&c).with_context(|| format!("cannot open {shown}"))?;
    let t = trace::accesses::read_accesses(std::io::BufReader::new(f)).with_context(|| shown.clone())?;
    let crc = record::command::trace_crc(p)?;
    if t.header.trace_crc != crc || t.header.trace_records != records {
        bail!(
            "{shown} belongs to another recording than {path} (it names a recording of {} records with checksum {:#010x}; {path} has {records} records and checksum {crc:#010x}): record again with --accesses, or remove it",
            t.header.trace_records,
            t.header.trace_crc
        );
    }
    Ok(Some((shown, std::sync::Arc::new(t))))
}

/// The largest saved live result `compare --live-result` reads.
pub const MAX_LIVE_RESULT_BYTES: u64 = 64 << 20;

/// `compare --live-result FILE`: the saved output of `thplab live --json`, checked to be a live
/// run under the settings compared.
pub fn load_live_result(path: &std::path::Path, s: &ThpSettings) -> Result<uapi::RunResult> {
    let name = display(path);
    let text = read_text_limited(path, "live result", MAX_LIVE_RESULT_BYTES)?;
    let r: uapi::RunResult = serde_json::from_str(&text)
        .with_context(|| format!("--live-result {name}: not the JSON of `thplab live --json` (a {} result)", uapi::result::RESULT_SCHEMA))?;
    if r.live.is_none() {
        bail!("--live-result {name}: a model result (no \"live\" section); give the output of `thplab live --json`");
    }
    let want = s.knob_map();
    if let Some((k, v)) = want.iter().find(|(k, v)| r.settings.get(*k) != Some(*v)) {
        bail!("--live-result {name}: ran with {k}={}, the settings compared have {k}={v}; give the same --set/--settings as the live run", r.settings.get(k).map_or("(unset)", String::as_str));
    }
    Ok(r)
}


/// `thplab sim`'s input `arg` (a workload file, a built-in example, a recording or `-`), read
/// whole: a recording with its accesses (`record --accesses`), or with `salvage` the records
/// before any damage and what was lost (said on stderr). `recorded_time` (`--recorded-time`)
/// refuses a workload; `warn` is told a recording's header (what the machine may not match).
pub fn load_sim_input(arg: &str, salvage: bool, recorded_time: bool, warn: &dyn Fn(&trace::Header)) -> Result<(SimInput, Option<SalvageReport>)> {
    let name = display(Path::new(arg));
    let mut lost_report = None;
    let not_timed = || anyhow::anyhow!("--recorded-time runs the clock on a recording's timestamps; {name} is a workload, whose clock is the model's own (--profile prices its steps)");
    let loaded = if salvage {
        match load_recording_salvaged(arg, true)? {
            Some((header, events, lost)) => {
                if let Some(l) = &lost {
                    eprintln!("thplab sim: WARNING: {}", salvage_sentence(l, arg));
                }
                lost_report = lost;
                Some((header, events, Vec::new()))
            }
            None => bail!("--salvage reads a damaged recording; {arg} is not a recording file (it does not start with THPTRACE)"),
        }
    } else {
        match load(arg, MAX_WORKLOAD_BYTES)? {
            Some(Loaded::Recording(rec)) => Some((rec.header, rec.events, rec.offsets)),
            Some(Loaded::Text(text)) => {
                if recorded_time {
                    return Err(not_timed());
                }
                return Ok((SimInput::Workload(workload::parse(&name, &text)?), None));
            }
            None => None,
        }
    };
    let input = match loaded {
        Some((header, events, offsets)) => {
            if header.lost_events > 0 {
                eprintln!("thplab sim: WARNING: {name} lost {} events while recording; predictions may be off", header.lost_events);
            }
            warn(&header);
            let accesses = load_accesses(arg, events.len() as u64, salvage)?;
            SimInput::Recording { name: name.clone(), header, events, offsets, accesses }
        }
        None => SimInput::Workload(load_workload(arg)?),
    };
    if recorded_time && matches!(input, SimInput::Workload(_)) {
        return Err(not_timed());
    }
    Ok((input, lost_report))
}
