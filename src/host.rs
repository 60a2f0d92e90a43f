//! Facts about the host, read from files, never from libvirt.
//!
//! The libvirt hook must not call back into libvirt (libvirt's `docs/hooks.rst`: a deadlock is
//! likely), so everything the tool knows about the host comes from files: `virsh capabilities`,
//! `virsh domcapabilities` and libvirt's QEMU capability cache (`qemuCaps`) files, libvirt's
//! `cpu_map` directory and the kernel. Every fact remembers its source, and `virt-cpu-policy host`
//! prints them.
//!
//! The tool's own host-facts file is a `<hostFacts name='HOST' libvirt='X.Y.Z'>` holding one
//! host's `<capabilities>` and/or `<domainCapabilities>` ([`host_facts_document`] writes it;
//! `virt-cpu-policyd` publishes it and puts it in its snapshot). Every reader takes it: `--caps`,
//! `[host] capabilities`, the daemon's snapshot that the hook reads, and `virt-cpu-policy
//! baseline` ([`crate::cluster::facts`]).

use crate::cpu::CpuMap;
use crate::domain::{child, decode, is_libvirt_element, parse_xml, text_of};
use crate::error::{Error, Result};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// libvirt's default cpu_map directory (Debian, Fedora, RHEL).
pub const DEFAULT_CPU_MAP: &str = "/usr/share/libvirt/cpu_map";

/// libvirt's QEMU capability cache (one `qemuCaps` file per emulator binary; root only).
pub const QEMU_CAPS_CACHE: &str = "/var/cache/libvirt/qemu/capabilities";

/// A value and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact<T> {
    /// The value.
    pub value: T,
    /// A file path, "--host-cpus", "sysconf(_SC_NPROCESSORS_ONLN)", ...
    pub source: String,
}

/// A libvirt release, `MAJOR.MINOR.MICRO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LibvirtVersion {
    /// Major (`11` of 11.3.0).
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Micro.
    pub micro: u32,
}

impl LibvirtVersion {
    /// A version from libvirt's number encoding, `major * 1,000,000 + minor * 1,000 + micro`
    /// (`virConnectGetLibVersion`, and `<selfvers>` in libvirt's QEMU capability cache:
    /// `9000000` is 9.0.0, `11003000` 11.3.0).
    #[must_use]
    pub fn from_number(n: u64) -> LibvirtVersion {
        let part = |x: u64| u32::try_from(x % 1000).unwrap_or(0);
        LibvirtVersion {
            major: u32::try_from(n / 1_000_000).unwrap_or(u32::MAX),
            minor: part(n / 1000),
            micro: part(n),
        }
    }
}

impl std::str::FromStr for LibvirtVersion {
    type Err = String;

    /// `MAJOR[.MINOR[.MICRO]]` (`9.0.0`, `11.3`, `11`; a missing part is 0): digits and dots
    /// only, so no surrounding whitespace and no sign.
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let bad = || {
            format!(
                "'{s}' is not a libvirt version: MAJOR[.MINOR[.MICRO]], digits only (e.g. 11.3.0, 11.3 or 11)"
            )
        };
        let mut parts = s.split('.').map(|p| {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            p.parse::<u32>().map_err(|_| bad())
        });
        let major = parts.next().ok_or_else(bad)??;
        let minor = parts.next().transpose()?.unwrap_or(0);
        let micro = parts.next().transpose()?.unwrap_or(0);
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(LibvirtVersion {
            major,
            minor,
            micro,
        })
    }
}

impl std::fmt::Display for LibvirtVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.micro)
    }
}

/// One machine type from a capabilities or qemuCaps file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineFact {
    /// Guest arch (`x86_64`, `aarch64`...).
    pub arch: String,
    /// Virt type it was listed under (`kvm`, `qemu`), or None when listed for every type.
    pub virt_type: Option<String>,
    /// Machine type name as listed (`pc-q35-7.2`, or an alias such as `q35`).
    pub name: String,
    /// The versioned type an alias stands for (`canonical=` / `alias=`).
    pub canonical: Option<String>,
    /// `maxCpus`.
    pub max_cpus: Option<u32>,
    /// The file.
    pub source: String,
}

/// A CPU description as libvirt writes it: a model plus feature policies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuDescription {
    /// `<model>`.
    pub model: Option<String>,
    /// `<vendor>` (`Intel`, `AMD`...), when written.
    pub vendor: Option<String>,
    /// Features with policy `require` (or listed without policy).
    pub require: BTreeSet<String>,
    /// Features with policy `disable` or `forbid`.
    pub disable: BTreeSet<String>,
}

impl CpuDescription {
    /// The features it gives: its model's (`model_features`, from cpu_map) plus the listed
    /// `require`s, minus the listed `disable`s (domcapabilities' host-model CPU is written so).
    #[must_use]
    pub fn features(&self, model_features: Option<&BTreeSet<String>>) -> BTreeSet<String> {
        let explicit: Vec<(String, String)> = self
            .require
            .iter()
            .map(|f| (f.clone(), "require".into()))
            .chain(self.disable.iter().map(|f| (f.clone(), "disable".into())))
            .collect();
        crate::cpu::guaranteed_features(model_features, &explicit)
    }
}

/// One `virsh domcapabilities` document.
#[derive(Debug, Clone, Default)]
pub struct DomCaps {
    /// `<arch>`.
    pub arch: String,
    /// `<domain>`: `kvm` or `qemu`.
    pub virt_type: String,
    /// `<machine>` (versioned).
    pub machine: String,
    /// `<path>` of the emulator.
    pub emulator: Option<String>,
    /// `<vcpu max>` (the smaller of the machine type's and KVM's limits).
    pub vcpu_max: Option<u32>,
    /// CPU modes with `supported='yes'`.
    pub modes: BTreeSet<String>,
    /// The `host-model` CPU, when supported.
    pub host_model: Option<CpuDescription>,
    /// Custom models and whether each is `usable='yes'`.
    pub models: Vec<(String, bool)>,
    /// The file.
    pub source: String,
}

