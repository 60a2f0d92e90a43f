//! The built-in tables the library ships (`src/cpu/builtin_x86.txt`, `src/cpu/x86_features.txt`)
//! are what `cargo xtask regen-cpu-map` makes of libvirt 9.0.0's cpu_map, the copy the tests
//! carry: regenerating them would change nothing but the header.

#[path = "../../examples/regen-cpu-map/tables.rs"]
mod regen;

use crate::harness::root;

/// The lines of `text` that are data, not the header's comments.
fn data(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.starts_with('#')).collect()
}

#[test]
fn the_shipped_tables_are_libvirt_9_0_cpu_map() {
    let (models, features) =
        regen::tables(&crate::golden::golden_cpu_map(), "libvirt 9.0.0").unwrap();
    for (name, made) in [("builtin_x86.txt", models), ("x86_features.txt", features)] {
        let shipped = std::fs::read_to_string(root().join("src/cpu").join(name)).unwrap();
        assert_eq!(data(&made), data(&shipped), "{name}");
        assert!(
            data(&made).len() > 50,
            "{name}: {} lines",
            data(&made).len()
        );
    }
}
