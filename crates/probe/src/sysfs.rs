//! Reading the knobs of `/sys/kernel/mm/transparent_hugepage` (one knob, the settings they make,
//! or a whole tree as `PATH=VALUE` lines), and where the harness keeps its state. Writing them is
//! the settings guard's job (crates/live: `sysfs::write_knob`, `guard`).
//!
//! A word knob reads back as `always [madvise] never` (`mm/huge_memory.c: enabled_show`); the
//! selected word is the bracketed one. Numeric knobs read back as the number. Stores match with
//! `sysfs_streq`, so the value is written without a newline.

use std::path::{Path, PathBuf};
use std::time::Duration;

use thp_abi::ThpSettings;

use crate::{io_err, LiveError, Result};

/// Where the knobs are and where the guard keeps its lock and journal.
#[derive(Clone, Debug)]
pub struct Paths {
    /// The THP sysfs directory (`/sys/kernel/mm/transparent_hugepage`).
    pub sysfs: PathBuf,
    /// `$THPLAB_STATE_DIR`, default `/run/thplab`: holds `lock` and `journal.json`.
    pub state_dir: PathBuf,
    /// How long the settings guard (`live::SettingsGuard::apply`) waits for the lock.
    pub lock_wait: Duration,
    /// Require euid 0 (off only for tests on a fake tree).
    pub require_root: bool,
}

impl Paths {
    /// The real tree and `$THPLAB_STATE_DIR` (default `/run/thplab`).
    pub fn from_env() -> Paths {
        let state_dir = std::env::var_os("THPLAB_STATE_DIR")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/run/thplab"));
        Paths {
            sysfs: PathBuf::from(thp_abi::settings::SYSFS_THP),
            state_dir,
            lock_wait: Duration::from_secs(60),
            require_root: true,
        }
    }

    pub fn lock_path(&self) -> PathBuf {
        self.state_dir.join("lock")
    }

    pub fn journal_path(&self) -> PathBuf {
        self.state_dir.join("journal.json")
    }

    pub fn knob(&self, rel: &str) -> PathBuf {
        self.sysfs.join(rel)
    }

    /// `Ok` if knobs can be written here; the reason otherwise.
    pub fn check_available(&self) -> Result<()> {
        if !cfg!(target_os = "linux") {
            return Err(LiveError::NotAvailable("live runs need Linux".into()));
        }
        if !self.sysfs.join("enabled").exists() {
            return Err(LiveError::NotAvailable(format!(
                "{} does not exist (kernel without CONFIG_TRANSPARENT_HUGEPAGE, or sysfs not mounted)",
                self.sysfs.display()
            )));
        }
        if self.require_root && !is_root() {
            return Err(LiveError::NotAvailable(
                "live runs need root: THP knobs are writable only by root and /proc/PID/pagemap hides PFNs from others"
                    .into(),
            ));
        }
        Ok(())
    }
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The selected value in a knob's text: the bracketed word, or the whole trimmed text.
pub fn selected_value(text: &str) -> String {
    let t = text.trim();
    match (t.find('['), t.find(']')) {
        (Some(a), Some(b)) if a < b => t[a + 1..b].to_string(),
        _ => t.to_string(),
    }
}

/// The current value of knob `rel` (relative to `paths.sysfs`).
pub fn read_knob(paths: &Paths, rel: &str) -> Result<String> {
    let p = paths.knob(rel);
    let text = std::fs::read_to_string(&p).map_err(|e| io_err("cannot read THP knob", &p, e))?;
    Ok(selected_value(&text))
}

/// Every knob of a THP sysfs tree at `dir` (the live one, or a copy), read without changing
/// anything, as `PATH=VALUE` lines with the selected value (what `thp_abi::ThpSettings::apply_file`
/// reads). The top level, `hugepages-<size>/` and `khugepaged/` are read; `stats/` directories
/// and files that cannot be read (write-only) are left out.
pub fn read_tree(dir: &Path) -> Result<String> {
    if !dir.join("enabled").is_file() || !(dir.join("defrag").is_file() || dir.join("hpage_pmd_size").is_file()) {
        return Err(LiveError::Parse { path: dir.display().to_string(), message: "not a THP sysfs tree (it has no 'enabled' and 'defrag' files)".into() });
    }
    let mut out = String::new();
    let mut files: Vec<String> = Vec::new();
    let list = |d: &Path| -> Result<Vec<(String, bool)>> {
        let mut v = Vec::new();
        for e in std::fs::read_dir(d).map_err(|e| io_err("cannot list", d, e))? {
            let e = e.map_err(|e| io_err("cannot list", d, e))?;
            let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
            v.push((e.file_name().to_string_lossy().into_owned(), is_dir));
        }
        v.sort();
        Ok(v)
    };
    for (name, is_dir) in list(dir)? {
        if !is_dir {
            files.push(name);
        } else if name.starts_with("hugepages-") || name == "khugepaged" {
            for (sub, sub_dir) in list(&dir.join(&name))? {
                if !sub_dir {
                    files.push(format!("{name}/{sub}"));
                }
            }
        }
    }
    for rel in files {
        let p = dir.join(&rel);
        // A sysfs attribute is one short line; read at most a page.
        let Ok(f) = std::fs::File::open(&p) else { continue };
        let mut text = String::new();
        use std::io::Read;
        if f.take(4096).read_to_string(&mut text).is_err() {
            continue;
        }
        out += &format!("{rel}={}\n", selected_value(&text));
    }
    Ok(out)
}

/// The settings the tree in `paths` holds now (knobs this crate's [`ThpSettings`] does not know
/// are ignored).
pub fn current_settings(paths: &Paths) -> Result<ThpSettings> {
    let mut s = ThpSettings::default();
    for (rel, _) in ThpSettings::default().knobs() {
        if !paths.knob(&rel).exists() {
            continue;
        }
        let v = read_knob(paths, &rel)?;
        // Order matters for shmem_enabled=force (checked against the per-size inherit set);
        // knobs() lists per-size knobs first.
        s.set(&rel, &v).map_err(|e| LiveError::Parse { path: paths.knob(&rel).display().to_string(), message: e.to_string() })?;
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selected_value_reads_brackets_and_numbers() {
        assert_eq!(selected_value("always [madvise] never\n"), "madvise");
        assert_eq!(selected_value("always defer defer+madvise [madvise] never"), "madvise");
        assert_eq!(selected_value("511\n"), "511");
        assert_eq!(selected_value("never"), "never");
    }
}
