//! Regenerates the built-in CPU model table (`src/cpu/builtin_x86.txt`) and feature names
//! (`src/cpu/x86_features.txt`) from a libvirt cpu_map directory. Run it as
//! `cargo xtask regen-cpu-map [--cpu-map DIR] [--origin TEXT] [--out DIR]`, which calls
//! `cargo run --example regen-cpu-map -- CPU_MAP ORIGIN OUT`.
//!
//! An example rather than a binary so that it is never packaged, and not a test: a test that
//! rewrites source files when asked is code generation hidden where nobody looks for it.

mod tables;

use std::path::PathBuf;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [cpu_map, origin, out] = args.as_slice() else {
        eprintln!("usage: cargo run --example regen-cpu-map -- CPU_MAP_DIR ORIGIN OUT_DIR");
        std::process::exit(2);
    };
    let (models, features) = match tables::tables(&PathBuf::from(cpu_map), origin) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("regen-cpu-map: {e}");
            std::process::exit(1);
        }
    };
    for (name, text) in [("builtin_x86.txt", models), ("x86_features.txt", features)] {
        let path = PathBuf::from(out).join(name);
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("regen-cpu-map: write {}: {e}", path.display());
            std::process::exit(1);
        }
        eprintln!("regen-cpu-map: wrote {}", path.display());
    }
}
