//! A study (TOML): its axes and what to keep, parsed and checked before anything runs.
//!
//! ```toml
//! keep = ["process", "vmstat", "mthp", "census", "time", "accesses"]   # the default
//! [axes]
//! workloads = ["seed-anon-1g", "my.thpw"]          # built-in examples or files
//! recordings = ["prog.thpt"]                       # `thplab record` files
//! settings = ["enabled=always", "matrix:anon", "file:knobs.txt"]
//! cpu = ["zen4", "zen1"]                            # TLB presets (`--cpu`)
//! paging = ["native", "nested-2m"]                  # `--paging`
//! mem = ["24G", "4G"]                               # `--mem`
//! profile = ["none", "builtin", "box.toml"]        # `--profile`
//! kernels = ["6.18", "7.2"]                         # `--kernel` (multiplies settings)
//! policies = ["none", "mthp-collapse-v18"]          # `--policy` (multiplies settings)
//! [[point]]                                         # listed points, after the product
//! workload = "fork-bgsave"
//! settings = "enabled=always"
//! ```
//!
//! Every error names the study file, the line and what is valid. Paths are relative to the
//! study file's folder, or where a Dask worker was given its copy ([`load_shipped`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use toml::Spanned;
use thp_abi::ThpSettings;

/// The result sections a study may keep (top-level objects of `thplab sim --json`); arrays
/// inside them (regions, per-VMA lists) are not columns.
pub const SECTIONS: &[&str] = &["process", "vmstat", "mthp", "folios", "census", "fallbacks", "meminfo", "model", "peak", "time", "accesses", "io"];
/// What a study keeps unless it says: the process's faults and memory, the thp_* events, the
/// per-size stats, the census, the time (with a profile) and the TLB figures (with accesses).
pub const DEFAULT_KEEP: &[&str] = &["process", "vmstat", "mthp", "census", "time", "accesses"];
/// The value of an axis a study does not name: what `thplab sim` does without the flag.
pub const DEFAULT: &str = "default";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStudy {
    keep: Option<Vec<Spanned<String>>>,
    axes: Option<RawAxes>,
    #[serde(default)]
    point: Vec<Spanned<RawPoint>>,
}

type Values = Option<Vec<Spanned<String>>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAxes {
    workloads: Values,
    recordings: Values,
    settings: Values,
    cpu: Values,
    paging: Values,
    mem: Values,
    profile: Values,
    kernels: Values,
    policies: Values,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPoint {
    workload: Option<Spanned<String>>,
    recording: Option<Spanned<String>>,
    settings: Option<Spanned<String>>,
    cpu: Option<Spanned<String>>,
    paging: Option<Spanned<String>>,
    mem: Option<Spanned<String>>,
    profile: Option<Spanned<String>>,
}

/// One point: an index into each of the study's value lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    pub input: usize,
    pub settings: usize,
    pub cpu: usize,
    pub paging: usize,
    pub mem: usize,
    pub profile: usize,
}

/// A checked study: the distinct values of each axis (inputs loaded, settings resolved) and the
/// points, in the order they are numbered (the product, workloads outermost, then listed ones).
pub struct Study {
    pub path: PathBuf,
    pub keep: Vec<String>,
    /// Workloads and recordings: (the study's name for it, the path or example name to load).
    pub inputs: Vec<(String, String)>,
    pub settings: Vec<(String, ThpSettings)>,
    pub cpu: Vec<String>,
    pub paging: Vec<String>,
    pub mem: Vec<String>,
    pub profile: Vec<String>,
    pub points: Vec<Point>,
    /// Every file the study reads (workloads, recordings, settings and profile files; not the
    /// study itself), as the study names it and where it was read: what a Dask worker that does
    /// not share this file system is sent (docs/sweeps.md).
    pub files: Vec<(String, PathBuf)>,
}

