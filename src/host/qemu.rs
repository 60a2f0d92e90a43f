//! The host's QEMU as libvirt's QEMU capability cache records it: the release of an emulator
//! (`<version>`, or `--qemu-version`) and what its TCG gives a guest CPU (`<hostCPU
//! type='tcg'>`, each model's `usable` and blockers). Neither `virsh capabilities` nor `virsh
//! domcapabilities` names the QEMU release (seen with libvirt 9.0 and 11.3): the cache is the
//! only file that does. The documents are read by [`crate::libvirt::qemu_caps`]; what depends on
//! the answers is in [`crate::tcg_facts`].

use super::{Host, Sourced};
use crate::libvirt::cpu_def::CpuDef;
use crate::libvirt::qemu_caps::{CacheFile, TcgCpuModel, emulator_suffix};
use crate::libvirt::version::QemuVersion;
use std::collections::BTreeMap;

/// What a fresh cache file says of an emulator's TCG ([`Host::tcg_from_cache`]).
#[derive(Debug, Clone, Default)]
pub struct CacheTcg {
    /// The models asked about that the file lists for TCG.
    pub models: BTreeMap<String, TcgCpuModel>,
    /// The features of `<hostCPU type='tcg'>` that are on, QEMU's spellings; None without it.
    pub host_cpu: Option<Vec<String>>,
    /// The file.
    pub source: String,
}

impl Host {
    /// The cache file of the domain's emulator (or, without one, of `qemu-system-ARCH`) when it
    /// still describes the binary ([`CacheFile::is_fresh`]: after a QEMU upgrade a stale file
    /// describes the QEMU before it).
    fn fresh_cache_file(&self, arch: &str, emulator: Option<&str>) -> Option<&CacheFile> {
        self.qemu_cache
            .for_emulator(&emulator_suffix(arch, emulator))
            .filter(|f| f.is_fresh())
    }

    /// The QEMU release of the domain's emulator: `--qemu-version`, else the `qemu` attribute
    /// of the judged host's `<hostFacts>` (`--caps`, a fleet's host facts), else `<version>` of
    /// its file in libvirt's QEMU capability cache when that file is fresh. None when none says.
    #[must_use]
    pub fn qemu_version(&self, arch: &str, emulator: Option<&str>) -> Option<Sourced<QemuVersion>> {
        if let Some(o) = &self.qemu_override {
            return Some(o.clone());
        }
        // The judged host's own facts say it before this machine's cache.
        if let Some(v) = &self.facts_qemu {
            return Some(v.clone());
        }
        let f = self.fresh_cache_file(arch, emulator)?;
        Some(Sourced {
            value: QemuVersion::from_number(f.version()?),
            source: format!("<version> in {}", f.path.display()),
        })
    }

    /// What the TCG of the domain's emulator makes of each of `models` and the CPU it gives, from
    /// its fresh file in libvirt's QEMU capability cache, read once and searched as bytes. None
    /// without a fresh file.
    #[must_use]
    pub fn tcg_from_cache<'m>(
        &self,
        arch: &str,
        emulator: Option<&str>,
        models: impl IntoIterator<Item = &'m str>,
    ) -> Option<CacheTcg> {
        use crate::libvirt::qemu_caps::{tcg_host_cpu, tcg_model};
        let f = self.fresh_cache_file(arch, emulator)?;
        let text = f.bytes()?;
        Some(CacheTcg {
            models: models
                .into_iter()
                .filter_map(|m| Some((m.to_string(), tcg_model(text, m)?)))
                .collect(),
            host_cpu: tcg_host_cpu(text),
            source: f.path.display().to_string(),
        })
    }
}

impl Host {
    /// QEMU's view of the host CPU under KVM for the domain's emulator (`<hostCPU type='kvm'>`
    /// of its fresh file in libvirt's QEMU capability cache: the true boolean properties, QEMU's
    /// spellings) and the file; None without a fresh file or that element. What a host known
    /// as found (no domcapabilities given) tells of the features QEMU's KVM adds to the CPUID.
    #[must_use]
    pub fn kvm_host_cpu_from_cache(
        &self,
        arch: &str,
        emulator: Option<&str>,
    ) -> Option<Sourced<Vec<String>>> {
        let f = self.fresh_cache_file(arch, emulator)?;
        let text = f.bytes()?;
        Some(Sourced {
            value: crate::libvirt::qemu_caps::kvm_host_cpu(text)?,
            source: format!("<hostCPU type='kvm'> in {}", f.path.display()),
        })
    }
}