impl DomCaps {
    /// `Some(usable)` when the custom model is listed.
    #[must_use]
    pub fn model_usable(&self, model: &str) -> Option<bool> {
        self.models
            .iter()
            .find(|(m, _)| m == model)
            .map(|(_, u)| *u)
    }
}

/// Everything the tool knows about the host.
#[derive(Debug)]
pub struct Host {
    /// libvirt's cpu_map directory in use, or None for the built-in table.
    pub cpu_map_dir: Option<PathBuf>,
    /// Why the cpu_map directory was not used, when the built-in table is in use.
    pub cpu_map_note: Option<String>,
    /// Models read so far (a rewrite reads only the models it meets).
    models: std::cell::RefCell<std::collections::BTreeMap<String, Option<BTreeSet<String>>>>,
    /// Problems met reading cpu_map files after start (the built-in table answered instead).
    cpu_map_problems: std::cell::RefCell<Vec<String>>,
    /// The host's online CPU count given by an override; see [`Host::cpus`].
    cpus_override: Option<Fact<u32>>,
    cpus: std::cell::OnceCell<Option<Fact<u32>>>,
    /// Machine types from capabilities and qemuCaps files.
    pub machines: Vec<MachineFact>,
    /// domcapabilities documents.
    pub domcaps: Vec<DomCaps>,
    /// Files read, in order.
    pub files: Vec<String>,
    /// The QEMU capability cache directory, read lazily when a machine limit is needed.
    pub qemu_cache_dir: Option<PathBuf>,
    qemu_cache: std::cell::RefCell<std::collections::HashMap<String, Vec<MachineFact>>>,
    kvm_limit: std::cell::OnceCell<Option<Fact<u32>>>,
    kvm_override: Option<Fact<u32>>,
    libvirt_version: std::cell::OnceCell<Option<Fact<LibvirtVersion>>>,
    libvirt_override: Option<Fact<LibvirtVersion>>,
    /// Feature names (and aliases) of the cpu_map's `x86_features.xml`, read on the first name
    /// libvirt 9.0's list lacks.
    host_feature_names: std::cell::OnceCell<std::collections::HashSet<String>>,
    /// The `libvirt` attribute of the first `<hostFacts>` file read that has one.
    facts_version: Option<Fact<LibvirtVersion>>,
    /// The cluster's facts files and directories (`[host] cluster`), with where they are named.
    pub cluster: Option<Fact<Vec<PathBuf>>>,
    skip_machine_support: bool,
    cluster_cpu: std::cell::OnceCell<std::result::Result<crate::policy::ClusterCpu, String>>,
}

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

/// Inputs for [`Host::discover`].
#[derive(Debug, Default, Clone)]
pub struct HostOptions {
    /// capabilities / domcapabilities / qemuCaps files (`--caps` and `[host] capabilities`).
    pub caps: Vec<PathBuf>,
    /// cpu_map directory (`--cpu-map` or `[host] cpu_map`); default [`DEFAULT_CPU_MAP`].
    pub cpu_map: Option<PathBuf>,
    /// Host CPU count override (`--host-cpus` or `[host] cpus`), with its source.
    pub cpus: Option<Fact<u32>>,
    /// libvirt's QEMU capability cache directory: None means the default [`QEMU_CAPS_CACHE`];
    /// an empty path disables it (tests that must not depend on the machine).
    pub qemu_cache: Option<PathBuf>,
    /// KVM's vCPU limit override (`--kvm-max-vcpus`), instead of asking `/dev/kvm`.
    pub kvm_max_vcpus: Option<Fact<u32>>,
    /// The host's libvirt version (`--libvirt-version`), instead of libvirt's QEMU capability
    /// cache.
    pub libvirt_version: Option<Fact<LibvirtVersion>>,
    /// The cluster's facts files and directories (`[host] cluster`), with where they are named.
    pub cluster: Option<Fact<Vec<PathBuf>>>,
    /// Leave the machine type's support to libvirt ([`Host::machine_unsupported`] says nothing):
    /// the hook's guest was defined, so libvirt has checked it, and checks it again at start.
    pub skip_machine_support: bool,
}

impl HostOptions {
    /// The policy's `[host]` settings, with overrides (`--caps` files first, then the policy's;
    /// `--cpu-map`, `--host-cpus` over the policy's `cpu_map`, `cpus`).
    #[must_use]
    pub fn from_policy(
        policy: &crate::policy::Policy,
        caps: &[PathBuf],
        cpu_map: Option<&Path>,
        cpus: Option<Fact<u32>>,
    ) -> HostOptions {
        HostOptions {
            caps: caps
                .iter()
                .chain(policy.host.capabilities.iter())
                .cloned()
                .collect(),
            cpu_map: cpu_map
                .map(Path::to_path_buf)
                .or_else(|| policy.host.cpu_map.clone()),
            cpus: cpus.or_else(|| {
                policy.host.cpus.map(|value| Fact {
                    value,
                    source: format!("[host] cpus in {}", policy.source),
                })
            }),
            cluster: (!policy.host.cluster.is_empty()).then(|| Fact {
                value: policy.host.cluster.clone(),
                source: format!("[host] cluster of policy {}", policy.source),
            }),
            ..HostOptions::default()
        }
    }
}

/// Largest host-fact file read (libvirt's qemuCaps files are about 300 KiB).
const MAX_CAPS_BYTES: usize = crate::readfile::MAX_FACT_BYTES;

