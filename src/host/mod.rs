//! Facts about the host, read from files, never from libvirt.
//!
//! The libvirt hook must not call back into libvirt (libvirt's `docs/hooks.rst`: a deadlock is
//! likely), so everything the tool knows about the host comes from files: `virsh capabilities`,
//! `virsh domcapabilities` and libvirt's QEMU capability cache (`qemuCaps`) files, libvirt's
//! `cpu_map` directory and the kernel. Every fact remembers its source, and `virt-cpu-policy host`
//! prints them.
//!
//! The documents are read by [`crate::libvirt`] (one reader each, as the cluster reads them);
//! this module decides which fact comes from which of them, and keeps what it has asked:
//! [`Host`] and its files, version and counts here; the cpu_map's models and feature names in
//! `cpu_map.rs`; machine types, their vCPU limits and the domcapabilities of a guest in
//! `machines.rs`; the QEMU release and what its TCG gives in `qemu.rs`.

mod cpu_map;
pub mod cpuid;
mod machines;
mod own_cpu;
mod policy_names;
mod qemu;

pub use machines::{ArchOffer, DeprecatedMachine, MachineLimit};
pub use policy_names::{PolicyProblem, nearest};
pub use qemu::CacheTcg;

use crate::cluster::cluster_cpu::ClusterCpu;
use crate::error::{Error, Result};
use crate::libvirt::capabilities::MachineType;
use crate::libvirt::cpu_def::CpuDef;
use crate::libvirt::cpu_map::{CpuMap, DEFAULT_CPU_MAP};
use crate::libvirt::domcaps::DomCaps;
use crate::libvirt::qemu_caps::QemuCache;
use crate::libvirt::version::{LibvirtVersion, QemuVersion};
use crate::libvirt::{Document, DocumentError, DocumentKind, read_document};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A value and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sourced<T> {
    /// The value.
    pub value: T,
    /// A file path, "--host-cpus", "sysconf(_SC_NPROCESSORS_ONLN)", ...
    pub source: String,
}

/// Which of QEMU's KVM host CPUs: (arch, emulator, the host CPU's vendor).
type KvmCpuKey = (String, Option<String>, Option<String>);

