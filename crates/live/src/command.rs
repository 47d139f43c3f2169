//! The harness's own entry points for the CLI: the recovery every thplab command starts with,
//! and the hidden `__exec` / `__hold` subcommands (the CLI keeps only their arguments).
//!
//! A live run killed with SIGKILL (or a power cut) leaves THP knobs changed and a journal in
//! `$THPLAB_STATE_DIR` (default `/run/thplab`); [`recover_before_command`] puts them back and
//! says so on stderr.

use std::io::Read;

/// Restore knobs left changed by a live run that did not finish; print what was done on
/// stderr. Quiet when there is nothing to do or the live harness is not available here (not
/// root, no sysfs tree); a failure is printed as a warning and does not stop the command.
pub fn recover_before_command() {
    match crate::recover_if_needed() {
        Ok(Some(msg)) => eprintln!("{msg}"),
        Ok(None) | Err(crate::LiveError::NotAvailable(_)) => {}
        Err(e) => eprintln!("thplab: warning: {e}"),
    }
}

/// `thplab __exec`: the child side of a live run. Reads its spec (JSON) from stdin.
pub fn exec_child() -> ! {
    let mut spec = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut spec) {
        eprintln!("thplab __exec: cannot read the spec from stdin: {e}");
        std::process::exit(2);
    }
    crate::exec_child_main(&spec)
}

/// `thplab __hold PATH=VALUE... [memory-max=SIZE] [swap=SPEC]`: apply the settings (and
/// create the memcg, which it joins, and the swap) through the guard, print `held N` (`held N
/// created M`) and sleep until killed (for tests of the recovery path).
pub fn hold(assignments: &[String]) -> ! {
    crate::guard::hold_main(assignments)
}
