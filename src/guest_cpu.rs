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
    let facts = |message: String| CpuError::Facts {
        path: path.to_owned(),
        message,
    };
    let domain = match Domain::parse(text, &what) {
        Ok(d) => Some(d),
        Err(crate::Error::NotADomain { root, .. }) if root == "cpu" => None,
        Err(e) => return Err(e.into()),
    };
    let bare;
    let (name, node) = match &domain {
        Some(d) => {
            let Some(cpu) = d.cpus().first().copied() else {
                return Err(facts(
                    "the domain has no <cpu>: it gets the hypervisor's default CPU, nothing to compare"
                        .into(),
                ));
            };
            (d.name(), cpu)
        }
        None => {
            bare = parse_xml(text, &what)?;
            (String::new(), bare.root_element())
        }
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
