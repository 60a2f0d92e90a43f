//! Where the unit tests find their data: `tests/data/` of the checkout (carried by the
//! repository), and `../shared/corpus` beside it (real documents kept outside the repository:
//! a test that reads it is `#[cfg_attr(not(vcp_shared_corpus), ignore = ...)]`, the cfg
//! `build.rs` sets when the directory is there).

use std::path::{Path, PathBuf};

/// `tests/data/generations/bookworm/cpu_map`: libvirt 9.0's cpu_map, as Debian 12 installs it
/// (`tests/data/README.md`), the data the built-in table is made of.
pub(crate) fn cpu_map() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/generations/bookworm/cpu_map")
}

/// `../shared/corpus/REL`.
///
/// # Panics
/// When it is absent: a test that needs it is ignored without the corpus (`vcp_shared_corpus`),
/// so it runs without only when asked to (`--include-ignored`, as CI does), and then it fails.
pub(crate) fn corpus(rel: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/corpus")
        .join(rel);
    assert!(
        p.exists(),
        "{} is absent: this test needs ../shared/corpus beside the checkout",
        p.display()
    );
    p
}

/// `tests/data/generations/NAME/FILE`: the facts the rig captured from one libvirt generation
/// (`bullseye` 7.0, `bookworm` 9.0, `trixie` 11.3, `forky` 12.8; tests/data/README.md).
pub(crate) fn generation(name: &str, file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/generations")
        .join(name)
        .join(file)
}
