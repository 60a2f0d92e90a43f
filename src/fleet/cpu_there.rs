//! The CPU a guest would have on a host ([`CpuThere`]), worked out from the judge's own
//! pipeline of the guest on that host ([`super::judge`]) and shown by `--guest` and the page.
//!
//! The CPU on a host is what libvirt gives the guest there: a running guest's live CPU is what a
//! live migration carries (libvirt's live XML names the model a `host-model` CPU became); a
//! stopped guest's custom model is its own (or QEMU's default model of its arch), a `host-model`
//! CPU becomes the host's host-model CPU (its domcapabilities' `<mode name='host-model'>`), and a
//! `host-passthrough` or `maximum` CPU is the host's own (its capabilities' `<host><cpu>`). The
//! level is [`crate::audit::level_of`]'s reading on that host's facts: under KVM only what the
//! host's KVM gives counts (QEMU drops the rest silently).

use crate::audit::{LevelReading, level_of};
use crate::cpu::default_model;
use crate::domain::{cpu_mode, model_name};
use crate::host::Host;
use crate::libvirt::cpu_def::CpuMode;
use crate::pipeline::Pipeline;
use crate::xml::child;

/// The CPU a guest would have on a host, and the level it reaches there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuThere {
    /// libvirt's `<cpu mode>` of the guest's document (its live XML for a running guest);
    /// None when the guest has no `<cpu>` (QEMU's default model).
    pub mode: Option<CpuMode>,
    /// The model it would have: see the module docs; None when the host's facts do not say
    /// (no domcapabilities for a `host-model` CPU, no capabilities host CPU for
    /// `host-passthrough`), or the guest is out of the tool's scope.
    pub model: Option<String>,
    /// The psABI level and what it was decided from ([`LevelReading`]).
    pub level: LevelReading,
}

impl CpuThere {
    /// No CPU known, for the reason `basis` (the [`LevelReading`]'s basis).
    pub(super) fn unknown(basis: &'static str) -> CpuThere {
        CpuThere {
            mode: None,
            model: None,
            level: LevelReading { level: None, basis },
        }
    }
}

/// The CPU pipeline `p`'s guest would have on `host` (see the module docs), `host_cpu` the
/// model of that host's own CPU (its capabilities' `<host><cpu><model>`).
pub(super) fn cpu_on(p: &Pipeline<'_, '_>, host: &Host, host_cpu: Option<&str>) -> CpuThere {
    // A host that does not run the guest's arch gives it no CPU at all.
    if host
        .arch_unsupported(p.dom.arch(), p.dom.virt_type())
        .is_some()
    {
        return CpuThere::unknown("the host does not run this arch");
    }
    let cpu = p.dom.cpus().first().copied();
    let mode = cpu.and_then(cpu_mode);
    let model = match mode.unwrap_or(CpuMode::Custom) {
        CpuMode::Custom => cpu
            .and_then(|c| child(c, "model"))
            .and_then(model_name)
            .or_else(|| default_model(p.dom.arch()).map(str::to_string)),
        // The host-model CPU of the guest's virt type: under TCG libvirt's domcapabilities of
        // type 'qemu' name the one QEMU emulates.
        CpuMode::HostModel => p
            .facts
            .domcaps
            .and_then(|d| d.host_model.as_ref())
            .and_then(|m| m.model.clone()),
        CpuMode::HostPassthrough | CpuMode::Maximum if p.dom.virt_type() == "kvm" => {
            host_cpu.map(str::to_string)
        }
        // Under TCG libvirt runs `maximum` as QEMU's `-cpu max` (qemuBuildCpuModelArgStr);
        // `host-passthrough` it refuses there.
        CpuMode::Maximum => Some("max".to_string()),
        CpuMode::HostPassthrough => None,
    };
    CpuThere {
        mode,
        model,
        level: level_of(p.dom, &p.facts),
    }
}
