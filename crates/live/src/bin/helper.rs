//! Test helper for the live crate's integration tests: the child side of the executor
//! (`__exec`, spec JSON on stdin) and a settings-guard holder (`__hold PATH=VALUE...`), the same
//! bodies that `thplab __exec` and `thplab __hold` run.

use std::io::Read;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("__exec") => {
            let mut spec = String::new();
            if let Err(e) = std::io::stdin().read_to_string(&mut spec) {
                eprintln!("thplab-live-helper __exec: cannot read the spec from stdin: {e}");
                std::process::exit(2);
            }
            live::exec_child_main(&spec)
        }
        Some("__hold") => live::guard::hold_main(&args[1..]),
        _ => {
            eprintln!("usage: thplab-live-helper __exec < spec.json | __hold PATH=VALUE...");
            std::process::exit(2);
        }
    }
}