/// Everything the tool knows about the host.
#[derive(Debug)]
pub struct Host {
    /// libvirt's cpu_map directory in use, or None for the built-in table.
    pub cpu_map_dir: Option<PathBuf>,
    /// Why the cpu_map directory was not used, when the built-in table is in use.
    pub cpu_map_note: Option<String>,
    /// Models read so far (a rewrite reads only the models it meets).
    models: std::sync::Mutex<std::collections::BTreeMap<String, Option<BTreeSet<String>>>>,
    /// Problems met reading cpu_map files after start (the built-in table answered instead).
    cpu_map_problems: std::sync::Mutex<Vec<String>>,
    /// The host's online CPU count given by an override; see [`Host::cpus`].
    cpus_override: Option<Sourced<u32>>,
    cpus: std::sync::OnceLock<Option<Sourced<u32>>>,
    /// Machine types from capabilities and qemuCaps files.
    pub machines: Vec<MachineType>,
    /// domcapabilities documents.
    pub domcaps: Vec<DomCaps>,
    /// The (arch, virt type) pairs of guests the capabilities given list
    /// ([`crate::libvirt::capabilities::Capabilities::guest_types`]); empty without capabilities.
    pub guest_types: Vec<(String, String)>,
    /// `<host><cpu>` of the first capabilities given; see [`Host::host_cpu`].
    given_host_cpu: Option<Sourced<CpuDef>>,
    /// The `<signature>` of [`Host::given_host_cpu`]'s `<host><cpu>` (family, model, stepping).
    given_host_signature: Option<(u32, u32, u32)>,
    /// This machine's CPU decoded from CPUID, on first ask; see [`Host::host_cpu`].
    decoded_host_cpu: std::sync::OnceLock<std::result::Result<Sourced<CpuDef>, String>>,
    /// The cpu_map as CPUID data, on first ask; see [`Host::x86_map`].
    x86_map: std::sync::OnceLock<std::result::Result<crate::libvirt::cpu_map::x86::X86Map, String>>,
    /// Files read, in order.
    pub files: Vec<String>,
    /// libvirt's QEMU capability cache, read lazily when a machine limit is needed.
    qemu_cache: QemuCache,
    /// Machine types of the cache, by emulator, as they are asked for.
    qemu_cache_machines: std::sync::Mutex<std::collections::HashMap<String, Vec<MachineType>>>,
    /// QEMU's KVM host CPU of the capability cache as libvirt decodes it, by (arch, emulator,
    /// vendor): decoded once per run however many guests are judged ([`Host::kvm_cpu_decoded`]).
    kvm_cpu_decoded:
        std::sync::Mutex<std::collections::HashMap<KvmCpuKey, Option<Sourced<CpuDef>>>>,
    kvm_limit: std::sync::OnceLock<Option<Sourced<u32>>>,
    kvm_override: Option<Sourced<u32>>,
    libvirt_version: std::sync::OnceLock<Option<Sourced<LibvirtVersion>>>,
    libvirt_override: Option<Sourced<LibvirtVersion>>,
    /// The QEMU release given (`--qemu-version`), over the cache's `<version>`.
    qemu_override: Option<Sourced<QemuVersion>>,
    /// Feature names (and aliases) of the cpu_map's `x86_features.xml`, read on the first name
    /// libvirt 9.0's list lacks.
    x86_feature_names: std::sync::OnceLock<std::collections::HashSet<String>>,
    /// The `libvirt` attribute of the first `<hostFacts>` file read that has one.
    facts_version: Option<Sourced<LibvirtVersion>>,
    /// The `qemu` attribute of the first `<hostFacts>` file read that has one: the judged
    /// host's QEMU release ([`Host::qemu_version`]), which the rules that depend on it read.
    facts_qemu: Option<Sourced<QemuVersion>>,
    /// The cluster's facts files and directories (`[host] cluster`), with where they are named.
    pub cluster: Option<Sourced<Vec<PathBuf>>>,
    skip_machine_support: bool,
    /// Nothing of this machine is read ([`HostOptions::only_given_facts`]).
    only_given_facts: bool,
    /// Files whose capabilities (a `virsh capabilities` document or a `<hostFacts>` holding one)
    /// list the host's machine types: then the machine types are that host's, and machine
    /// support is judged from them ([`Host::machine_unsupported`]).
    caps_machine_files: Vec<String>,
    /// This machine's facts left out because they are not the judged host's, each a sentence
    /// saying which and why ([`Host::left_out`]).
    left_out: Vec<String>,
    cluster_cpu: std::sync::OnceLock<std::result::Result<ClusterCpu, String>>,
}

/// Inputs for [`Host::discover`].
#[derive(Debug, Default, Clone)]
pub struct HostOptions {
    /// capabilities / domcapabilities / qemuCaps files (`--caps` and `[host] capabilities`).
    pub caps: Vec<PathBuf>,
    /// cpu_map directory (`--cpu-map` or `[host] cpu_map`); default [`DEFAULT_CPU_MAP`].
    pub cpu_map: Option<PathBuf>,
    /// Host CPU count override (`--host-cpus` or `[host] cpus`), with its source.
    pub cpus: Option<Sourced<u32>>,
    /// libvirt's QEMU capability cache directory: None means the default
    /// ([`crate::libvirt::qemu_caps::QEMU_CAPS_CACHE`]);
    /// an empty path disables it (tests that must not depend on the machine).
    pub qemu_cache: Option<PathBuf>,
    /// KVM's vCPU limit override (`--kvm-max-vcpus`), instead of asking `/dev/kvm`.
    pub kvm_max_vcpus: Option<Sourced<u32>>,
    /// The host's libvirt version (`--libvirt-version`), instead of libvirt's QEMU capability
    /// cache.
    pub libvirt_version: Option<Sourced<LibvirtVersion>>,
    /// The host's QEMU release (`--qemu-version`), instead of `<version>` of libvirt's QEMU
    /// capability cache.
    pub qemu_version: Option<Sourced<QemuVersion>>,
    /// The cluster's facts files and directories (`[host] cluster`), with where they are named.
    pub cluster: Option<Sourced<Vec<PathBuf>>>,
    /// Leave the machine type's support to libvirt ([`Host::machine_unsupported`] says nothing):
    /// the hook's guest was defined, so libvirt has checked it, and checks it again at start.
    pub skip_machine_support: bool,
    /// The host is known only by the facts given here (another host: `fleet`, a dry run for a
    /// cluster member): nothing of this machine is read, not libvirt's QEMU capability cache,
    /// not its cpu_map (the built-in table, libvirt 9.0's, answers unless `cpu_map` names the
    /// host's), not `/dev/kvm` (KVM's limit only from `kvm_max_vcpus`), not the CPU count (only
    /// from `cpus`). [`HostOptions::of_facts`] sets it.
    pub only_given_facts: bool,
}