impl Study {
    /// The axes' values of point `p`, as the row's columns (workload, settings, cpu, paging,
    /// mem, profile).
    pub fn axes(&self, p: &Point) -> [(&'static str, &str); 6] {
        [
            ("workload", &self.inputs[p.input].0),
            ("settings", &self.settings[p.settings].0),
            ("cpu", &self.cpu[p.cpu]),
            ("paging", &self.paging[p.paging]),
            ("mem", &self.mem[p.mem]),
            ("profile", &self.profile[p.profile]),
        ]
    }

    /// The point's key in the journal: its axes' values.
    pub fn key(&self, p: &Point) -> String {
        self.axes(p).iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("|")
    }

    /// Where the file the study names `name` was read.
    pub fn file(&self, name: &str) -> PathBuf {
        let dir = self.path.parent().unwrap_or(Path::new(""));
        self.files.iter().find(|(n, _)| n == name).map_or_else(|| dir.join(name), |(_, p)| p.clone())
    }
}

/// Where an error is: `study FILE line N`.
struct At<'a> {
    file: &'a str,
    text: &'a str,
}

impl At<'_> {
    fn line(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())].bytes().filter(|&b| b == b'\n').count() + 1
    }
    fn err<T>(&self, v: &Spanned<T>, msg: impl std::fmt::Display) -> anyhow::Error {
        anyhow::anyhow!("study {} line {}: {msg}", self.file, self.line(v.span().start))
    }
}

/// Read and check the study at `path`.
pub fn load(path: &Path) -> Result<Study> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read the study {}", path.display()))?;
    parse(path, &text)
}

/// Read and check the study at `path` whose files are at the paths `shipped` gives for the
/// names the study gives them (a Dask worker's copies, `thplab sweep --point N --files`); a
/// name not in `shipped` is relative to the study's folder.
pub fn load_shipped(path: &Path, shipped: &BTreeMap<String, PathBuf>) -> Result<Study> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read the study {}", path.display()))?;
    parse_shipped(path, &text, shipped)
}

/// Check the study `text` read from `path` (paths in it are relative to its folder).
pub fn parse(path: &Path, text: &str) -> Result<Study> {
    parse_shipped(path, text, &BTreeMap::new())
}

/// [`parse`], with the files `shipped` names read where it says ([`load_shipped`]).
pub fn parse_shipped(path: &Path, text: &str, shipped: &BTreeMap<String, PathBuf>) -> Result<Study> {
    let file = path.display().to_string();
    let at = At { file: &file, text };
    let raw: RawStudy = toml::from_str(text).map_err(|e| anyhow::anyhow!("study {file}: {}", e.to_string().trim_end()))?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut b = Builder { at, dir, shipped, study: Study { path: path.to_path_buf(), keep: Vec::new(), inputs: vec![], settings: vec![], cpu: vec![], paging: vec![], mem: vec![], profile: vec![], points: vec![], files: vec![] } };
    b.study.keep = b.keep(raw.keep)?;
    if let Some(axes) = raw.axes {
        b.product(axes)?;
    }
    for p in &raw.point {
        b.listed(p)?;
    }
    if b.study.points.is_empty() {
        bail!("study {file}: no point: give [axes] workloads = [...] (or recordings), or [[point]] tables with a workload");
    }
    Ok(b.study)
}

struct Builder<'a> {
    at: At<'a>,
    dir: PathBuf,
    shipped: &'a BTreeMap<String, PathBuf>,
    study: Study,
}

