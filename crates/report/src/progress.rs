//! Progress of a command made of long steps (`compare --record --matrix`: the recording, the
//! untimed and timed runs, a replay and the live runs per setting): the setting, the step and
//! an estimate of what is left, on stderr. On a terminal one indicatif bar, whose message also
//! counts the wait for page reporting; otherwise one line per step (the waits are part of their
//! step, not a line each).
//!
//! The estimate: the steps left of each kind times the mean time of that kind's steps done so
//! far (a kind not seen yet counts the mean of every step done), less the time the current step
//! has taken. It is shown once a step is done.
//!
//! One [`Steps`] is active at a time; the functions that wait deep inside a step (for page
//! reporting, [`tell_wait`]; an untraced run of several, [`detail`]) report to it when there is
//! one, so that they print nothing of their own then.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ACTIVE: Mutex<Option<State>> = Mutex::new(None);

struct State {
    /// Who speaks: `thplab compare`.
    who: String,
    /// Steps planned per kind (raised when a kind runs more than planned: a retry).
    planned: BTreeMap<&'static str, usize>,
    /// Steps done per kind and the time they took.
    done: BTreeMap<&'static str, (usize, Duration)>,
    /// The step running: its kind, when it started, what it is.
    current: Option<(&'static str, Instant, String)>,
    /// Where the step is (`untraced run 2 of 3`), if anything (a terminal shows it).
    detail: String,
    /// Seconds waited for page reporting so far, while waiting.
    waiting: Option<u64>,
    start: Instant,
    bar: Option<indicatif::ProgressBar>,
    /// One line per step on stderr (not a terminal).
    lines: bool,
}

/// The progress of one command; dropping it clears the bar.
pub struct Steps(());

impl Steps {
    /// Steps of the kinds in `plan` (kind, how many); shown on a terminal, and as lines on
    /// stderr when `lines` (not a terminal, and no JSON asked for).
    pub fn start(who: &str, plan: &[(&'static str, usize)], lines: bool) -> Steps {
        use std::io::IsTerminal;
        let tty = std::io::stderr().is_terminal();
        let total: usize = plan.iter().map(|(_, n)| n).sum();
        let bar = tty.then(|| {
            let b = indicatif::ProgressBar::new(total as u64);
            b.set_style(indicatif::ProgressStyle::with_template("{prefix} [{bar:24}] {pos}/{len} {wide_msg}").expect("valid template").progress_chars("=> "));
            b.set_prefix(who.to_string());
            b
        });
        let mut planned = BTreeMap::new();
        for (k, n) in plan {
            *planned.entry(*k).or_insert(0) += n;
        }
        let state = State { who: who.into(), planned, done: BTreeMap::new(), current: None, detail: String::new(), waiting: None, start: Instant::now(), bar, lines: lines && !tty };
        *lock() = Some(state);
        Steps(())
    }

    /// The next step, of `kind`: `text` names the setting and the step.
    pub fn step(&self, kind: &'static str, text: impl Into<String>) {
        with(|s| {
            s.end_current();
            s.current = Some((kind, Instant::now(), text.into()));
            let started = s.done.get(kind).map_or(0, |d| d.0) + 1;
            let planned = s.planned.entry(kind).or_insert(0);
            *planned = (*planned).max(started);
            s.detail.clear();
            s.waiting = None;
            s.show(true);
        });
    }

    /// The last step is done: clear the bar.
    pub fn finish(self) {}
}

impl Drop for Steps {
    fn drop(&mut self) {
        if let Some(mut s) = lock().take() {
            s.end_current();
            if let Some(b) = s.bar.take() {
                b.finish_and_clear();
            }
        }
    }
}

fn lock() -> std::sync::MutexGuard<'static, Option<State>> {
    ACTIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Run `f` on the active progress; false when there is none.
fn with(f: impl FnOnce(&mut State)) -> bool {
    match lock().as_mut() {
        Some(s) => {
            f(s);
            true
        }
        None => false,
    }
}

/// The wait for page reporting, `secs` in (None: over): shown in the active progress's bar
/// (nothing on a line). False when no progress is active (the caller says it itself).
pub fn tell_wait(secs: Option<u64>) -> bool {
    with(|s| {
        s.waiting = secs;
        s.show(false);
    })
}

/// What the current step is doing now (`run 2 of 3`), shown in the bar.
pub fn detail(text: &str) -> bool {
    with(|s| {
        s.detail = text.to_string();
        s.show(false);
    })
}

/// Run `f` (which prints on stdout) with the bar hidden, so that the two do not mix on a
/// terminal.
pub fn suspend<R>(f: impl FnOnce() -> R) -> R {
    let bar = lock().as_ref().and_then(|s| s.bar.clone());
    match bar {
        Some(b) => b.suspend(f),
        None => f(),
    }
}

impl State {
    fn end_current(&mut self) {
        if let Some((kind, t, _)) = self.current.take() {
            let d = self.done.entry(kind).or_insert((0, Duration::ZERO));
            d.0 += 1;
            d.1 += t.elapsed();
        }
    }

    fn steps_done(&self) -> usize {
        self.done.values().map(|d| d.0).sum()
    }

    fn total(&self) -> usize {
        self.planned.values().sum()
    }

    /// The time left: see the module's header. None before a step is done.
    fn left(&self) -> Option<Duration> {
        let n = self.steps_done();
        if n == 0 {
            return None;
        }
        let all: Duration = self.done.values().map(|d| d.1).sum();
        let overall = all / n as u32;
        let mut left = Duration::ZERO;
        for (kind, planned) in &self.planned {
            let (count, time) = self.done.get(kind).copied().unwrap_or((0, Duration::ZERO));
            let mean = if count > 0 { time / count as u32 } else { overall };
            left += mean * planned.saturating_sub(count) as u32;
        }
        let running = self.current.as_ref().map_or(Duration::ZERO, |c| c.1.elapsed());
        Some(left.saturating_sub(running))
    }

    fn show(&mut self, new_step: bool) {
        let Some((_, _, text)) = &self.current else { return };
        let pos = self.steps_done() + 1;
        let total = self.total();
        let timing = match self.left() {
            Some(left) => format!("{} so far, about {} left", clock(self.start.elapsed()), clock(left)),
            None => format!("{} so far", clock(self.start.elapsed())),
        };
        if let Some(b) = &self.bar {
            b.set_length(total as u64);
            b.set_position(pos as u64 - 1);
            let mut detail = if self.detail.is_empty() { String::new() } else { format!(": {}", self.detail) };
            if let Some(w) = self.waiting {
                detail += &format!(", waiting for page reporting to take every free block ({w} s)");
            }
            // The times first: a narrow terminal cuts the message's end.
            let short = match self.left() {
                Some(left) => format!("{}, ~{} left", clock(self.start.elapsed()), clock(left)),
                None => clock(self.start.elapsed()),
            };
            b.set_message(format!("({short}) {text}{detail}"));
        } else if self.lines && new_step {
            eprintln!("{}: [{pos}/{total}] {text} ({timing})", self.who);
        }
    }
}

/// A duration as `42s` or `6m30s`.
pub fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s}s")
    } else {
        format!("{}m{:02}s", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(planned: &[(&'static str, usize)], done: &[(&'static str, usize, u64)]) -> State {
        State {
            who: "t".into(),
            planned: planned.iter().copied().collect(),
            done: done.iter().map(|(k, n, s)| (*k, (*n, Duration::from_secs(*s)))).collect(),
            current: None,
            detail: String::new(),
            waiting: None,
            start: Instant::now(),
            bar: None,
            lines: false,
        }
    }

    #[test]
    fn the_estimate_counts_each_kind_at_its_own_pace() {
        assert_eq!(state(&[("timed", 11)], &[]).left(), None, "nothing done, nothing known");
        // 3 timed runs of 10 s each done, 8 left; 11 replays of unknown length at the mean
        // pace (10 s): 80 + 110 s.
        let s = state(&[("timed", 11), ("replay", 11)], &[("timed", 3, 30)]);
        assert_eq!(s.left(), Some(Duration::from_secs(190)));
        // Replays measured at 2 s: 8 x 10 + 9 x 2.
        let s = state(&[("timed", 11), ("replay", 11)], &[("timed", 3, 30), ("replay", 2, 4)]);
        assert_eq!(s.left(), Some(Duration::from_secs(98)));
        assert_eq!(s.total(), 22);
        assert_eq!(s.steps_done(), 5);
    }

    #[test]
    fn clocks() {
        assert_eq!(clock(Duration::from_secs(42)), "42s");
        assert_eq!(clock(Duration::from_secs(390)), "6m30s");
    }
}
