//! `thplab-record-helper OUT CMD [ARGS...]`: record CMD into OUT and print a one-line summary on
//! stderr; exits with CMD's status. `thplab-record-helper --show FILE [N]` prints the first N
//! events. `thplab-record-helper --plain CMD [ARGS...]` runs CMD as the recorder would (THP
//! disabled, no address randomisation) without recording, for overhead measurements.
//! For this crate's tests and benches/overhead.sh (the real command is `thplab record`).

use std::ffi::OsString;

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if args.first().map(|a| a == "--show").unwrap_or(false) && args.len() >= 2 {
        let f = match std::fs::File::open(&args[1]) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("{}: {e}", args[1].to_string_lossy());
                std::process::exit(2);
            }
        };
        let n: usize = args
            .get(2)
            .and_then(|s| s.to_str()?.parse().ok())
            .unwrap_or(usize::MAX);
        let mut r = trace::TraceReader::new(std::io::BufReader::new(f)).unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(2)
        });
        for (i, e) in r.by_ref().enumerate() {
            match e {
                Ok(e) if i < n => println!("{}", trace::text::event_line(&e)),
                Ok(_) => {}
                Err(e) => {
                    eprintln!("{e}");
                    std::process::exit(2);
                }
            }
        }
        return;
    }
    if args.first().map(|a| a == "--plain").unwrap_or(false) && args.len() >= 2 {
        use std::os::unix::process::CommandExt;
        let mut c = std::process::Command::new(&args[1]);
        c.args(&args[2..]);
        // SAFETY: prctl and personality are async-signal-safe.
        unsafe {
            c.pre_exec(|| {
                libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
                let cur = libc::personality(0xffff_ffff);
                libc::personality(cur as libc::c_ulong | libc::ADDR_NO_RANDOMIZE as libc::c_ulong);
                Ok(())
            });
        }
        let st = c.status().unwrap_or_else(|e| {
            eprintln!("{}: {e}", args[1].to_string_lossy());
            std::process::exit(127)
        });
        std::process::exit(st.code().unwrap_or(128));
    }
    if args.len() < 2 {
        eprintln!("usage: thplab-record-helper OUT CMD [ARGS...] | --show FILE [N] | --plain CMD [ARGS...]");
        std::process::exit(2);
    }
    let rec = match record::record(&args[1..], &record::RecordOptions::default()) {
        Ok(r) => r,
        Err(record::RecordError::Unavailable(why)) => {
            eprintln!("record: unavailable: {why}");
            std::process::exit(200);
        }
        Err(e) => {
            eprintln!("record: {e}");
            std::process::exit(201);
        }
    };
    let f = std::fs::File::create(&args[0]).unwrap_or_else(|e| {
        eprintln!("{}: {e}", args[0].to_string_lossy());
        std::process::exit(201)
    });
    if let Err(e) = rec.write_to(std::io::BufWriter::new(f)) {
        eprintln!("writing the trace: {e}");
        std::process::exit(201);
    }
    let size = std::fs::metadata(&args[0]).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "record: {} events, {} lost, {} bytes ({:.2} bytes/event), {} perf bytes, {} unpaired exits, exit status {}",
        rec.events.len(),
        rec.header.lost_events,
        size,
        size as f64 / rec.events.len().max(1) as f64,
        rec.perf_bytes,
        rec.unpaired_exits,
        rec.header.exit_status
    );
    std::process::exit(rec.header.exit_status as i32);
}