impl HostOptions {
    /// A host known only by its facts: `files` (its `virsh capabilities`, `virsh
    /// domcapabilities`, or `<hostFacts>` files, which may carry its libvirt version), its
    /// cpu_map directory (None: the built-in table, libvirt 9.0's models) and its libvirt
    /// version when no `<hostFacts>` gives it.
    ///
    /// This is the per-host judging API: given `Host::discover(&HostOptions::of_facts(...))`,
    /// [`crate::pipeline::Pipeline::new`] judges a domain as that host's libvirt would (machine
    /// types and their limits from its capabilities, CPU modes and models from its
    /// domcapabilities, names from its cpu_map, every version rule from its version), and
    /// nothing of the machine the tool runs on enters the verdict ([`HostOptions::only_given_facts`]).
    #[must_use]
    pub fn of_facts(
        files: Vec<PathBuf>,
        cpu_map: Option<PathBuf>,
        libvirt_version: Option<Sourced<LibvirtVersion>>,
    ) -> HostOptions {
        HostOptions {
            caps: files,
            cpu_map,
            qemu_cache: Some(PathBuf::new()),
            libvirt_version,
            only_given_facts: true,
            ..HostOptions::default()
        }
    }

    /// The policy's `[host]` settings, with overrides (`--caps` files first, then the policy's;
    /// `--cpu-map`, `--host-cpus` over the policy's `cpu_map`, `cpus`).
    #[must_use]
    pub fn from_policy(
        policy: &crate::policy::Policy,
        caps: &[PathBuf],
        cpu_map: Option<&Path>,
        cpus: Option<Sourced<u32>>,
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
                policy.host.cpus.map(|value| Sourced {
                    value,
                    source: format!("[host] cpus in {}", policy.source),
                })
            }),
            cluster: (!policy.host.cluster.is_empty()).then(|| Sourced {
                value: policy.host.cluster.clone(),
                source: format!("[host] cluster of policy {}", policy.source),
            }),
            ..HostOptions::default()
        }
    }
}

/// The cpu_map directory that answers for the host, and the note said when none does (the
/// built-in table from libvirt 9.0 answers then): the one named (its index.xml read now, so a
/// broken one is an error at once), none when only the facts given count (this machine's
/// belongs to another host), else this machine's libvirt's when it is there.
///
/// # Errors
/// [`Error::Host`] for a named cpu_map whose index.xml cannot be read.
fn cpu_map_of(opts: &HostOptions) -> Result<(Option<PathBuf>, Option<String>)> {
    // Only index.xml is read now; model files are read when a model is met.
    Ok(match &opts.cpu_map {
        Some(dir) => {
            CpuMap::load_models(dir, &[]).map_err(|e| Error::Host(e.to_string()))?;
            (Some(dir.clone()), None)
        }
        None if opts.only_given_facts => (
            None,
            Some(
                "no cpu_map given for this host; using the built-in table from libvirt 9.0"
                    .to_string(),
            ),
        ),
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
    })
}

