//! The SAT solvers of the distribution (Debian packages minisat, picosat, cadical): where each
//! is, its command line on a DIMACS file, its answer by exit status (10 satisfiable, 20
//! unsatisfiable: the SAT competition's convention, which all three follow) and its witness
//! (a model file: minisat's `SAT` then literals, picosat's and cadical's `s`/`v` lines).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// A solver of the distribution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Solver {
    Minisat,
    Picosat,
    Cadical,
}

/// What a solver said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Sat,
    Unsat,
    /// Any other exit status (killed, out of memory, bad input).
    Other(u8),
}

impl Answer {
    pub fn of_status(code: u8) -> Answer {
        match code {
            10 => Answer::Sat,
            20 => Answer::Unsat,
            c => Answer::Other(c),
        }
    }

    pub fn word(self) -> String {
        match self {
            Answer::Sat => "SAT".into(),
            Answer::Unsat => "UNSAT".into(),
            Answer::Other(c) => format!("no answer (exit status {c})"),
        }
    }
}

pub const ALL: [Solver; 3] = [Solver::Minisat, Solver::Picosat, Solver::Cadical];

impl std::str::FromStr for Solver {
    type Err = String;
    fn from_str(s: &str) -> Result<Solver, String> {
        ALL.into_iter().find(|v| v.name() == s).ok_or_else(|| format!("'{s}' is not a solver of the study; give minisat, picosat or cadical"))
    }
}

impl Solver {
    pub fn name(self) -> &'static str {
        match self {
            Solver::Minisat => "minisat",
            Solver::Picosat => "picosat",
            Solver::Cadical => "cadical",
        }
    }

    /// The executable on PATH, or why not (with the package that has it).
    pub fn path(self) -> Result<PathBuf, String> {
        let name = self.name();
        std::env::var_os("PATH")
            .into_iter()
            .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .map(|d| d.join(name))
            .find(|p| p.is_file())
            .ok_or_else(|| format!("{name} is not installed (apt-get install {name})"))
    }

    /// The command line that solves `cnf` quietly, writing its witness to `model` when given.
    pub fn argv(self, exe: &Path, cnf: &Path, model: Option<&Path>) -> Vec<OsString> {
        let mut v: Vec<OsString> = vec![exe.into()];
        let mut add = |s: &str| v.push(s.into());
        match self {
            Solver::Minisat => add("-verb=0"),
            Solver::Picosat => add("-n"),
            Solver::Cadical => {
                add("-q");
                add("-n");
            }
        }
        match (self, model) {
            (Solver::Minisat, _) => {}
            (Solver::Picosat, Some(_)) => v.retain(|a| a != "-n"),
            (Solver::Cadical, Some(_)) => v.push("-w".into()),
            (_, None) => {}
        }
        if let (Solver::Picosat, Some(m)) = (self, model) {
            v.push("-o".into());
            v.push(m.into());
        }
        if let (Solver::Cadical, Some(m)) = (self, model) {
            v.push(m.into());
        }
        v.push(cnf.into());
        if let (Solver::Minisat, Some(m)) = (self, model) {
            v.push(m.into());
        }
        v
    }
}

/// The assignment of a witness file for `vars` variables (index v-1 is variable v), or None
/// when the file holds no model (an UNSAT answer) or a literal out of range.
pub fn parse_model(text: &str, vars: u32) -> Option<Vec<bool>> {
    let mut a = vec![false; vars as usize];
    let mut seen = 0usize;
    for tok in text.split_whitespace() {
        let Ok(l) = tok.parse::<i64>() else {
            if tok.starts_with("UNSAT") || tok == "UNSATISFIABLE" {
                return None;
            }
            continue;
        };
        if l == 0 {
            continue;
        }
        let v = l.unsigned_abs();
        if v > vars as u64 {
            return None;
        }
        a[(v - 1) as usize] = l > 0;
        seen += 1;
    }
    (seen > 0).then_some(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines() {
        let (e, c, m) = (Path::new("/s"), Path::new("i.cnf"), Path::new("m.txt"));
        let s = |v: Vec<OsString>| v.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ");
        assert_eq!(s(Solver::Minisat.argv(e, c, Some(m))), "/s -verb=0 i.cnf m.txt");
        assert_eq!(s(Solver::Minisat.argv(e, c, None)), "/s -verb=0 i.cnf");
        assert_eq!(s(Solver::Picosat.argv(e, c, Some(m))), "/s -o m.txt i.cnf");
        assert_eq!(s(Solver::Picosat.argv(e, c, None)), "/s -n i.cnf");
        assert_eq!(s(Solver::Cadical.argv(e, c, Some(m))), "/s -q -n -w m.txt i.cnf");
    }

    #[test]
    fn witnesses_of_each_format() {
        assert_eq!(parse_model("SAT\n1 -2 3 0\n", 3), Some(vec![true, false, true]));
        assert_eq!(parse_model("s SATISFIABLE\nv -1 2\nv -3 0\n", 3), Some(vec![false, true, false]));
        assert_eq!(parse_model("UNSAT\n", 3), None);
        assert_eq!(parse_model("s UNSATISFIABLE\n", 3), None);
        assert_eq!(parse_model("SAT\n1 -4 0\n", 3), None, "variable 4 of 3");
        assert_eq!(Answer::of_status(10), Answer::Sat);
        assert_eq!(Answer::of_status(20), Answer::Unsat);
        assert_eq!("glucose".parse::<Solver>().unwrap_err(), "'glucose' is not a solver of the study; give minisat, picosat or cadical");
    }
}
