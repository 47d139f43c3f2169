//! `thplab record --accesses=qemu`: the program's data accesses from a run under QEMU
//! user-mode (`qemu-x86_64`, Debian 12's qemu-user 7.2) with thplab's TCG plugin
//! (crates/record/qemu/thplab_accesses.c, built by build.rs with the system C compiler and
//! embedded in the binary), mapped onto the native recording by the same [`Aligner`] as the
//! lackey path ([`super`]) and written as the same runs file.
//!
//! The plugin compresses the accesses into runs on the guest's 4 KiB pages before they leave
//! QEMU (one record per page change, where lackey prints one line per access), and sends the
//! memory calls (mmap, munmap, mremap, brk, mprotect, madvise) and the calls that name files by
//! fd (open, openat, creat, close, dup*) with their results, the paths as the program passed
//! them (a library is named as ld.so opened it, not by the file a symlink leads to). Under qemu-user on an x86-64 host guest addresses are host
//! addresses, so the plugin's /proc/self/maps, read when the first block is translated, shows
//! the executable, the interpreter and the stack QEMU loaded: they are mapped onto the native
//! exec snapshot by inode and offset, as valgrind's are (QEMU's own mappings of the
//! interpreter's file are mapped too, and never accessed by the guest). What differs from
//! lackey, measured in docs/trace-format.md "Accesses": ld.so under QEMU makes an early
//! anonymous mmap after opening ld.so.cache where natively (and under valgrind) it comes before,
//! so the aligner may match an anonymous mmap with an unmatched native one up to
//! [`super::LOOSE_WINDOW`] calls behind its last match (`Aligner::look_back`); QEMU splits some accesses lackey
//! counts as one (a 16-byte SSE load is two 8-byte loads in QEMU 7.2's x86 front end); a load
//! and a store of the same address by the same instruction are one access that writes, as
//! lackey's `M`.