impl Builder<'_> {
    /// Where the file the study names `name` is (its shipped copy, or relative to the study's
    /// folder), noted in the study's files.
    fn path(&mut self, name: &str) -> PathBuf {
        let p = self.shipped.get(name).cloned().unwrap_or_else(|| self.dir.join(name));
        if !self.study.files.iter().any(|(n, _)| n == name) {
            self.study.files.push((name.to_string(), p.clone()));
        }
        p
    }

    fn keep(&self, keep: Option<Vec<Spanned<String>>>) -> Result<Vec<String>> {
        let Some(keep) = keep else { return Ok(DEFAULT_KEEP.iter().map(|s| s.to_string()).collect()) };
        let mut out: Vec<String> = Vec::new();
        for k in keep {
            if !SECTIONS.contains(&k.get_ref().as_str()) {
                return Err(self.at.err(&k, format!("keep = '{}' is no section of a result; valid: {}", k.get_ref(), SECTIONS.join(", "))));
            }
            if out.contains(k.get_ref()) {
                return Err(self.at.err(&k, format!("keep names '{}' twice", k.get_ref())));
            }
            out.push(k.into_inner());
        }
        Ok(out)
    }

    /// The cartesian product of the axes.
    fn product(&mut self, a: RawAxes) -> Result<()> {
        let mut inputs = Vec::new();
        for w in a.workloads.iter().flatten() {
            inputs.push(self.input(w, false)?);
        }
        for r in a.recordings.iter().flatten() {
            inputs.push(self.input(r, true)?);
        }
        let mut settings = self.each(a.settings, Self::settings)?;
        if a.kernels.is_some() || a.policies.is_some() {
            settings = self.versions(&settings, a.kernels, a.policies)?;
        }
        let cpu = self.each(a.cpu, |b, v| b.cpu(v).map(|x| vec![x]))?;
        let paging = self.each(a.paging, |b, v| b.paging(v).map(|x| vec![x]))?;
        let mem = self.each(a.mem, |b, v| b.mem(v).map(|x| vec![x]))?;
        let profile = self.each(a.profile, |b, v| b.profile(v).map(|x| vec![x]))?;
        for &input in &inputs {
            for &settings in &settings {
                for &cpu in &cpu {
                    for &paging in &paging {
                        for &mem in &mem {
                            for &profile in &profile {
                                self.study.points.push(Point { input, settings, cpu, paging, mem, profile });
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The indices of an axis's values (`default` alone when the axis is not given).
    fn each(&mut self, values: Values, mut f: impl FnMut(&mut Self, &Spanned<String>) -> Result<Vec<usize>>) -> Result<Vec<usize>> {
        let Some(values) = values else { return f(self, &Spanned::new(0..0, DEFAULT.to_string())) };
        if values.is_empty() {
            bail!("study {}: an axis with no value (leave it out for the default)", self.at.file);
        }
        let mut out = Vec::new();
        for v in &values {
            for i in f(self, v)? {
                if out.contains(&i) {
                    return Err(self.at.err(v, format!("'{}' is named twice on its axis", v.get_ref())));
                }
                out.push(i);
            }
        }
        Ok(out)
    }

    fn listed(&mut self, p: &Spanned<RawPoint>) -> Result<()> {
        let r = p.get_ref();
        let input = match (&r.workload, &r.recording) {
            (Some(w), None) => self.input(w, false)?,
            (None, Some(rec)) => self.input(rec, true)?,
            _ => return Err(self.at.err(p, "a [[point]] needs a workload = \"...\" or a recording = \"...\" (one of the two)")),
        };
        let one = |b: &mut Self, v: &Option<Spanned<String>>, f: fn(&mut Self, &Spanned<String>) -> Result<usize>| {
            f(b, v.as_ref().unwrap_or(&Spanned::new(0..0, DEFAULT.to_string())))
        };
        let settings = match &r.settings {
            Some(s) if s.get_ref().starts_with("matrix:") && self.settings(s)?.len() != 1 => {
                return Err(self.at.err(s, "a [[point]] has one setting: name one entry of the matrix, such as matrix:anon:64K"))
            }
            s => one(self, s, |b, v| Ok(b.settings(v)?[0]))?,
        };
        let point = Point { input, settings, cpu: one(self, &r.cpu, Self::cpu)?, paging: one(self, &r.paging, Self::paging)?, mem: one(self, &r.mem, Self::mem)?, profile: one(self, &r.profile, Self::profile)? };
        if self.study.points.contains(&point) {
            return Err(self.at.err(p, format!("this point is already in the study ({})", self.study.key(&point))));
        }
        self.study.points.push(point);
        Ok(())
    }

    fn intern(list: &mut Vec<String>, v: &str) -> usize {
        list.iter().position(|x| x == v).unwrap_or_else(|| {
            list.push(v.to_string());
            list.len() - 1
        })
    }

    /// A workload (built-in example or file) or a recording, checked to load.
    fn input(&mut self, v: &Spanned<String>, recording: bool) -> Result<usize> {
        let name = v.get_ref();
        if let Some(i) = self.study.inputs.iter().position(|(n, _)| n == name) {
            return Ok(i);
        }
        let path = if !recording && experiment::examples::get(name).is_some() { name.clone() } else { self.path(name).display().to_string() };
        let what = if recording { "recording" } else { "workload" };
        if !recording && experiment::examples::get(name).is_none() && !Path::new(&path).exists() {
            return Err(self.at.err(v, format!("no workload file '{path}' and no built-in example '{name}'; built-in examples: {}", experiment::examples::names().join(", "))));
        }
        match experiment::input::load_sim_input(&path, false, false, &|_| {}) {
            Ok((experiment::simulate::SimInput::Workload(_), _)) if recording => return Err(self.at.err(v, format!("{path} is a workload, not a recording: list it under workloads"))),
            Ok((experiment::simulate::SimInput::Recording { .. }, _)) if !recording => return Err(self.at.err(v, format!("{path} is a recording: list it under recordings"))),
            Ok(_) => {}
            Err(e) => return Err(self.at.err(v, format!("{what} {name}: {e:#}"))),
        }
        self.study.inputs.push((name.clone(), path));
        Ok(self.study.inputs.len() - 1)
    }

    /// Settings: `default`, assignments (`enabled=always hugepages-64kB/enabled=always`),
    /// `matrix:KIND[:NAME,...]` (each setting of the matrix a value), `file:PATH`.
    fn settings(&mut self, v: &Spanned<String>) -> Result<Vec<usize>> {
        let text = v.get_ref().trim();
        let mut values = Vec::new();
        if let Some(spec) = text.strip_prefix("matrix:") {
            let (kind, m) = thp_abi::matrix::select(spec).map_err(|e| self.at.err(v, e.replacen("--matrix ", "matrix:", 1)))?;
            for (label, s) in m {
                values.push((format!("matrix:{kind}:{}", thp_abi::matrix::key(&label)), s));
            }
        } else if let Some(f) = text.strip_prefix("file:") {
            let path = self.path(f);
            let body = experiment::input::read_text_limited(&path, "settings file", experiment::input::MAX_SETTINGS_BYTES).map_err(|e| self.at.err(v, format!("{e:#}")))?;
            let mut s = ThpSettings::default();
            s.apply_file(&path.display().to_string(), &body).map_err(|e| self.at.err(v, e))?;
            values.push((text.to_string(), s));
        } else {
            let mut s = ThpSettings::default();
            if text != DEFAULT {
                for a in text.split_whitespace() {
                    s.apply_assignment(a).map_err(|e| self.at.err(v, format!("settings '{a}': {e} (or give matrix:KIND[:NAME,...], file:PATH or default)")))?;
                }
            }
            values.push((text.to_string(), s));
        }
        Ok(values
            .into_iter()
            .map(|(label, s)| {
                self.study.settings.iter().position(|(l, _)| *l == label).unwrap_or_else(|| {
                    self.study.settings.push((label, s));
                    self.study.settings.len() - 1
                })
            })
            .collect())
    }

    /// `kernels = [...]` and `policies = [...]`: each setting of the settings axis once per
    /// kernel version and policy, labelled with ` kernel=V` and ` policy=P` when not the default
    /// (`none`: no policy), so the settings column says which.
    fn versions(&mut self, settings: &[usize], kernels: Values, policies: Values) -> Result<Vec<usize>> {
        let none = || vec![Spanned::new(0..0, DEFAULT.to_string())];
        let (kernels, policies) = (kernels.unwrap_or_else(none), policies.unwrap_or_else(none));
        if kernels.is_empty() || policies.is_empty() {
            bail!("study {}: an axis with no value (leave it out for the default)", self.at.file);
        }
        let mut out = Vec::new();
        for &i in settings {
            for k in &kernels {
                for p in &policies {
                    let (label, mut s) = self.study.settings[i].clone();
                    let mut label = label;
                    if k.get_ref() != DEFAULT {
                        s.set("kernel", k.get_ref()).map_err(|e| self.at.err(k, format!("kernels: {e}")))?;
                        label += &format!(" kernel={}", s.kernel);
                    }
                    if p.get_ref() != DEFAULT && p.get_ref() != "none" {
                        s.set("policy", p.get_ref()).map_err(|e| self.at.err(p, format!("policies: {e}")))?;
                        label += &format!(" policy={}", s.policy.expect("set"));
                    }
                    let at = self.study.settings.iter().position(|(l, _)| *l == label).unwrap_or_else(|| {
                        self.study.settings.push((label, s));
                        self.study.settings.len() - 1
                    });
                    if out.contains(&at) {
                        return Err(self.at.err(k, format!("'{}' is named twice on its axis", self.study.settings[at].0)));
                    }
                    out.push(at);
                }
            }
        }
        Ok(out)
    }

    fn cpu(&mut self, v: &Spanned<String>) -> Result<usize> {
        let name = v.get_ref();
        if name != DEFAULT && tlb::presets::by_name(name).is_none() {
            return Err(self.at.err(v, format!("cpu '{name}' is no preset; valid: {}, default", tlb::presets::names().join(", "))));
        }
        Ok(Self::intern(&mut self.study.cpu, name))
    }

    fn paging(&mut self, v: &Spanned<String>) -> Result<usize> {
        let name = v.get_ref();
        if name != DEFAULT && tlb::Paging::parse(name).is_none() {
            return Err(self.at.err(v, format!("paging '{name}': valid: native, nested-4k, nested-2m, nested-1g, default")));
        }
        Ok(Self::intern(&mut self.study.paging, name))
    }

    fn mem(&mut self, v: &Spanned<String>) -> Result<usize> {
        let name = v.get_ref();
        if name != DEFAULT {
            crate::run::machine(name).map_err(|e| self.at.err(v, e))?;
        }
        Ok(Self::intern(&mut self.study.mem, name))
    }

    fn profile(&mut self, v: &Spanned<String>) -> Result<usize> {
        let name = v.get_ref();
        if !matches!(name.as_str(), DEFAULT | "none" | "builtin") {
            let path = self.path(name);
            crate::run::load_profile(&path).map_err(|e| self.at.err(v, format!("{e:#} (or give none or builtin)")))?;
        }
        Ok(Self::intern(&mut self.study.profile, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_product_is_numbered_workloads_outermost_and_listed_points_follow() {
        let text = "[axes]\nworkloads = [\"seed-anon-1g\", \"fork-bgsave\"]\nsettings = [\"default\", \"matrix:anon:64K,PMD\"]\nmem = [\"4G\", \"8G\"]\n\n[[point]]\nworkload = \"issue-program\"\ncpu = \"zen1\"\n";
        let s = parse(Path::new("s.toml"), text).unwrap();
        assert_eq!(s.points.len(), 2 * 3 * 2 + 1);
        assert_eq!(s.key(&s.points[0]), "workload=seed-anon-1g|settings=default|cpu=default|paging=default|mem=4G|profile=default");
        assert_eq!(s.key(&s.points[3]), "workload=seed-anon-1g|settings=matrix:anon:64K|cpu=default|paging=default|mem=8G|profile=default");
        assert_eq!(s.key(&s.points[6]), "workload=fork-bgsave|settings=default|cpu=default|paging=default|mem=4G|profile=default");
        assert_eq!(s.key(&s.points[12]), "workload=issue-program|settings=default|cpu=zen1|paging=default|mem=default|profile=default");
        assert_eq!(s.settings[2].1.summary(), thp_abi::matrix::select("anon:PMD").unwrap().1[0].1.summary());
        assert_eq!(s.keep, DEFAULT_KEEP);
    }

    #[test]
    fn a_point_named_twice_is_refused_with_its_line() {
        let text = "[axes]\nworkloads = [\"seed-anon-1g\"]\n\n[[point]]\nworkload = \"seed-anon-1g\"\n";
        let e = parse(Path::new("s.toml"), text).err().unwrap().to_string();
        assert!(e.starts_with("study s.toml line 4: this point is already in the study"), "{e}");
    }

    /// `kernels` and `policies` multiply the settings axis; the label says which, and a bad
    /// version names the line and what is valid.
    #[test]
    fn kernels_and_policies_multiply_the_settings_axis() {
        let text = "[axes]\nworkloads = [\"seed-anon-1g\"]\nsettings = [\"enabled=always\"]\nkernels = [\"6.18\", \"7.2\"]\npolicies = [\"none\", \"mthp-collapse-v18:scaled=1\"]\n";
        let s = parse(Path::new("s.toml"), text).unwrap();
        let labels: Vec<&str> = s.points.iter().map(|p| s.settings[p.settings].0.as_str()).collect();
        assert_eq!(
            labels,
            ["enabled=always kernel=6.18", "enabled=always kernel=6.18 policy=mthp-collapse-v18:scaled=1", "enabled=always kernel=7.2", "enabled=always kernel=7.2 policy=mthp-collapse-v18:scaled=1"]
        );
        assert_eq!(s.settings[s.points[2].settings].1.kernel, thp_abi::KernelVersion::V7_2);
        let bad = text.replace("\"7.2\"", "\"7.1\"");
        let e = parse(Path::new("s.toml"), &bad).err().unwrap().to_string();
        assert!(e.starts_with("study s.toml line 4: kernels:") && e.contains("7.2"), "{e}");
    }
}