/// The directory of libvirt's QEMU capability cache to read: the one named, none when the
/// option names the empty path (the cache not read), else libvirt's own.
///
/// # Errors
/// [`Error::Host`] for a named path that is not a directory: a mistyped directory would
/// silently judge without the cache, so it is said, not guessed.
fn qemu_cache_of(opts: &HostOptions) -> Result<Option<PathBuf>> {
    match &opts.qemu_cache {
        Some(p) if p.as_os_str().is_empty() => Ok(None),
        Some(p) if !p.is_dir() => Err(Error::Host(format!(
            "QEMU capability cache {}: not a directory",
            p.display()
        ))),
        Some(p) => Ok(Some(p.clone())),
        None => Ok(Some(PathBuf::from(
            crate::libvirt::qemu_caps::QEMU_CAPS_CACHE,
        ))),
    }
}

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
        let (cpu_map_dir, cpu_map_note) = cpu_map_of(opts)?;
        let qemu_cache_dir = qemu_cache_of(opts)?;
        let mut host = Host {
            cpu_map_dir,
            cpu_map_note,
            models: std::sync::Mutex::default(),
            cpu_map_problems: std::sync::Mutex::default(),
            cpus_override: opts.cpus.clone(),
            cpus: std::sync::OnceLock::new(),
            machines: Vec::new(),
            domcaps: Vec::new(),
            guest_types: Vec::new(),
            given_host_cpu: None,
            given_host_signature: None,
            decoded_host_cpu: std::sync::OnceLock::new(),
            x86_map: std::sync::OnceLock::new(),
            files: Vec::new(),
            qemu_cache: QemuCache::new(qemu_cache_dir),
            qemu_cache_machines: std::sync::Mutex::default(),
            kvm_cpu_decoded: std::sync::Mutex::default(),
            kvm_limit: std::sync::OnceLock::new(),
            kvm_override: opts.kvm_max_vcpus.clone(),
            only_given_facts: opts.only_given_facts,
            libvirt_version: std::sync::OnceLock::new(),
            libvirt_override: opts.libvirt_version.clone(),
            qemu_override: opts.qemu_version.clone(),
            x86_feature_names: std::sync::OnceLock::new(),
            facts_version: None,
            facts_qemu: None,
            cluster: opts.cluster.clone(),
            skip_machine_support: opts.skip_machine_support,
            caps_machine_files: Vec::new(),
            left_out: Vec::new(),
            cluster_cpu: std::sync::OnceLock::new(),
        };
        for path in &opts.caps {
            host.read_caps_file(path)?;
        }
        host.leave_out_other_hosts_files(opts.cpu_map.is_none());
        Ok(host)
    }

    /// One host, one set of facts: when the judged host is not this machine, this machine's
    /// files that describe its own libvirt and QEMU are left out, and said so ([`Host::left_out`]).
    ///
    /// * Capabilities given (`--caps`, `[host] capabilities`, a `<hostFacts>`) list the judged
    ///   host's machine types: libvirt's QEMU capability cache of this machine is not read (its
    ///   machine types, limits and `<selfvers>` are this machine's QEMU and libvirt).
    /// * A libvirt version given (`--libvirt-version`, a `<hostFacts libvirt=...>`) that is not
    ///   the version of this machine's libvirt (the cache's `<selfvers>`): the cache is not read,
    ///   and neither is this machine's cpu_map when none was named (`default_cpu_map`); the
    ///   built-in table (libvirt 9.0's) answers unless `--cpu-map` names the host's.
    ///
    /// A local version that cannot be read (no cache) leaves the local files in use: nothing says
    /// they are another libvirt's.
    fn leave_out_other_hosts_files(&mut self, default_cpu_map: bool) {
        let Some(cache_dir) = self.qemu_cache.dir().map(Path::to_path_buf) else {
            return;
        };
        let target = self
            .libvirt_override
            .clone()
            .or_else(|| self.facts_version.clone());
        let local = self
            .qemu_cache
            .files()
            .iter()
            .find_map(|f| f.head.selfvers)
            .map(LibvirtVersion::from_number);
        let other_version = match (&target, local) {
            (Some(t), Some(l)) if t.value != l => Some((t.clone(), l)),
            _ => None,
        };
        let cache = cache_dir.display();
        if let Some(file) = self.caps_machine_files.first() {
            self.left_out.push(format!(
                "libvirt's QEMU capability cache ({cache}) left out: the judged host's capabilities ({file}) list its machine types"
            ));
        } else if let Some((t, l)) = &other_version {
            self.left_out.push(format!(
                "libvirt's QEMU capability cache ({cache}) left out: it is libvirt {l}'s (this machine's), the judged host runs libvirt {} ({})",
                t.value, t.source
            ));
        } else {
            return;
        }
        self.qemu_cache = QemuCache::new(None);
        if let (Some((t, l)), true) = (&other_version, default_cpu_map) {
            if let Some(dir) = self.cpu_map_dir.take() {
                let note = format!(
                    "{} left out: it is libvirt {l}'s (this machine's), the judged host runs libvirt {} ({}); using the built-in table from libvirt 9.0 (give the host's with --cpu-map)",
                    dir.display(),
                    t.value,
                    t.source
                );
                self.left_out.push(note.clone());
                self.cpu_map_note = Some(note);
            }
        }
    }

    /// Where machine-type support is judged from: the judged host's capabilities file when one
    /// lists machine types, else libvirt's QEMU capability cache.
    #[must_use]
    pub fn machine_support_source(&self) -> String {
        self.caps_machine_files.first().map_or_else(
            || "libvirt's QEMU capability cache".to_string(),
            |f| format!("the host's capabilities, {f}"),
        )
    }

    /// This machine's facts left out because they are not the judged host's, each a sentence
    /// naming the file and why (empty when the judged host is this machine). `host` prints them;
    /// `check` and `rewrite` say them on stderr.
    #[must_use]
    pub fn left_out(&self) -> &[String] {
        &self.left_out
    }

    /// Read one capabilities, domcapabilities, qemuCaps or `<hostFacts>` file and add its facts
    /// (a `<hostFacts>` gives its capabilities' machine types, its domcapabilities and its
    /// libvirt version).
    ///
    /// # Errors
    /// As [`Host::discover`].
    pub fn read_caps_file(&mut self, path: &Path) -> Result<()> {
        let accept = [
            DocumentKind::Capabilities,
            DocumentKind::DomCaps,
            DocumentKind::QemuCaps,
            DocumentKind::HostFacts,
        ];
        let doc = read_document(path, &accept).map_err(|e| match e {
            DocumentError::Input(e) => e,
            e @ DocumentError::Invalid { .. } => Error::Host(e.to_string()),
        })?;
        let file = path.display().to_string();
        match doc {
            Document::Capabilities(c) => {
                self.keep_host_cpu(&c, &file);
                if !c.machines.is_empty() {
                    self.caps_machine_files.push(file);
                }
                self.machines.extend(c.machines);
                self.guest_types.extend(c.guest_types);
            }
            Document::QemuCaps(q) => self.machines.extend(q.machines),
            Document::DomCaps(d) => self.domcaps.push(*d),
            Document::HostFacts(f) => {
                if let Some(c) = &f.capabilities {
                    self.keep_host_cpu(c, &file);
                }
                if f.capabilities
                    .as_ref()
                    .is_some_and(|c| !c.machines.is_empty())
                {
                    self.caps_machine_files.push(file);
                }
                if let Some(c) = f.capabilities {
                    self.machines.extend(c.machines);
                    self.guest_types.extend(c.guest_types);
                }
                self.domcaps.extend(f.domcaps);
                // The first file wins, as for machine types: `--caps` files come first.
                if self.facts_qemu.is_none() {
                    self.facts_qemu = f.qemu.map(|value| Sourced {
                        value,
                        source: format!("<hostFacts qemu='{value}'> in {}", path.display()),
                    });
                }
                if self.facts_version.is_none() {
                    self.facts_version = f.libvirt.map(|value| Sourced {
                        value,
                        source: format!("<hostFacts libvirt='{value}'> in {}", path.display()),
                    });
                }
            }
            // Not among `accept`: read_document refused it.
            Document::Cpu(_) => {}
        }
        self.files.push(path.display().to_string());
        Ok(())
    }

    /// Names facts file `from` as `to` wherever this host's facts say where they come from (the
    /// sources of its machine types, domcapabilities, host CPU and libvirt version): the fleet
    /// judges hosts alike in their facts once, with a placeholder where each host's own file
    /// is then named.
    pub fn relabel_file(&mut self, from: &str, to: &str) {
        let swap = |s: &mut String| {
            if s == from {
                *s = to.to_string();
            }
        };
        for m in &mut self.machines {
            swap(&mut m.source);
        }
        for d in &mut self.domcaps {
            swap(&mut d.source);
        }
        self.files.iter_mut().for_each(swap);
        self.caps_machine_files.iter_mut().for_each(swap);
        // "capabilities host CPU, FILE" and "<hostFacts libvirt='V'> in FILE".
        let suffix = |s: &mut String| {
            if s.ends_with(from) {
                s.truncate(s.len() - from.len());
                s.push_str(to);
            }
        };
        if let Some(c) = &mut self.given_host_cpu {
            suffix(&mut c.source);
        }
        if let Some(v) = &mut self.facts_version {
            suffix(&mut v.source);
        }
        if let Some(v) = &mut self.facts_qemu {
            suffix(&mut v.source);
        }
    }

    /// Keeps `c`'s `<host><cpu>` (read from `file`) unless an earlier file gave one: the first
    /// file wins, as for machine types.
    fn keep_host_cpu(&mut self, c: &crate::libvirt::capabilities::Capabilities, file: &str) {
        if self.given_host_cpu.is_none() {
            self.given_host_signature = c.host_signature_numbers;
            self.given_host_cpu = c.host_cpu.clone().map(|value| Sourced {
                value,
                source: format!("capabilities host CPU, {file}"),
            });
        }
    }

    /// The host's online CPU count: the override, else `sysconf(_SC_NPROCESSORS_ONLN)`, asked once
    /// (glibc reads sysfs for it, so only when a rule needs it).
    pub fn cpus(&self) -> Option<&Sourced<u32>> {
        self.cpus
            .get_or_init(|| {
                let local = (!self.only_given_facts).then(sysconf_cpus).flatten();
                self.cpus_override.clone().or(local)
            })
            .as_ref()
    }

    /// KVM's vCPU limit: the override, else the kernel's answer (`KVM_CAP_MAX_VCPUS`), asked once.
    pub fn kvm_limit(&self) -> Option<&Sourced<u32>> {
        self.kvm_limit
            .get_or_init(|| {
                self.kvm_override.clone().or_else(|| {
                    if self.only_given_facts {
                        return None;
                    }
                    crate::vcpu_limits::kvm_max_vcpus().map(|value| Sourced {
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
    /// capability cache (the version of the libvirtd that wrote it), asked once. Only the head
    /// of each cache file is read ([`crate::libvirt::qemu_caps::head`]).
    pub fn libvirt_version(&self) -> Option<&Sourced<LibvirtVersion>> {
        self.libvirt_version
            .get_or_init(|| {
                let known = self.libvirt_override.clone();
                known.or_else(|| self.facts_version.clone()).or_else(|| {
                    self.qemu_cache.files().iter().find_map(|f| {
                        Some(Sourced {
                            value: LibvirtVersion::from_number(f.head.selfvers?),
                            source: format!("<selfvers> in {}", f.path.display()),
                        })
                    })
                })
            })
            .as_ref()
    }

    /// The cluster's CPU for `cpu.model = "baseline"` ([`ClusterCpu::of`] the `[host] cluster`
    /// files, with this host's cpu_map), computed on first use and kept for the run, so an
    /// `audit` of a thousand guests reads the cluster's files once.
    ///
    /// # Errors
    /// [`Error::Cluster`] with [`ClusterCpu::of`]'s sentence, each time it is asked.
    pub fn cluster_cpu(&self) -> Result<&ClusterCpu> {
        self.cluster_cpu
            .get_or_init(|| {
                let files = self.cluster.as_ref();
                ClusterCpu::of(
                    files.map(|f| f.value.as_slice()),
                    files.map_or("", |f| f.source.as_str()),
                    self.cpu_map_dir.as_deref(),
                )
            })
            .as_ref()
            .map_err(|e| Error::Cluster(e.clone()))
    }

    /// The cluster's CPU when this run has computed it ([`Host::cluster_cpu`] was asked and
    /// succeeded); None otherwise, and nothing is read.
    #[must_use]
    pub fn cluster_cpu_computed(&self) -> Option<&ClusterCpu> {
        self.cluster_cpu.get().and_then(|r| r.as_ref().ok())
    }

    /// The host-model CPU of `d` (its model's name) and the psABI level it reaches, by its model's
    /// features (cpu_map) and the ones listed; None when `d` has no host-model CPU.
    pub fn host_model_level(&self, d: &DomCaps) -> Option<(String, Option<crate::cpu::Level>)> {
        let hm = d.host_model.as_ref()?;
        let model = hm.model.clone().unwrap_or_else(|| "(none)".into());
        let feats = hm.guaranteed_features(self.model_features(&model).as_ref());
        Some((model, crate::cpu::Level::highest(|f| feats.contains(f))))
    }
}

/// The host's online CPU count from `sysconf(_SC_NPROCESSORS_ONLN)`.
#[must_use]
pub fn sysconf_cpus() -> Option<Sourced<u32>> {
    // SAFETY: sysconf has no preconditions and only reads.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    u32::try_from(n)
        .ok()
        .filter(|n| *n > 0)
        .map(|value| Sourced {
            value,
            source: "sysconf(_SC_NPROCESSORS_ONLN)".to_string(),
        })
}

#[cfg(test)]
mod tests;