use std::ffi::OsString;
use std::io::{self, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;

use trace::accesses::{AccessHeader, AccessWriter, ACCESS_QEMU, ACCESS_ZSTD};

use super::{later_images, AccessSummary, Aligner, Collector, Engine, Native, PAGE};
use crate::{RecordError, Recording};

/// The plugin, built by build.rs (empty when no C compiler was found at build time).
pub const PLUGIN: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/thplab_accesses.so"));

/// `qemu-x86_64` in PATH, if any.
pub fn qemu_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("qemu-x86_64")).find(|p| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// `qemu-x86_64`, when the QEMU recorder can run here; else why not.
pub fn available() -> Result<PathBuf, String> {
    if !cfg!(target_arch = "x86_64") {
        return Err("--accesses=qemu records x86-64 programs on an x86-64 host (guest addresses are host addresses there)".into());
    }
    if PLUGIN.is_empty() {
        return Err("--accesses=qemu: thplab's QEMU plugin was not built (no C compiler when thplab was built: install gcc and rebuild)".into());
    }
    qemu_path().ok_or_else(|| "--accesses=qemu runs the program under QEMU user-mode, which is not installed here (no qemu-x86_64 in PATH): apt-get install qemu-user".into())
}

/// The plugin written to a file of its own for QEMU to load, removed when dropped.
struct PluginFile(PathBuf);

impl PluginFile {
    fn new() -> io::Result<PluginFile> {
        let p = std::env::temp_dir().join(format!("thplab-accesses-{}.so", std::process::id()));
        std::fs::write(&p, PLUGIN)?;
        Ok(PluginFile(p))
    }
}

impl Drop for PluginFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Reads the plugin's stream (crates/record/qemu/thplab_accesses.c) into `c`; returns
/// whether the end record came.
fn read_stream<R: Read, W: Write>(r: &mut R, c: &mut Collector<W>) -> io::Result<bool> {
    let mut tag = [0u8; 1];
    loop {
        match r.read(&mut tag) {
            Ok(0) => return Ok(false),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        match tag[0] {
            b'R' => {
                let b = read_n::<16, R>(r)?;
                let page = u64::from_le_bytes(b[0..8].try_into().unwrap());
                let count = u32::from_le_bytes(b[8..12].try_into().unwrap()) as u64;
                let writes = u32::from_le_bytes(b[12..16].try_into().unwrap()) as u64;
                c.accesses(page.wrapping_mul(PAGE), count, writes)?;
            }
            b'S' => syscall(r, c)?,
            b'P' => {
                let len = u32::from_le_bytes(read_n::<4, R>(r)?) as usize;
                let mut maps = vec![0; len];
                r.read_exact(&mut maps)?;
                let maps = String::from_utf8_lossy(&maps).into_owned();
                c.aligner.startup(&maps);
                c.maps = maps;
                c.invalidate();
                c.root = Some(0);
            }
            b'E' => {
                c.totals.instructions = u64::from_le_bytes(read_n::<8, R>(r)?);
                return Ok(true);
            }
            t => return Err(io::Error::new(io::ErrorKind::InvalidData, format!("the QEMU plugin's stream has an unknown record tag {t:#x}"))),
        }
    }
}

fn read_n<const N: usize, R: Read>(r: &mut R) -> io::Result<[u8; N]> {
    let mut b = [0u8; N];
    r.read_exact(&mut b)?;
    Ok(b)
}

/// One system call of the stream: nr, six arguments, the result, the path argument of an
/// open, openat or creat; handled as lackey's lines are ([`Collector::call`]: the fd table
/// names the files of mmaps).
fn syscall<R: Read, W: Write>(r: &mut R, c: &mut Collector<W>) -> io::Result<()> {
    let b = read_n::<66, R>(r)?;
    let word = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
    let nr = word(0);
    let ret = word(7) as i64;
    let len = u16::from_le_bytes([b[64], b[65]]) as usize;
    let mut path = vec![0; len];
    r.read_exact(&mut path)?;
    // open and creat name their file in argument 0, openat in argument 1.
    let at = if nr == 257 { 1 } else { 0 };
    let args: Vec<(u64, Option<Vec<u8>>)> = (0..6).map(|i| (word(i + 1), (i == at && len > 0).then(|| path.clone()))).collect();
    let ret = if ret < 0 { Err(ret.unsigned_abs()) } else { Ok(ret as u64) };
    c.call(nr, &args, ret)
}

/// Run `argv` under `qemu-x86_64` with the plugin (THP disabled, no randomisation,
/// stdin/stdout/stderr on /dev/null) and write its accesses, mapped onto `rec`, to `out`: as
/// [`super::record_accesses`] does under valgrind.
pub fn record_accesses_qemu(argv: &[OsString], rec: &Recording, trace_crc: u32, native_ns: u64, out: impl Write) -> Result<AccessSummary, RecordError> {
    let qemu = available().map_err(RecordError::Unavailable)?;
    let (program, args) = argv.split_first().ok_or_else(|| RecordError::Other("no program to run".into()))?;
    let program = crate::resolve_program(program)?;
    let plugin = PluginFile::new().map_err(|e| RecordError::Other(format!("writing QEMU's plugin to {}: {e}", std::env::temp_dir().display())))?;
    let mut cmd = Command::new(&qemu);
    cmd.arg("-plugin").arg(format!("{},fd={}", plugin.0.display(), super::ENGINE_FD)).arg(&program).args(args);
    let (rd, mut child, t) = super::spawn_engine(cmd, &qemu)?;
    let header = AccessHeader { trace_crc, trace_records: rec.events.len() as u64, page_size: PAGE, flags: ACCESS_ZSTD | ACCESS_QEMU };
    let werr = |e: io::Error| RecordError::Other(format!("writing the accesses: {e}"));
    let writer = AccessWriter::new(out, &header).map_err(werr)?;
    let mut aligner = Aligner::new(Native::of(rec));
    aligner.look_back = super::LOOSE_WINDOW;
    let mut c = Collector::new(aligner, writer, Box::new(|_| None));
    c.cache_pages();
    // SAFETY: fcntl on an fd owned here; a refusal (above pipe-max-size) leaves the default.
    unsafe { libc::fcntl(rd.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20) };
    let mut r = BufReader::with_capacity(1 << 20, std::fs::File::from(rd));
    let ended = read_stream(&mut r, &mut c).map_err(|e| RecordError::Other(format!("reading the QEMU plugin's stream: {e}")))?;
    drop(r);
    let status = child.wait().map_err(|e| RecordError::Other(format!("waiting for QEMU: {e}")))?;
    c.totals.valgrind_ns = t.elapsed().as_nanos() as u64;
    c.totals.native_ns = native_ns;
    if c.root.is_none() || c.totals.raw_accesses == 0 {
        return Err(RecordError::Other(format!("QEMU's plugin reported no accesses ({status}): is {} an x86-64 program QEMU user-mode runs?", program.to_string_lossy())));
    }
    let incomplete = (!ended).then(|| format!("QEMU ended ({status}) without the plugin's end record: the accesses after the plugin's last flush (up to 1 MiB of runs) are missing"));
    let startup_missing = c.startup_missing.take();
    let (totals, _, bytes) = c.finish().map_err(werr)?;
    Ok(AccessSummary { engine: Engine::Qemu, totals, bytes, startup_missing, status, later_images: later_images(rec.header.root_pid, &rec.events), incomplete })
}