impl Host {
    /// Gather host facts from `opts`.
    ///
    /// A named cpu_map directory that cannot be read is an error; the default one missing means the
    /// built-in table is used (and said so in `cpu_map_note`).
    ///
    /// # Errors
    /// [`Error::Read`] for a named file that cannot be read; [`Error::Host`] for a file that is
    /// not a capabilities, domcapabilities or qemuCaps document, or a broken cpu_map.
    pub fn discover(opts: &HostOptions) -> Result<Host> {
        // Only index.xml is read now; model files are read when a model is met.
        let (cpu_map_dir, cpu_map_note) = match &opts.cpu_map {
            Some(dir) => {
                CpuMap::load_models(dir, &[]).map_err(|e| Error::Host(e.to_string()))?;
                (Some(dir.clone()), None)
            }
            None => {
                let dir = Path::new(DEFAULT_CPU_MAP);
                // Checked for presence only: a broken file is reported when a model is read
                // (`cpu-map-unreadable`), so a rewrite reads index.xml once.
                if dir.join("index.xml").is_file() {
                    (Some(dir.to_path_buf()), None)
                } else {
                    (
                        None,
                        Some(format!(
                            "{DEFAULT_CPU_MAP} not found (libvirt not installed?); using the built-in table from libvirt 9.0"
                        )),
                    )
                }
            }
        };
        if let Some(p) = opts
            .qemu_cache
            .as_ref()
            .filter(|p| !p.as_os_str().is_empty())
        {
            // A mistyped directory would silently judge without the cache: said, not guessed.
            if !p.is_dir() {
                return Err(Error::Host(format!(
                    "QEMU capability cache {}: not a directory",
                    p.display()
                )));
            }
        }
        let mut host = Host {
            cpu_map_dir,
            cpu_map_note,
            models: std::cell::RefCell::default(),
            cpu_map_problems: std::cell::RefCell::default(),
            cpus_override: opts.cpus.clone(),
            cpus: std::cell::OnceCell::new(),
            machines: Vec::new(),
            domcaps: Vec::new(),
            files: Vec::new(),
            qemu_cache_dir: match &opts.qemu_cache {
                Some(p) if p.as_os_str().is_empty() => None,
                Some(p) => Some(p.clone()),
                None => Some(PathBuf::from(QEMU_CAPS_CACHE)),
            },
            qemu_cache: std::cell::RefCell::default(),
            kvm_limit: std::cell::OnceCell::new(),
            kvm_override: opts.kvm_max_vcpus.clone(),
            libvirt_version: std::cell::OnceCell::new(),
            libvirt_override: opts.libvirt_version.clone(),
            host_feature_names: std::cell::OnceCell::new(),
            facts_version: None,
            cluster: opts.cluster.clone(),
            skip_machine_support: opts.skip_machine_support,
            cluster_cpu: std::cell::OnceCell::new(),
        };
        for path in &opts.caps {
            host.read_caps_file(path)?;
        }
        Ok(host)
    }

    /// Read one capabilities, domcapabilities, qemuCaps or `<hostFacts>` file and add its facts
    /// (a `<hostFacts>` gives its capabilities' machine types, its domcapabilities and its
    /// libvirt version).
    ///
    /// # Errors
    /// As [`Host::discover`].
    pub fn read_caps_file(&mut self, path: &Path) -> Result<()> {
        match read_fact_file(path)? {
            FactFile::Machines(m) => self.machines.extend(m),
            FactFile::DomCaps(d) => self.domcaps.push(*d),
            FactFile::HostFacts {
                machines,
                domcaps,
                libvirt,
            } => {
                self.machines.extend(machines);
                self.domcaps.extend(domcaps.map(|d| *d));
                // The first file wins, as for machine types: `--caps` files come first.
                if self.facts_version.is_none() {
                    self.facts_version = libvirt.map(|value| Fact {
                        value,
                        source: format!("<hostFacts libvirt='{value}'> in {}", path.display()),
                    });
                }
            }
        }
        self.files.push(path.display().to_string());
        Ok(())
    }

    /// The resolved features of a libvirt x86 CPU model (libvirt spellings), or None when the
    /// model is unknown. Read from the cpu_map directory on first use (only that model's file and
    /// its parents'), else from the built-in table.
    pub fn model_features(&self, model: &str) -> Option<BTreeSet<String>> {
        if let Some(hit) = self.models.borrow().get(model) {
            return hit.clone();
        }
        let found = match &self.cpu_map_dir {
            Some(dir) => match CpuMap::load_models(dir, &[model]) {
                Ok(m) => m.model_features(model).cloned(),
                Err(e) => {
                    self.cpu_map_problems.borrow_mut().push(format!(
                        "{e}; the built-in table answered for model '{model}'"
                    ));
                    CpuMap::builtin().model_features(model).cloned()
                }
            },
            None => CpuMap::builtin().model_features(model).cloned(),
        };
        self.models
            .borrow_mut()
            .insert(model.to_string(), found.clone());
        found
    }

    /// Whether libvirt knows the x86 feature `name` (libvirt spelling): libvirt 9.0's list, else the
    /// host's own `x86_features.xml` (a newer libvirt knows more), read only on a miss.
    #[must_use]
    pub fn feature_known(&self, name: &str) -> bool {
        if crate::cpu::is_known_x86_feature(name) {
            return true;
        }
        self.host_feature_names
            .get_or_init(|| {
                let text = self
                    .cpu_map_dir
                    .as_ref()
                    .and_then(|d| {
                        crate::readfile::read_regular(&d.join("x86_features.xml"), MAX_CAPS_BYTES)
                            .ok()
                    })
                    .and_then(|b| String::from_utf8(b).ok())
                    .unwrap_or_default();
                // Every `name='...'` of the file: features and their aliases.
                text.split("name=")
                    .skip(1)
                    .filter_map(|rest| {
                        let q = rest.chars().next().filter(|c| *c == '\'' || *c == '"')?;
                        rest[1..].split(q).next().map(str::to_string)
                    })
                    .collect()
            })
            .contains(name)
    }

    /// Where model features come from: the cpu_map directory, or "built-in".
    #[must_use]
    pub fn cpu_map_source(&self) -> String {
        self.cpu_map_dir
            .as_ref()
            .map_or_else(|| "built-in".to_string(), |d| d.display().to_string())
    }

