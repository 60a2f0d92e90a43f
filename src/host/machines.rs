//! The machine-type facts of a host: each machine type's vCPU limit (capabilities,
//! domcapabilities, libvirt's QEMU capability cache, then QEMU's own table), the type an alias
//! stands for, whether the emulator supports it, and the domcapabilities that describe a guest.

use super::Host;
use crate::libvirt::capabilities::MachineType;
use crate::libvirt::domcaps::DomCaps;
use crate::libvirt::qemu_caps::{QemuCache, emulator_suffix};

/// A machine type's vCPU limit and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineLimit {
    /// The versioned machine type (an alias resolved when a file says what it stands for).
    pub machine: String,
    /// Maximum vCPUs of the machine type.
    pub max_cpus: u32,
    /// A file path, or "built-in table (RULE)".
    pub source: String,
}

/// A machine type the judged host's QEMU marks deprecated ([`Host::machine_deprecated`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeprecatedMachine {
    /// The versioned machine type (an alias resolved).
    pub machine: String,
    /// The host's QEMU version (`11.1`), as its newest versioned machine type says.
    pub qemu: Option<String>,
    /// The newest machine type of the same family (`pc-q35-11.1`).
    pub newest: String,
    /// The capabilities file that marks it.
    pub source: String,
}

/// Why a host runs no guest of an arch and virt type ([`Host::arch_unsupported`]): what it
/// offers, and libvirt's refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchOffer {
    /// What the host runs instead and what says so ("its capabilities offer x86_64 kvm, ...").
    pub offered: String,
    /// libvirt's words when it refuses the guest: "could not find capabilities for arch=%s
    /// domaintype=%s" (`virCapabilitiesDomainDataLookup`, at define), or at start on a host
    /// whose emulator lacks KVM for the arch, "Emulator '%s' does not support virt type '%s'"
    /// (`virQEMUCapsIsVirtTypeSupported`; seen with libvirt 9.0 for an aarch64 KVM guest on
    /// x86_64).
    pub refusal: String,
}

