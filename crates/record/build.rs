//! Builds thplab's QEMU TCG plugin (qemu/thplab_accesses.c) with the system C compiler ($CC,
//! else cc) into OUT_DIR, for `record --accesses=qemu` to embed; without a compiler (or on a
//! target other than x86-64 Linux) the embedded plugin is empty and `--accesses=qemu` says why.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=qemu/thplab_accesses.c");
    println!("cargo:rerun-if-changed=qemu/qemu_plugin_api.h");
    println!("cargo:rerun-if-env-changed=CC");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("thplab_accesses.so");
    let target = std::env::var("TARGET").unwrap_or_default();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = target.starts_with("x86_64") && target.contains("linux") && {
        let st = Command::new(&cc).args(["-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-o"]).arg(&out).arg("qemu/thplab_accesses.c").status();
        match st {
            Ok(s) if s.success() => true,
            Ok(s) => {
                println!("cargo:warning=the QEMU plugin did not build ({cc}: {s}): record --accesses=qemu will be unavailable");
                false
            }
            Err(e) => {
                println!("cargo:warning=no C compiler ({cc}: {e}): record --accesses=qemu will be unavailable");
                false
            }
        }
    };
    if !built {
        std::fs::write(&out, b"").expect("writing the empty plugin");
    }
}