    /// Every model, read in full (for `virt-cpu-policy host`).
    ///
    /// # Errors
    /// [`Error::Host`] when the cpu_map directory is broken.
    pub fn full_cpu_map(&self) -> Result<CpuMap> {
        match &self.cpu_map_dir {
            Some(dir) => CpuMap::load(dir).map_err(|e| Error::Host(e.to_string())),
            None => Ok(CpuMap::builtin()),
        }
    }

    /// Problems met reading cpu_map model files after start, each already answered from the
    /// built-in table.
    #[must_use]
    pub fn cpu_map_problems(&self) -> Vec<String> {
        self.cpu_map_problems.borrow().clone()
    }

    /// The host's online CPU count: the override, else `sysconf(_SC_NPROCESSORS_ONLN)`, asked once
    /// (glibc reads sysfs for it, so only when a rule needs it).
    pub fn cpus(&self) -> Option<&Fact<u32>> {
        self.cpus
            .get_or_init(|| self.cpus_override.clone().or_else(sysconf_cpus))
            .as_ref()
    }

    /// KVM's vCPU limit: the override, else the kernel's answer (`KVM_CAP_MAX_VCPUS`), asked once.
    pub fn kvm_limit(&self) -> Option<&Fact<u32>> {
        self.kvm_limit
            .get_or_init(|| {
                self.kvm_override.clone().or_else(|| {
                    crate::machine::kvm_max_vcpus().map(|value| Fact {
                        value,
                        source: "KVM_CAP_MAX_VCPUS on /dev/kvm".into(),
                    })
                })
            })
            .as_ref()
    }

    /// The host's libvirt version: the override (`--libvirt-version`), else the `libvirt`
    /// attribute of a `<hostFacts>` file read (`--caps`, `[host] capabilities`, the daemon's
    /// snapshot; read with the file, no extra read), else `<selfvers>` of libvirt's QEMU
    /// capability cache (the version of the libvirtd that wrote it), asked once. Only the first
    /// 4 KiB of each cache file are read.
    pub fn libvirt_version(&self) -> Option<&Fact<LibvirtVersion>> {
        self.libvirt_version
            .get_or_init(|| {
                let known = self.libvirt_override.clone();
                known.or_else(|| self.facts_version.clone()).or_else(|| {
                    let dir = self.qemu_cache_dir.as_deref()?;
                    xml_files(dir).into_iter().find_map(|p| {
                        let head = file_head(&p)?;
                        let n: u64 = element_text(&head, "selfvers")?.trim().parse().ok()?;
                        Some(Fact {
                            value: LibvirtVersion::from_number(n),
                            source: format!("<selfvers> in {}", p.display()),
                        })
                    })
                })
            })
            .as_ref()
    }

    /// The cluster's CPU for `cpu.model = "baseline"`: `compute` makes it from this host's facts
    /// ([`Host::cluster`], the cpu_map) on first use, and the answer is kept for the run, so an
    /// `audit` of a thousand guests reads the cluster's files once
    /// ([`crate::cluster::resolve`] is the `compute` to give).
    ///
    /// # Errors
    /// [`Error::Cluster`] with `compute`'s sentence, each time it is asked.
    pub fn cluster_cpu(
        &self,
        compute: impl FnOnce(&Host) -> std::result::Result<crate::policy::ClusterCpu, String>,
    ) -> Result<&crate::policy::ClusterCpu> {
        self.cluster_cpu
            .get_or_init(|| compute(self))
            .as_ref()
            .map_err(|e| Error::Cluster(e.clone()))
    }

    /// The host-model CPU of `d` (its model's name) and the psABI level it reaches, by its model's
    /// features (cpu_map) and the ones listed; None when `d` has no host-model CPU.
    pub fn host_model_level(&self, d: &DomCaps) -> Option<(String, Option<crate::cpu::Level>)> {
        let hm = d.host_model.as_ref()?;
        let model = hm.model.clone().unwrap_or_else(|| "(none)".into());
        let feats = hm.features(self.model_features(&model).as_ref());
        Some((model, crate::cpu::Level::highest(|f| feats.contains(f))))
    }

    /// Machine types from libvirt's QEMU capability cache for the domain's emulator (or, without
    /// one, for `qemu-system-ARCH`), read once. Files that cannot be read or parsed are skipped:
    /// the cache is libvirt's, and a corrupt file must not stop a guest.
    pub fn qemu_cache_machines(&self, arch: &str, emulator: Option<&str>) -> Vec<MachineFact> {
        let wanted = emulator_suffix(arch, emulator);
        if let Some(m) = self.qemu_cache.borrow().get(&wanted) {
            return m.clone();
        }
        let mut machines = Vec::new();
        let paths = self
            .qemu_cache_dir
            .as_deref()
            .map(xml_files)
            .unwrap_or_default();
        for p in paths {
            // The emulator is named in the file's first lines: look before parsing it whole.
            let Some(head) = file_head(&p) else {
                continue;
            };
            let matches = element_text(&head, "emulator").is_some_and(|e| e.ends_with(&wanted));
            if matches {
                if let Ok(FactFile::Machines(m)) = read_fact_file(&p) {
                    machines.extend(m);
                }
            }
        }
        self.qemu_cache
            .borrow_mut()
            .insert(wanted, machines.clone());
        machines
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
    /// parse of the 200 KiB file. None under [`HostOptions::skip_machine_support`].
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
        let qemu_type = if virt_type == "kvm" { "kvm" } else { "tcg" };
        let wanted = emulator_suffix(arch, emulator);
        let dir = self.qemu_cache_dir.as_deref()?;
        for p in xml_files(dir) {
            let Some(head) = file_head(&p) else { continue };
            let Some(e) = element_text(&head, "emulator").filter(|e| e.ends_with(&wanted)) else {
                continue;
            };
            // Bytes, not a String: UTF-8 validation of 200 KiB would cost more than the search.
            let text = crate::readfile::read_regular(&p, MAX_CAPS_BYTES).ok()?;
            let fresh = element_text(&head, "qemuctime")
                .and_then(|t| t.trim().parse::<i64>().ok())
                .zip(std::fs::metadata(e).ok())
                .is_some_and(|(t, m)| std::os::unix::fs::MetadataExt::ctime(&m) == t);
            // The emulator's machine types whatever the guest arch (an i686 guest of
            // qemu-system-x86_64 gets x86_64's), as libvirt checks them.
            if !fresh {
                return None;
            }
            return cache_lacks_machine(&text, qemu_type, machine).then(|| e.to_string());
        }
        None
    }

