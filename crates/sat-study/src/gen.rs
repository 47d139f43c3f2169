//! Random 3-SAT instances, deterministic for a seed: `vars` variables, `round(vars × ratio)`
//! clauses of three distinct variables each, signs by coin flip (the uniform model whose
//! satisfiability threshold is near 4.26 clauses per variable, where instances are hardest),
//! and, planted, a hidden assignment drawn first with every clause it falsifies drawn again
//! (so the instance is satisfiable by construction and the assignment is a witness).
//! Written in DIMACS CNF, the input format of minisat, picosat and cadical.

/// The phase-transition ratio of random 3-SAT (clauses per variable).
pub const THRESHOLD: f64 = 4.26;

/// A 3-SAT instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    pub vars: u32,
    /// Literals: +v for variable v (1-based), -v for its negation.
    pub clauses: Vec<[i32; 3]>,
    /// The planted assignment (index v-1 is variable v), when planted.
    pub planted: Option<Vec<bool>>,
}

/// splitmix64 (Steele, Lea, Flood 2014): small, fast, and the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (Lemire's multiply-shift; the bias is below 2^-32 for n < 2^32).
    fn below(&mut self, n: u32) -> u32 {
        ((self.next() >> 32) * n as u64 >> 32) as u32
    }
}

/// Generates an instance; `planted`: with a hidden satisfying assignment.
pub fn generate(vars: u32, ratio: f64, seed: u64, planted: bool) -> Instance {
    assert!(vars >= 3, "3-SAT needs at least 3 variables");
    let mut rng = Rng(seed);
    let hidden: Option<Vec<bool>> = planted.then(|| (0..vars).map(|_| rng.next() & 1 == 1).collect());
    let m = (vars as f64 * ratio).round() as usize;
    let mut clauses = Vec::with_capacity(m);
    while clauses.len() < m {
        let c = clause(&mut rng, vars);
        if hidden.as_deref().is_some_and(|a| !satisfies(a, &c)) {
            continue;
        }
        clauses.push(c);
    }
    Instance { vars, clauses, planted: hidden }
}

fn clause(rng: &mut Rng, vars: u32) -> [i32; 3] {
    let mut v = [0u32; 3];
    for i in 0..3 {
        v[i] = loop {
            let x = rng.below(vars) + 1;
            if !v[..i].contains(&x) {
                break x;
            }
        };
    }
    v.map(|x| if rng.next() & 1 == 1 { x as i32 } else { -(x as i32) })
}

/// Whether the assignment (index v-1 is variable v) makes the clause true.
pub fn satisfies(a: &[bool], c: &[i32; 3]) -> bool {
    c.iter().any(|&l| a[(l.unsigned_abs() - 1) as usize] == (l > 0))
}

impl Instance {
    /// Whether the assignment satisfies every clause.
    pub fn satisfied_by(&self, a: &[bool]) -> bool {
        a.len() == self.vars as usize && self.clauses.iter().all(|c| satisfies(a, c))
    }

    /// The instance in DIMACS CNF, with a comment line saying how it was made.
    pub fn dimacs(&self, how: &str) -> String {
        let mut s = format!("c {how}\np cnf {} {}\n", self.vars, self.clauses.len());
        for c in &self.clauses {
            s.push_str(&format!("{} {} {} 0\n", c[0], c[1], c[2]));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_instance_other_seed_other() {
        assert_eq!(generate(50, THRESHOLD, 7, false), generate(50, THRESHOLD, 7, false));
        assert_ne!(generate(50, THRESHOLD, 7, false).clauses, generate(50, THRESHOLD, 8, false).clauses);
    }

    #[test]
    fn clause_count_distinct_variables_and_range() {
        let i = generate(100, THRESHOLD, 1, false);
        // round(100 × 4.26) = 426.
        assert_eq!(i.clauses.len(), 426);
        for c in &i.clauses {
            let v: Vec<u32> = c.iter().map(|l| l.unsigned_abs()).collect();
            assert!(v.iter().all(|&x| (1..=100).contains(&x)), "{c:?}");
            assert!(v[0] != v[1] && v[0] != v[2] && v[1] != v[2], "{c:?}");
        }
        // Signs by coin flip: about half of 1278 literals positive (±5 σ = ±89).
        let pos = i.clauses.iter().flatten().filter(|&&l| l > 0).count();
        assert!((639 - 89..=639 + 89).contains(&pos), "{pos}");
    }

    #[test]
    fn planted_assignment_satisfies_every_clause() {
        let i = generate(200, THRESHOLD, 3, true);
        let a = i.planted.clone().unwrap();
        assert!(i.satisfied_by(&a));
        // Its complement falsifies some clause (one with three literals true under `a`).
        let not: Vec<bool> = a.iter().map(|b| !b).collect();
        assert!(!i.satisfied_by(&not));
    }

    #[test]
    fn dimacs_header_and_lines() {
        let i = Instance { vars: 3, clauses: vec![[1, -2, 3], [-1, 2, -3]], planted: None };
        assert_eq!(i.dimacs("t"), "c t\np cnf 3 2\n1 -2 3 0\n-1 2 -3 0\n");
    }
}