impl Host {
    /// The CPU models the domain's emulator offers for `virt_type` (`kvm` or `qemu`), from its
    /// fresh file in libvirt's QEMU capability cache ([`crate::libvirt::qemu_caps::cpu_models`]:
    /// domcapabilities' custom models), and the file; None without a fresh file or with no
    /// model listed.
    #[must_use]
    pub fn qemu_cpu_models(
        &self,
        arch: &str,
        emulator: Option<&str>,
        virt_type: &str,
    ) -> Option<Sourced<Vec<String>>> {
        let f = self.fresh_cache_file(arch, emulator)?;
        let text = f.bytes()?;
        let vt = if virt_type == "qemu" {
            "tcg"
        } else {
            virt_type
        };
        let models = crate::libvirt::qemu_caps::cpu_models(text, vt);
        (!models.is_empty()).then(|| Sourced {
            value: models,
            source: format!("<cpu type='{vt}'> in {}", f.path.display()),
        })
    }
}

impl Host {
    /// QEMU's KVM host CPU for guests of `arch` run by `emulator` on a host CPU of `vendor`, as
    /// `decode` gives it (libvirt's decoding of the capability cache's `<hostCPU type='kvm'>`):
    /// made on first need and kept, so that judging many guests (an `audit` as found) decodes it
    /// once, not once per guest.
    pub(crate) fn kvm_cpu_decoded(
        &self,
        arch: &str,
        emulator: Option<&str>,
        vendor: Option<&str>,
        decode: impl FnOnce() -> Option<Sourced<CpuDef>>,
    ) -> Option<Sourced<CpuDef>> {
        let key = (
            arch.to_string(),
            emulator.map(str::to_string),
            vendor.map(str::to_string),
        );
        let cached = self
            .kvm_cpu_decoded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&key)
            .cloned();
        if let Some(hit) = cached {
            return hit;
        }
        let made = decode();
        self.kvm_cpu_decoded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key, made.clone());
        made
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::HostOptions;

    /// A scratch directory with an empty "emulator" and a cache file naming it, fresh
    /// (`<qemuctime>` its ctime) or not.
    fn cache_with(tag: &str, fresh: bool) -> (std::path::PathBuf, Host) {
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir().join(format!("vcp-host-qemu-{tag}-{}", std::process::id()));
        let cache = dir.join("cache");
        std::fs::create_dir_all(&cache).unwrap();
        let emulator = dir.join("qemu-system-x86_64");
        std::fs::write(&emulator, "").unwrap();
        let ctime = std::fs::metadata(&emulator).unwrap().ctime() + i64::from(!fresh);
        let text = format!(
            "<qemuCaps>\n  <emulator>{}</emulator>\n  <qemuctime>{ctime}</qemuctime>\n  <selfvers>11003000</selfvers>\n  <flag name='kvm'/>\n  <version>10000013</version>\n  <hostCPU type='tcg' model='base'>\n    <property name='x2apic' type='boolean' value='true'/>\n  </hostCPU>\n  <cpu type='tcg' name='SandyBridge' typename='t' usable='no'>\n    <blocker name='tsc-deadline'/>\n  </cpu>\n</qemuCaps>\n",
            emulator.display()
        );
        std::fs::write(cache.join("x.xml"), text).unwrap();
        let host = Host::discover(&HostOptions {
            qemu_cache: Some(cache),
            ..HostOptions::default()
        })
        .unwrap();
        (dir, host)
    }

    #[test]
    fn the_version_and_tcg_of_a_fresh_cache_file_only() {
        let (dir, host) = cache_with("fresh", true);
        let emulator = dir.join("qemu-system-x86_64").display().to_string();
        let v = host.qemu_version("x86_64", Some(&emulator)).unwrap();
        assert_eq!(v.value.to_string(), "10.0.13");
        assert!(v.source.starts_with("<version> in "), "{}", v.source);
        let t = host
            .tcg_from_cache("x86_64", Some(&emulator), ["SandyBridge", "Nehalem"])
            .unwrap();
        assert_eq!(t.models.keys().collect::<Vec<_>>(), ["SandyBridge"]);
        assert_eq!(t.models["SandyBridge"].blockers, ["tsc-deadline"]);
        assert_eq!(t.host_cpu.unwrap(), ["x2apic"]);
        std::fs::remove_dir_all(&dir).ok();
        // After a QEMU upgrade (another ctime) the file describes the old binary: no answer.
        let (dir, host) = cache_with("stale", false);
        let emulator = dir.join("qemu-system-x86_64").display().to_string();
        assert_eq!(host.qemu_version("x86_64", Some(&emulator)), None);
        assert!(host.tcg_from_cache("x86_64", Some(&emulator), []).is_none());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn the_override_wins() {
        let host = Host::discover(&HostOptions {
            qemu_cache: Some(std::path::PathBuf::new()),
            qemu_version: Some(Sourced {
                value: "9.0".parse().unwrap(),
                source: "--qemu-version".into(),
            }),
            ..HostOptions::default()
        })
        .unwrap();
        let v = host.qemu_version("x86_64", None).unwrap();
        assert_eq!(
            (v.value.to_string().as_str(), v.source.as_str()),
            ("9.0.0", "--qemu-version")
        );
    }
}
