//! The built-in CPU model table and feature names, made from a libvirt cpu_map directory with the
//! library's own loader (`CpuMap::load`), shared by `examples/regen-cpu-map/main.rs` (which writes
//! them) and the integration test that checks the shipped ones (`tests/integration/tables.rs`).
//!
//! * `builtin_x86.txt` — one model a line, `Name: feature feature ...`: every x86 model with its
//!   resolved features, as `CpuMap::load` gives them (parents resolved, `removed='yes'` and
//!   `added='yes'` features left out), in libvirt spellings;
//! * `x86_features.txt` — one feature a line: libvirt's name, then its `<alias>` names from
//!   `x86_features.xml` (the QEMU and Linux spellings the policy accepts).
//!
//! `build.rs` turns the second into sorted static tables; the library includes the first.

use std::fmt::Write as _;
use std::path::Path;
use virt_cpu_policy::libvirt::cpu_map::CpuMap;

/// The command that regenerates the files, as their headers say.
const REGEN: &str = "#   cargo xtask regen-cpu-map [--cpu-map DIR] [--origin TEXT]\n\
                     # (DIR defaults to /usr/share/libvirt/cpu_map; TEXT names the libvirt build).\n";

/// The text of `builtin_x86.txt` and of `x86_features.txt` made from the cpu_map in `dir`;
/// `origin` names the libvirt build in their headers. Errors name the file and the reason.
pub(crate) fn tables(dir: &Path, origin: &str) -> Result<(String, String), String> {
    let map = CpuMap::load(dir).map_err(|e| format!("cpu_map {}: {e}", dir.display()))?;
    let mut models = format!(
        "# libvirt x86 CPU models and their resolved features (libvirt spellings),\n\
         # one model a line: `Name: feature feature ...`. Parent models are resolved and\n\
         # features marked removed='yes' are left out, as by CpuMap::load.\n\
         # Generated from {origin}\n\
         # at {}. Regenerate with\n{REGEN}",
        dir.display()
    );
    for name in map.model_names() {
        let features: Vec<&str> = map
            .model_features(name)
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect();
        let _ = writeln!(models, "{name}: {}", features.join(" "));
    }

    let path = dir.join("x86_features.xml");
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let doc = roxmltree::Document::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut features = format!(
        "# libvirt x86 feature names, one a line: the libvirt name first, then its\n\
         # QEMU/Linux <alias> names. Generated from x86_features.xml of\n\
         # {origin}\n\
         # at {}. Regenerate with\n{REGEN}",
        dir.display()
    );
    for feature in doc
        .root_element()
        .children()
        .filter(|n| n.has_tag_name("feature"))
    {
        let name = feature
            .attribute("name")
            .ok_or_else(|| format!("{}: a <feature> without a name", path.display()))?;
        let mut line = name.to_owned();
        for alias in feature.children().filter(|n| n.has_tag_name("alias")) {
            if let Some(a) = alias.attribute("name") {
                line.push(' ');
                line.push_str(a);
            }
        }
        let _ = writeln!(features, "{line}");
    }
    Ok((models, features))
}
