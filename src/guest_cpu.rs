//! The guest CPU `compare` judges: the first `<cpu>` of a domain document, or a bare `<cpu>`
//! document, read as libvirt reads a guest CPU ([`CpuDef::read_as`]).

use crate::cpu::CpuError;
use crate::cpu::compare::GuestCpu;
use crate::domain::Domain;
use crate::libvirt::cpu_def::{CpuDef, CpuMatch, CpuType};
use crate::xml::parse_xml;
use std::path::Path;

/// Reads the guest CPU of a domain document or a bare `<cpu>` document.
///
/// # Errors
/// [`CpuError::Input`] for unreadable XML or another root; [`CpuError::Facts`] for a
/// domain without `<cpu>`, a CPU libvirt refuses ([`CpuDef::read_as`]: features without a model,
/// an unknown `match` or feature policy...), a `host-model`/`host-passthrough`/`maximum` CPU (it
/// is the host's own CPU: nothing to compare).
pub fn guest_cpu(text: &str, path: &Path) -> Result<GuestCpu, CpuError> {
    let what = path.display().to_string();
    match Domain::parse(text, &what) {
        Ok(d) => guest_cpu_of(&d, path),
        Err(crate::Error::NotADomain { root, .. }) if root == "cpu" => {
            let bare = parse_xml(text, &what)?;
            read(String::new(), bare.root_element(), path)
        }
        Err(e) => Err(e.into()),
    }
}

/// [`guest_cpu`] of a domain already parsed (`path` names it in messages): its first `<cpu>`.
///
/// # Errors
/// As [`guest_cpu`].
pub fn guest_cpu_of(dom: &Domain<'_>, path: &Path) -> Result<GuestCpu, CpuError> {
    let Some(cpu) = dom.cpus().first().copied() else {
        return Err(CpuError::Facts {
            path: path.to_owned(),
            message:
                "the domain has no <cpu>: it gets the hypervisor's default CPU, nothing to compare"
                    .into(),
        });
    };
    read(dom.name(), cpu, path)
}

/// The guest CPU `node` of the guest `name` (empty for a bare `<cpu>`).
fn read(name: String, node: roxmltree::Node<'_, '_>, path: &Path) -> Result<GuestCpu, CpuError> {
    let facts = |message: String| CpuError::Facts {
        path: path.to_owned(),
        message,
    };
    let cpu = CpuDef::read_as(node, CpuType::Guest).map_err(facts)?;
    if let Some(mode) = cpu.mode.filter(|m| m.is_host_based()) {
        return Err(facts(format!(
            "the guest CPU is mode='{mode}': it takes the host's own CPU, so there is nothing to compare (compare judges custom CPUs)"
        )));
    }
    Ok(GuestCpu {
        name,
        matching: cpu.matching.unwrap_or(CpuMatch::Exact),
        cpu,
    })
}