impl Host {
    /// Machine types from libvirt's QEMU capability cache for the domain's emulator (or, without
    /// one, for `qemu-system-ARCH`), read once. Files that cannot be read or parsed are skipped:
    /// the cache is libvirt's, and a corrupt file must not stop a guest.
    pub fn qemu_cache_machines(&self, arch: &str, emulator: Option<&str>) -> Vec<MachineType> {
        let wanted = emulator_suffix(arch, emulator);
        if let Some(m) = self
            .qemu_cache_machines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&wanted)
        {
            return m.clone();
        }
        // The emulator is named in each file's head: only its files are parsed whole.
        let machines: Vec<MachineType> = self
            .qemu_cache
            .files()
            .iter()
            .filter(|f| {
                f.head
                    .emulator
                    .as_deref()
                    .is_some_and(|e| e.ends_with(&wanted))
            })
            .filter_map(|f| crate::libvirt::qemu_caps::read_file(&f.path))
            .flat_map(|q| q.machines)
            .collect();
        self.qemu_cache_machines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(wanted, machines.clone());
        machines
    }

    /// Why this host runs no guest of `arch` under `virt_type` ([`ArchOffer`]), or None when it
    /// does or nothing says: its capabilities list the (arch, virt type) pairs it runs, else
    /// its domcapabilities their arches (the facts of an aarch64 host for an x86_64 guest);
    /// with neither, a host as found ([`super::HostOptions::only_given_facts`] unset, its
    /// libvirt's own cpu_map in use) is this machine, whose KVM runs guests of its own arch
    /// family only (an i686 guest on x86_64).
    #[must_use]
    pub fn arch_unsupported(&self, arch: &str, virt_type: &str) -> Option<ArchOffer> {
        let list = |v: &mut dyn Iterator<Item = (&str, &str)>| {
            v.map(|(a, t)| format!("{a} {t}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let refusal = format!("could not find capabilities for arch={arch} domaintype={virt_type}");
        if !self.guest_types.is_empty() {
            if self
                .guest_types
                .iter()
                .any(|(a, t)| a == arch && t == virt_type)
            {
                return None;
            }
            let offered = list(
                &mut self
                    .guest_types
                    .iter()
                    .map(|(a, t)| (a.as_str(), t.as_str())),
            );
            return Some(ArchOffer {
                offered: format!("its capabilities offer {offered}"),
                refusal,
            });
        }
        if !self.domcaps.is_empty() {
            if self.domcaps.iter().any(|d| d.arch == arch) {
                return None;
            }
            let offered = list(
                &mut self
                    .domcaps
                    .iter()
                    .map(|d| (d.arch.as_str(), d.virt_type.as_str())),
            );
            return Some(ArchOffer {
                offered: format!("its domcapabilities offer {offered}"),
                refusal,
            });
        }
        let host = crate::libvirt::arch::host_arch();
        // This machine as the host, on the terms its own CPU is (its libvirt's cpu_map in use:
        // a named one is a dry run for another host, whose arch this machine's does not say).
        // The cheap questions first: this runs at every guest start.
        if self.only_given_facts
            || virt_type != "kvm"
            || crate::libvirt::arch::same_family(arch, host)
            || !self.own_cpu_map()
        {
            return None;
        }
        let emulator = format!(
            "/usr/bin/qemu-system-{}",
            crate::libvirt::arch::qemu_arch(arch)
        );
        Some(ArchOffer {
            offered: format!(
                "this machine is {host}: KVM runs guests of its own arch only, others are emulated (type='qemu')"
            ),
            refusal: format!("Emulator '{emulator}' does not support virt type 'kvm'"),
        })
    }

    /// The emulator (as libvirt's QEMU capability cache names it) that does not support machine
    /// type `machine` for `virt_type`, or None when it does or nothing can be said. libvirt
    /// refuses such a domain at define: "Emulator '/usr/bin/qemu-system-x86_64' does not support
    /// machine type 'pc-q35-99.0'" (`qemuValidateDomainDef`, seen with libvirt 9.0 and 11.3).
    ///
    /// Only a cache file that still describes its binary is trusted: its `<qemuctime>` must be
    /// the emulator's ctime, libvirt's own test before it reuses the file (`virQEMUCapsIsValid`);
    /// after a QEMU upgrade the stale file says nothing. The file's `<machine>` lines are searched
    /// as text, by `name` and `alias` under the virt type (`kvm`, or `tcg` for `qemu`): no
    /// parse of the whole file. None under [`super::HostOptions::skip_machine_support`].
    #[must_use]
    pub fn machine_unsupported(
        &self,
        arch: &str,
        virt_type: &str,
        machine: &str,
        emulator: Option<&str>,
    ) -> Option<String> {
        if self.skip_machine_support
            || machine.is_empty()
            || machine.contains(['\'', '"', '&', '<'])
        {
            return None;
        }
        if !self.caps_machine_files.is_empty() {
            return self.caps_lack_machine(arch, virt_type, machine, emulator);
        }
        let qemu_type = if virt_type == "kvm" { "kvm" } else { "tcg" };
        let file = self
            .qemu_cache
            .for_emulator(&emulator_suffix(arch, emulator))?;
        let e = file.head.emulator.as_deref()?;
        let text = file.bytes()?;
        // The emulator's machine types whatever the guest arch (an i686 guest of
        // qemu-system-x86_64 gets x86_64's), as libvirt checks them.
        if !file.is_fresh() {
            return None;
        }
        crate::libvirt::qemu_caps::lacks_machine(text, qemu_type, machine).then(|| e.to_string())
    }

    /// The machine types the judged host's capabilities list for a guest of `arch` and
    /// `virt_type` (those under `<arch>` for every virt type, and under its `<domain type>`):
    /// those of the emulator libvirt picks (the domain's `<emulator>`, else `qemu-system-ARCH`
    /// of [`emulator_suffix`]: an i686 guest gets qemu-system-x86_64, as libvirt 7.0 … 12.8 pick
    /// it), whatever guest arch they are listed under, as libvirt checks them; else those listed
    /// for the arch.
    fn caps_machines(
        &self,
        arch: &str,
        virt_type: &str,
        emulator: Option<&str>,
    ) -> Vec<&MachineType> {
        let of_type = |m: &&MachineType| {
            m.from_capabilities && m.virt_type.as_deref().is_none_or(|v| v == virt_type)
        };
        let wanted = emulator_suffix(arch, emulator);
        let of_emulator: Vec<&MachineType> = self
            .machines
            .iter()
            .filter(of_type)
            .filter(|m| m.emulator.as_deref().is_some_and(|e| e.ends_with(&wanted)))
            .collect();
        if !of_emulator.is_empty() {
            return of_emulator;
        }
        self.machines
            .iter()
            .filter(of_type)
            .filter(|m| m.arch == arch)
            .collect()
    }

    /// [`Host::machine_unsupported`] from the judged host's capabilities: the emulator they name
    /// when they list machine types for the guest's arch and virt type and `machine` is none of
    /// them (by name or alias). None when they list none for the arch (libvirt then refuses the
    /// arch itself, which is not this check's). Asked whatever
    /// [`super::HostOptions::skip_machine_support`] says by the destination judge
    /// ([`crate::destination::machine_missing`]): an incoming guest was checked by the source's
    /// libvirt, not this host's.
    pub fn caps_lack_machine(
        &self,
        arch: &str,
        virt_type: &str,
        machine: &str,
        emulator: Option<&str>,
    ) -> Option<String> {
        let list = self.caps_machines(arch, virt_type, emulator);
        let first = list.first()?;
        if list.iter().any(|m| m.name == machine) {
            return None;
        }
        Some(
            first
                .emulator
                .clone()
                .or_else(|| emulator.map(str::to_string))
                .unwrap_or_else(|| format!("qemu-system-{arch}")),
        )
    }

    /// A machine type the judged host's capabilities mark `deprecated='yes'` (QEMU deprecates
    /// versioned machine types after six years and removes them later: QEMU's
    /// `docs/about/deprecated.rst`; QEMU 11.1 marks 5.2 … 8.1 and has nothing older), with what
    /// the warning names: the QEMU version (its newest versioned machine type of any family) and
    /// the newest type of the same family. None when not deprecated or nothing says.
    #[must_use]
    pub fn machine_deprecated(
        &self,
        arch: &str,
        virt_type: &str,
        machine: &str,
        emulator: Option<&str>,
    ) -> Option<DeprecatedMachine> {
        let list = self.caps_machines(arch, virt_type, emulator);
        let canonical = list
            .iter()
            .find(|m| m.name == machine)
            .and_then(|m| m.canonical.clone())
            .unwrap_or_else(|| machine.to_string());
        let entry = list.iter().find(|m| m.name == canonical && m.deprecated)?;
        let (family, _) = crate::vcpu_limits::split_versioned(&entry.name)?;
        let newest_of = |fam: Option<&str>| {
            list.iter()
                .filter_map(|m| {
                    crate::vcpu_limits::split_versioned(&m.name).map(|(f, v)| (f, v, m))
                })
                .filter(|(f, _, _)| fam.is_none_or(|x| x == *f))
                .max_by_key(|(_, v, _)| *v)
                .map(|(_, v, m)| (v, m.name.clone()))
        };
        let (_, newest) = newest_of(Some(family))?;
        let qemu = newest_of(None).map(|((major, minor), _)| format!("{major}.{minor}"));
        Some(DeprecatedMachine {
            machine: entry.name.clone(),
            qemu,
            newest,
            source: entry.source.clone(),
        })
    }

    /// Every machine type in libvirt's QEMU capability cache, all emulators (for
    /// `virt-cpu-policy host`); unreadable files are skipped.
    #[must_use]
    pub fn qemu_cache_all(&self) -> Vec<MachineType> {
        self.qemu_cache
            .files()
            .iter()
            .filter_map(|f| crate::libvirt::qemu_caps::read_file(&f.path))
            .flat_map(|q| q.machines)
            .collect()
    }

    /// libvirt's QEMU capability cache this host reads (its directory: [`QemuCache::dir`]).
    #[must_use]
    pub fn qemu_cache(&self) -> &QemuCache {
        &self.qemu_cache
    }

    /// The vCPU limit of the domain's machine type, from the first source that knows it:
    /// capabilities files (`--caps`, `[host] capabilities`), domcapabilities (`<vcpu max>`),
    /// libvirt's QEMU capability cache, then the built-in table ([`crate::vcpu_limits`]). Aliases
    /// (`pc`, `q35`, `virt`) resolve through `canonical=`/`alias=` where a file gives it.
    /// None when no source knows the type.
    pub fn machine_limit(
        &self,
        arch: &str,
        virt_type: &str,
        machine: &str,
        emulator: Option<&str>,
    ) -> Option<MachineLimit> {
        let find = |list: &[MachineType], name: &str| -> Option<MachineLimit> {
            list.iter()
                .find(|m| {
                    m.arch == arch
                        && m.name == name
                        && m.max_cpus.is_some()
                        && m.virt_type.as_deref().is_none_or(|v| v == virt_type)
                })
                .map(|m| MachineLimit {
                    machine: m.canonical.clone().unwrap_or_else(|| m.name.clone()),
                    max_cpus: m.max_cpus.unwrap_or(0),
                    source: m.source.clone(),
                })
        };
        let canonical = self.canonical_machine(arch, machine);
        let name = canonical.as_deref().unwrap_or(machine);
        if let Some(l) = find(&self.machines, name) {
            return Some(l);
        }
        if let Some(d) = self.domcaps.iter().find(|d| {
            d.arch == arch
                && d.virt_type == virt_type
                && (d.machine == machine || d.machine == name)
        }) {
            if let Some(max) = d.vcpu_max {
                return Some(MachineLimit {
                    machine: d.machine.clone(),
                    max_cpus: max,
                    source: d.source.clone(),
                });
            }
        }
        let cache = self.qemu_cache_machines(arch, emulator);
        let cached_canonical = cache
            .iter()
            .find(|m| m.arch == arch && m.name == machine && m.canonical.is_some())
            .and_then(|m| m.canonical.clone());
        let name = canonical
            .or(cached_canonical)
            .unwrap_or_else(|| machine.to_string());
        if let Some(l) = find(&cache, &name) {
            return Some(l);
        }
        crate::vcpu_limits::builtin_limit(arch, &name).map(|b| MachineLimit {
            machine: name,
            max_cpus: b.max_cpus,
            source: format!("built-in table ({})", b.rule),
        })
    }

    /// The domcapabilities that describe a domain: same arch and virt type; the one for the same
    /// machine type (directly or through an alias) first.
    #[must_use]
    pub fn domcaps_for(&self, arch: &str, virt_type: &str, machine: &str) -> Option<&DomCaps> {
        let canonical = self.canonical_machine(arch, machine);
        let same: Vec<&DomCaps> = self
            .domcaps
            .iter()
            .filter(|d| d.arch == arch && d.virt_type == virt_type)
            .collect();
        same.iter()
            .find(|d| d.machine == machine || Some(d.machine.as_str()) == canonical.as_deref())
            .or(same.first())
            .copied()
    }

    /// The versioned machine type an alias (`pc`, `q35`, `virt`) stands for, when a capabilities
    /// or qemuCaps file says.
    #[must_use]
    pub fn canonical_machine(&self, arch: &str, machine: &str) -> Option<String> {
        self.machines
            .iter()
            .find(|m| m.arch == arch && m.name == machine && m.canonical.is_some())
            .and_then(|m| m.canonical.clone())
    }
}