    /// Every machine type in libvirt's QEMU capability cache, all emulators (for
    /// `virt-cpu-policy host`); unreadable files are skipped.
    #[must_use]
    pub fn qemu_cache_all(&self) -> Vec<MachineFact> {
        let paths = self
            .qemu_cache_dir
            .as_deref()
            .map(xml_files)
            .unwrap_or_default();
        paths
            .iter()
            .filter_map(|p| match read_fact_file(p) {
                Ok(FactFile::Machines(m)) => Some(m),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// The vCPU limit of the domain's machine type, from the first source that knows it:
    /// capabilities files (`--caps`, `[host] capabilities`), domcapabilities (`<vcpu max>`),
    /// libvirt's QEMU capability cache, then the built-in table ([`crate::machine`]). Aliases
    /// (`pc`, `q35`, `virt`) resolve through `canonical=`/`alias=` where a file gives it.
    /// None when no source knows the type.
    pub fn machine_limit(
        &self,
        arch: &str,
        virt_type: &str,
        machine: &str,
        emulator: Option<&str>,
    ) -> Option<MachineLimit> {
        let find = |list: &[MachineFact], name: &str| -> Option<MachineLimit> {
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
        crate::machine::builtin_limit(arch, &name).map(|b| MachineLimit {
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

/// Every entry named `*.xml` directly in `dir`, whatever it is, sorted: for readers that must
/// say what they cannot read (a dangling link or a FIFO in a cluster's facts directory is a host
/// missing, not a file to skip).
///
/// # Errors
/// The operating system's error when `dir` cannot be listed.
pub fn xml_entries(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_name().as_encoded_bytes().ends_with(b".xml") {
            v.push(e.path());
        }
    }
    v.sort();
    Ok(v)
}

/// The regular `*.xml` files directly in `dir`, sorted; none when it cannot be read. (A FIFO or
/// a device would block the hook: only regular files.)
#[must_use]
pub fn xml_files(dir: &Path) -> Vec<PathBuf> {
    let mut v = xml_entries(dir).unwrap_or_default();
    v.retain(|p| p.is_file());
    v
}

/// Whether a qemuCaps file's `<machine type='TYPE' .../>` elements (libvirt writes one per line,
/// `type` then `name`, then `alias`) list machine types and none is `machine` by name or alias.
/// Searched with `memmem` (SIMD), not line by line: the hook reads the file at every start.
fn cache_lacks_machine(text: &[u8], qemu_type: &str, machine: &str) -> bool {
    let typed = format!("<machine type='{qemu_type}' ");
    if memchr::memmem::find(text, typed.as_bytes()).is_none() {
        return false;
    }
    let by_name = format!("{typed}name='{machine}'");
    if memchr::memmem::find(text, by_name.as_bytes()).is_some() {
        return false;
    }
    let by_alias = format!(" alias='{machine}'");
    let aliased = memchr::memmem::find_iter(text, by_alias.as_bytes()).any(|at| {
        let line_start = memchr::memrchr(b'\n', &text[..at]).map_or(0, |i| i + 1);
        let line = &text[line_start..at];
        let indent = line.iter().take_while(|b| b.is_ascii_whitespace()).count();
        line[indent..].starts_with(typed.as_bytes())
    });
    !aliased
}

/// The domain's emulator, or without one the end of the path libvirt picks for the arch
/// (`/qemu-system-x86_64`, `/qemu-system-i386` for i686): what a cache file's `<emulator>` ends
/// with.
fn emulator_suffix(arch: &str, emulator: Option<&str>) -> String {
    // libvirt's names for QEMU's binaries (virQEMUCapsArchToString).
    let qemu_arch = match arch {
        "i686" => "i386",
        "armv6l" | "armv7l" => "arm",
        "ppc64le" => "ppc64",
        other => other,
    };
    emulator.map_or_else(|| format!("/qemu-system-{qemu_arch}"), str::to_string)
}

/// The first 4 KiB of a file, as text (libvirt's QEMU capability cache names its emulator and
/// libvirt version there); None when it cannot be read or is not a regular file.
fn file_head(path: &Path) -> Option<String> {
    let (f, _) = crate::readfile::open_regular(path).ok()?;
    let mut head = Vec::with_capacity(4096);
    std::io::Read::read_to_end(&mut std::io::Read::take(f, 4096), &mut head).ok()?;
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// The emulator binary a libvirt QEMU capability cache (`qemuCaps`) file describes (its
/// `<emulator>`, in the first 4 KiB); None for any other file or one that cannot be read.
#[must_use]
pub fn qemu_caps_emulator(path: &Path) -> Option<String> {
    let head = file_head(path)?;
    if !head.contains("<qemuCaps>") {
        return None;
    }
    element_text(&head, "emulator").map(|e| e.trim().to_string())
}

/// The text of the first `<name>...</name>` in `text`, unparsed (for a file head).
fn element_text<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let rest = text.split(&format!("<{name}>")).nth(1)?;
    rest.split(&format!("</{name}>")).next()
}

/// What one host-fact file holds.
enum FactFile {
    /// Machine types (capabilities, qemuCaps).
    Machines(Vec<MachineFact>),
    /// One domcapabilities document.
    DomCaps(Box<DomCaps>),
    /// A `<hostFacts>`: its capabilities' machine types, its domcapabilities, its libvirt version.
    HostFacts {
        machines: Vec<MachineFact>,
        domcaps: Option<Box<DomCaps>>,
        libvirt: Option<LibvirtVersion>,
    },
}

/// The root element of the tool's host-facts file.
pub const HOST_FACTS_ROOT: &str = "hostFacts";

/// The `libvirt='X.Y.Z'` attribute of a `<hostFacts>` element: None when absent.
///
/// # Errors
/// A sentence naming the attribute when its value is not a libvirt version.
pub fn host_facts_version(
    root: roxmltree::Node<'_, '_>,
) -> std::result::Result<Option<LibvirtVersion>, String> {
    root.attribute("libvirt")
        .map(|v| {
            v.parse()
                .map_err(|e| format!("<{HOST_FACTS_ROOT} libvirt='{v}'>: {e}"))
        })
        .transpose()
}

/// One host's facts file, as `virt-cpu-policyd` publishes it and every reader of host facts
/// takes it: `<hostFacts name='NAME' libvirt='X.Y.Z'>` holding `capabilities` (`virsh
/// capabilities`) and `domcapabilities` (`virsh domcapabilities`, when known), each as libvirt
/// wrote it (an XML declaration dropped), one after the other, newline-terminated.
#[must_use]
pub fn host_facts_document(
    name: &str,
    libvirt: LibvirtVersion,
    capabilities: &str,
    domcapabilities: Option<&str>,
) -> String {
    // A document inside another cannot keep its own declaration.
    let body = |doc: &str| {
        let doc = doc.trim_start();
        let doc = match doc.strip_prefix("<?xml") {
            Some(rest) => rest.split_once("?>").map_or(doc, |(_, r)| r),
            None => doc,
        };
        format!("{}\n", doc.trim())
    };
    let mut s = format!(
        "<{HOST_FACTS_ROOT} name='{}' libvirt='{libvirt}'>\n",
        quick_xml::escape::escape(name)
    );
    s.push_str(&body(capabilities));
    if let Some(d) = domcapabilities {
        s.push_str(&body(d));
    }
    s.push_str(&format!("</{HOST_FACTS_ROOT}>\n"));
    s
}

/// Read one host-facts file: a regular file of at most [`MAX_CAPS_BYTES`] (a FIFO named as host
/// facts must not hang the hook, `/dev/zero` must not fill the memory), then by root element.
fn read_fact_file(path: &Path) -> Result<FactFile> {
    let what = path.display().to_string();
    let bytes = crate::readfile::read_regular(path, MAX_CAPS_BYTES)?;
    let text = decode(&bytes, &what)?;
    let doc = parse_xml(text, &what)?;
    let root = doc.root_element();
    let mut machines = Vec::new();
    match root.tag_name().name() {
        "capabilities" => read_capabilities(&mut machines, root, &what),
        "domainCapabilities" => return Ok(FactFile::DomCaps(Box::new(read_domcaps(root, &what)))),
        "qemuCaps" => read_qemucaps(&mut machines, root, &what),
        HOST_FACTS_ROOT => {
            let libvirt =
                host_facts_version(root).map_err(|e| Error::Host(format!("{what}: {e}")))?;
            let caps = child(root, "capabilities");
            let domcaps = child(root, "domainCapabilities");
            if caps.is_none() && domcaps.is_none() {
                return Err(Error::Host(format!(
                    "{what}: <{HOST_FACTS_ROOT}> holds neither <capabilities> nor <domainCapabilities>"
                )));
            }
            if let Some(c) = caps {
                read_capabilities(&mut machines, c, &what);
            }
            return Ok(FactFile::HostFacts {
                machines,
                domcaps: domcaps.map(|d| Box::new(read_domcaps(d, &what))),
                libvirt,
            });
        }
        other => {
            return Err(Error::Host(format!(
                "{what}: root element <{other}> is not <capabilities>, <domainCapabilities>, <qemuCaps> or <{HOST_FACTS_ROOT}>"
            )));
        }
    }
    Ok(FactFile::Machines(machines))
}

/// `virsh capabilities`: `<guest><arch name=...><machine maxCpus='N' [canonical='...']>NAME`,
/// also under `<domain type=...>`.
fn read_capabilities(machines: &mut Vec<MachineFact>, root: roxmltree::Node<'_, '_>, src: &str) {
    for guest in root.children().filter(|n| is_libvirt_element(*n, "guest")) {
        let Some(arch) = child(guest, "arch") else {
            continue;
        };
        let arch_name = arch.attribute("name").unwrap_or("");
        let mut push = |m: roxmltree::Node<'_, '_>, vt: Option<&str>| {
            if let Some(name) = text_of(m) {
                machines.push(MachineFact {
                    arch: arch_name.to_string(),
                    virt_type: vt.map(str::to_string),
                    name,
                    canonical: m.attribute("canonical").map(str::to_string),
                    max_cpus: m.attribute("maxCpus").and_then(|v| v.parse().ok()),
                    source: src.to_string(),
                });
            }
        };
        for m in arch
            .children()
            .filter(|n| is_libvirt_element(*n, "machine"))
        {
            push(m, None);
        }
        for d in arch.children().filter(|n| is_libvirt_element(*n, "domain")) {
            let vt = d.attribute("type");
            for m in d.children().filter(|n| is_libvirt_element(*n, "machine")) {
                push(m, vt);
            }
        }
    }
}

/// libvirt's QEMU capability cache: `<arch>`, `<machine type='kvm|tcg' name=... alias=...
/// maxCpus=...>` (libvirt's `tcg` is the domain type `qemu`).
fn read_qemucaps(machines: &mut Vec<MachineFact>, root: roxmltree::Node<'_, '_>, src: &str) {
    let arch = child(root, "arch").and_then(text_of).unwrap_or_default();
    for m in root
        .children()
        .filter(|n| is_libvirt_element(*n, "machine"))
    {
        let vt = match m.attribute("type") {
            Some("tcg") => "qemu",
            Some(t) => t,
            None => continue,
        };
        let Some(name) = m.attribute("name") else {
            continue;
        };
        let max = m.attribute("maxCpus").and_then(|v| v.parse().ok());
        machines.push(MachineFact {
            arch: arch.clone(),
            virt_type: Some(vt.to_string()),
            name: name.to_string(),
            canonical: None,
            max_cpus: max,
            source: src.to_string(),
        });
        if let Some(alias) = m.attribute("alias") {
            machines.push(MachineFact {
                arch: arch.clone(),
                virt_type: Some(vt.to_string()),
                name: alias.to_string(),
                canonical: Some(name.to_string()),
                max_cpus: max,
                source: src.to_string(),
            });
        }
    }
}

fn read_domcaps(root: roxmltree::Node<'_, '_>, src: &str) -> DomCaps {
    let txt = |name: &str| child(root, name).and_then(text_of);
    let mut dc = DomCaps {
        arch: txt("arch").unwrap_or_default(),
        virt_type: txt("domain").unwrap_or_default(),
        machine: txt("machine").unwrap_or_default(),
        emulator: txt("path"),
        vcpu_max: child(root, "vcpu")
            .and_then(|v| v.attribute("max"))
            .and_then(|v| v.parse().ok()),
        source: src.to_string(),
        ..DomCaps::default()
    };
    let Some(cpu) = child(root, "cpu") else {
        return dc;
    };
    for mode in cpu.children().filter(|n| is_libvirt_element(*n, "mode")) {
        if mode.attribute("supported") != Some("yes") {
            continue;
        }
        let name = mode.attribute("name").unwrap_or("");
        dc.modes.insert(name.to_string());
        match name {
            "host-model" => {
                let mut d = CpuDescription {
                    model: child(mode, "model").and_then(text_of),
                    vendor: child(mode, "vendor").and_then(text_of),
                    ..CpuDescription::default()
                };
                for f in mode
                    .children()
                    .filter(|n| is_libvirt_element(*n, "feature"))
                {
                    let Some(fname) = f.attribute("name") else {
                        continue;
                    };
                    match f.attribute("policy").unwrap_or("require") {
                        "disable" | "forbid" => d.disable.insert(fname.to_string()),
                        _ => d.require.insert(fname.to_string()),
                    };
                }
                dc.host_model = Some(d);
            }
            "custom" => {
                for m in mode.children().filter(|n| is_libvirt_element(*n, "model")) {
                    if let Some(name) = text_of(m) {
                        dc.models.push((name, m.attribute("usable") == Some("yes")));
                    }
                }
            }
            _ => {}
        }
    }
    dc
}

/// The host's online CPU count from `sysconf(_SC_NPROCESSORS_ONLN)`.
#[must_use]
pub fn sysconf_cpus() -> Option<Fact<u32>> {
    // SAFETY: sysconf has no preconditions and only reads.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    u32::try_from(n).ok().filter(|n| *n > 0).map(|value| Fact {
        value,
        source: "sysconf(_SC_NPROCESSORS_ONLN)".to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testdata::corpus;

    #[test]
    #[cfg_attr(
        not(vcp_shared_corpus),
        ignore = "needs ../shared/corpus beside the checkout"
    )]
    fn reads_this_hosts_files() {
        let caps = corpus("host-libvirt-9.0-qemu-7.2/capabilities.xml");
        let dc = corpus("host-libvirt-9.0-qemu-7.2/domcapabilities-x86_64-q35-kvm.xml");
        let qc = corpus("host-libvirt-9.0-qemu-7.2/qemucaps-x86_64.xml");
        let h = Host::discover(&HostOptions {
            caps: vec![caps, dc, qc],
            ..HostOptions::default()
        })
        .unwrap();
        assert_eq!(
            h.canonical_machine("x86_64", "q35").as_deref(),
            Some("pc-q35-7.2")
        );
        let d = h.domcaps_for("x86_64", "kvm", "q35").unwrap();
        assert_eq!(d.vcpu_max, Some(288));
        assert_eq!(d.model_usable("qemu64"), Some(false));
        let hm = d.host_model.as_ref().unwrap();
        assert!(hm.disable.contains("pni"));
        assert!(h.machines.iter().any(|m| m.name == "pc-q35-7.2"
            && m.virt_type.as_deref() == Some("qemu")
            && m.max_cpus == Some(288)));
    }

    const CAPS: &str = "<capabilities><host><cpu><arch>x86_64</arch><model>Skylake-Client-IBRS</model><vendor>Intel</vendor></cpu></host>\
        <guest><os_type>hvm</os_type><arch name='x86_64'><machine maxCpus='288'>pc-q35-7.2</machine>\
        <machine canonical='pc-q35-7.2' maxCpus='288'>q35</machine><domain type='kvm'/></arch></guest></capabilities>";
    const DOMCAPS: &str = "<?xml version='1.0'?>\n<domainCapabilities><path>/usr/bin/qemu-system-x86_64</path><domain>kvm</domain>\
        <machine>pc-i440fx-7.2</machine><arch>x86_64</arch><vcpu max='255'/><cpu>\
        <mode name='host-model' supported='yes'><model fallback='forbid'>kvm64</model><vendor>Intel</vendor>\
        <feature policy='require' name='vme'/><feature policy='disable' name='pni'/></mode></cpu></domainCapabilities>";

    /// A scratch directory for one test.
    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("vcp-host-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn v(s: &str) -> LibvirtVersion {
        s.parse().unwrap()
    }

    #[test]
    fn host_facts_file_gives_machines_domcaps_and_the_libvirt_version() {
        let dir = scratch("facts");
        let doc = host_facts_document("node-1 'a&b'", v("11.3.0"), CAPS, Some(DOMCAPS));
        assert!(
            doc.starts_with(
                "<hostFacts name='node-1 &apos;a&amp;b&apos;' libvirt='11.3.0'>\n<capabilities>"
            ),
            "{doc}"
        );
        assert!(!doc.contains("<?xml"), "{doc}");
        let f = dir.join("node-1.xml");
        std::fs::write(&f, &doc).unwrap();
        let h = Host::discover(&HostOptions {
            caps: vec![f.clone()],
            qemu_cache: Some(PathBuf::new()),
            ..HostOptions::default()
        })
        .unwrap();
        assert_eq!(
            h.canonical_machine("x86_64", "q35").as_deref(),
            Some("pc-q35-7.2")
        );
        let limit = h.machine_limit("x86_64", "kvm", "q35", None).unwrap();
        assert_eq!(
            (limit.max_cpus, limit.source.as_str()),
            (288, f.to_str().unwrap())
        );
        let d = h.domcaps_for("x86_64", "kvm", "pc").unwrap();
        let hm = d.host_model.as_ref().unwrap();
        assert_eq!(
            (hm.model.as_deref(), hm.vendor.as_deref()),
            (Some("kvm64"), Some("Intel"))
        );
        assert!(hm.require.contains("vme") && hm.disable.contains("pni"));
        let lv = h.libvirt_version().unwrap();
        assert_eq!(lv.value, v("11.3.0"));
        assert_eq!(
            lv.source,
            format!("<hostFacts libvirt='11.3.0'> in {}", f.display())
        );
        assert_eq!(h.files, vec![f.display().to_string()]);
        // Either document alone is a host-facts file too.
        let caps_only = dir.join("caps-only.xml");
        std::fs::write(&caps_only, host_facts_document("n", v("9.0.0"), CAPS, None)).unwrap();
        let mut h = Host::discover(&HostOptions::default()).unwrap();
        h.read_caps_file(&caps_only).unwrap();
        assert!(h.domcaps.is_empty() && !h.machines.is_empty());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn libvirt_version_order_override_then_host_facts_then_selfvers() {
        let dir = scratch("order");
        let cache = dir.join("cache");
        std::fs::create_dir_all(&cache).unwrap();
        std::fs::write(
            cache.join("x86_64.xml"),
            "<qemuCaps>\n<emulator>/usr/bin/qemu-system-x86_64</emulator>\n<selfvers>9000000</selfvers>\n</qemuCaps>\n",
        )
        .unwrap();
        let facts = dir.join("facts.xml");
        std::fs::write(&facts, host_facts_document("n", v("11.3.0"), CAPS, None)).unwrap();
        let other = dir.join("other.xml");
        std::fs::write(&other, host_facts_document("m", v("10.0.0"), CAPS, None)).unwrap();
        let no_version = dir.join("no-version.xml");
        std::fs::write(
            &no_version,
            format!("<hostFacts name='x'>{CAPS}</hostFacts>"),
        )
        .unwrap();
        let version = |caps: Vec<PathBuf>, over: Option<&str>| {
            let h = Host::discover(&HostOptions {
                caps,
                qemu_cache: Some(cache.clone()),
                libvirt_version: over.map(|o| Fact {
                    value: v(o),
                    source: "--libvirt-version".into(),
                }),
                ..HostOptions::default()
            })
            .unwrap();
            h.libvirt_version()
                .map(|f| (f.value.to_string(), f.source.clone()))
                .unwrap()
        };
        assert_eq!(
            version(vec![facts.clone()], Some("10.10.0")),
            ("10.10.0".into(), "--libvirt-version".into())
        );
        let (value, source) = version(vec![no_version.clone(), facts.clone(), other], None);
        assert_eq!(value, "11.3.0", "the first file with a version wins");
        assert!(source.ends_with("facts.xml"), "{source}");
        let (value, source) = version(vec![no_version], None);
        assert_eq!(value, "9.0.0");
        assert!(source.starts_with("<selfvers> in "), "{source}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn bad_host_facts_files_are_refused_naming_the_file() {
        let dir = scratch("bad");
        for (text, needle) in [
            (
                format!("<hostFacts libvirt='nine'>{CAPS}</hostFacts>"),
                "<hostFacts libvirt='nine'>: 'nine' is not a libvirt version",
            ),
            (
                "<hostFacts name='x' libvirt='9.0.0'/>".to_string(),
                "holds neither <capabilities> nor <domainCapabilities>",
            ),
        ] {
            let f = dir.join("bad.xml");
            std::fs::write(&f, text).unwrap();
            let mut h = Host::discover(&HostOptions::default()).unwrap();
            let e = h.read_caps_file(&f).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("bad.xml"), "{e}");
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn libvirt_versions_are_major_minor_micro_with_parts_left_out() {
        let v = |s: &str| s.parse::<LibvirtVersion>();
        assert_eq!(v("11.3.0").unwrap().to_string(), "11.3.0");
        assert_eq!(v("11.3").unwrap().to_string(), "11.3.0");
        assert_eq!(v("11").unwrap().to_string(), "11.0.0");
        for bad in [
            "",
            " 11.3",
            "11.3 ",
            "11 .3",
            "+11",
            "11.+3",
            "11.",
            ".3",
            "11..3",
            "1.2.3.4",
            "11.x",
            "99999999999",
        ] {
            let e = v(bad).unwrap_err();
            assert!(e.contains("MAJOR[.MINOR[.MICRO]]"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn refuses_unknown_document() {
        let dir = std::env::temp_dir().join(format!("vcp-host-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("x.xml");
        std::fs::write(&f, "<domain/>").unwrap();
        let mut h = Host::discover(&HostOptions::default()).unwrap();
        let e = h.read_caps_file(&f).unwrap_err().to_string();
        assert!(e.contains("<domain>"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
