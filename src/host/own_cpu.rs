//! The host's own CPU ([`Host::host_cpu`]): the capabilities' `<host><cpu>`, else this
//! machine's CPUID decoded as libvirt decodes it, and the cpu_map as CPUID data both it and the
//! KVM start comparison use ([`Host::x86_map`]).

use super::{DEFAULT_CPU_MAP, Host, Sourced, cpuid};
use crate::libvirt::cpu_def::CpuDef;
use std::path::Path;

impl Host {
    /// The host's physical CPU, as `virsh capabilities` shows it in `<host><cpu>`: what a host
    /// known without domcapabilities is judged against ([`crate::destination::compare_cpu`]),
    /// and what libvirt compares a KVM custom CPU with at start ([`crate::validate::kvm`]).
    ///
    /// * `<host><cpu>` of the first capabilities given (a `virsh capabilities` document or a
    ///   `<hostFacts>` holding one), with that file as its source;
    /// * else, when this machine is the judged host ([`super::HostOptions::only_given_facts`] false),
    ///   is x86_64 and its libvirt's cpu_map directory ([`DEFAULT_CPU_MAP`]) is in use
    ///   ([`Host::cpu_map_dir`]; the built-in table has no CPUID bits, another directory may be
    ///   another libvirt's), this machine's CPUID decoded as libvirt decodes it
    ///   (`virCPUx86GetHost`: [`cpuid::this_machine`], [`X86Map::decode_host`]), on the first
    ///   ask only (loading the cpu_map as CPUID data costs a few milliseconds, which a guest
    ///   start whose CPU needs no comparison does not pay);
    /// * else None ([`Host::host_cpu_unknown`] says why).
    ///
    /// [`X86Map::decode_host`]: crate::libvirt::cpu_map::x86::X86Map::decode_host
    #[must_use]
    pub fn host_cpu(&self) -> Option<&Sourced<CpuDef>> {
        self.given_host_cpu
            .as_ref()
            .or_else(|| self.decoded_host_cpu().as_ref().ok())
    }

    /// The family, model and stepping of [`Host::host_cpu`]: the capabilities' `<signature>`
    /// when that CPU was given, else this machine's (CPUID leaf 1, read again) when it is the
    /// decoded one; None when neither says. libvirt's decoding prefers a model whose
    /// `<signature>` it is (`x86DecodeUseCandidate`).
    #[must_use]
    pub fn host_cpu_signature(&self) -> Option<(u32, u32, u32)> {
        if self.given_host_cpu.is_some() {
            return self.given_host_signature;
        }
        self.decoded_host_cpu.get()?.as_ref().ok()?;
        let map = self.x86_map().ok()?;
        cpuid::this_machine(map)?
            .signature()
            .filter(|s| s.0 != 0 || s.1 != 0)
    }

    /// Whether [`Host::host_cpu`] may give a CPU of `arch`, asked without decoding this
    /// machine's CPUID: a given host CPU of that arch, or this machine's, x86_64, still to be
    /// decoded (or decoded). A decoding that then fails leaves [`Host::host_cpu`] None.
    #[must_use]
    pub fn may_know_host_cpu(&self, arch: &str) -> bool {
        if let Some(given) = &self.given_host_cpu {
            return crate::libvirt::arch::host_cpu_serves(arch, given.value.arch.as_deref());
        }
        match self.decoded_host_cpu.get() {
            Some(decoded) => decoded.as_ref().is_ok_and(|c| {
                crate::libvirt::arch::host_cpu_serves(arch, c.value.arch.as_deref())
            }),
            None => {
                !self.only_given_facts
                    && crate::libvirt::arch::Arch::of(arch).is_x86()
                    && crate::libvirt::arch::host_arch() == "x86_64"
                    && self.own_cpu_map()
            }
        }
    }

    /// libvirt's cpu_map in use ([`Host::cpu_map_dir`]) as CPUID data, loaded on the first ask
    /// (about 3 ms) and kept, for whoever compares CPUs as libvirt does: this machine's CPU
    /// decoding ([`Host::host_cpu`]) and the KVM start comparison ([`crate::validate::kvm`]).
    ///
    /// # Errors
    /// The loader's sentence ([`crate::libvirt::cpu_map::CpuMapError`]), or that the built-in
    /// table (no CPUID bits) is in use.
    pub fn x86_map(&self) -> std::result::Result<&crate::libvirt::cpu_map::x86::X86Map, String> {
        self.x86_map
            .get_or_init(|| match &self.cpu_map_dir {
                Some(dir) => {
                    crate::libvirt::cpu_map::x86::X86Map::load(dir).map_err(|e| e.to_string())
                }
                None => Err("the built-in cpu_map table has no CPUID data".into()),
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Whether the cpu_map in use is this machine's libvirt's ([`DEFAULT_CPU_MAP`]): the map
    /// `virsh capabilities` decodes this machine's CPU with. A directory named with `--cpu-map`
    /// or `[host] cpu_map` may be another libvirt's (a dry run, the tests' recorded map): this
    /// machine's CPU decoded with it is no capabilities this machine shows, and would make the
    /// judgement depend on the machine the tool runs on.
    pub(crate) fn own_cpu_map(&self) -> bool {
        // Compared as the directories they are (`/usr/share/libvirt/../libvirt/cpu_map`, a link),
        // not as text.
        let own = |p: &Path| std::fs::canonicalize(p).ok();
        self.cpu_map_dir.as_deref().is_some_and(|d| {
            d == Path::new(DEFAULT_CPU_MAP)
                || own(d).is_some_and(|c| Some(c) == own(Path::new(DEFAULT_CPU_MAP)))
        })
    }

    /// Whether the host's own CPU of `arch` is AMD's, without decoding CPUID: a given
    /// capabilities host CPU's `<vendor>`, else (a host as found: x86_64, its own libvirt's
    /// cpu_map in use) this machine's CPUID vendor string (`AuthenticAMD`, libvirt's `x86_vendors.xml`). `Some(what says so)`, in
    /// words, when it is; None when it is not or nothing says.
    #[must_use]
    pub fn own_vendor_is_amd(&self, arch: &str) -> Option<String> {
        if let Some(given) = &self.given_host_cpu {
            let amd = crate::libvirt::arch::host_cpu_serves(arch, given.value.arch.as_deref())
                && given.value.vendor.as_deref() == Some("AMD");
            return amd.then(|| format!("the host CPU of {}", given.source));
        }
        // This machine's, on the terms its decoded CPU is ([`Host::may_know_host_cpu`]: its own
        // libvirt's cpu_map in use; a named one is a dry run for another host).
        (self.may_know_host_cpu(arch)
            && cpuid::this_machine_vendor().as_deref() == Some("AuthenticAMD"))
        .then(|| "this machine's CPUID (AuthenticAMD)".to_string())
    }

    /// Why [`Host::host_cpu`] is None, one sentence; None when it is known.
    #[must_use]
    pub fn host_cpu_unknown(&self) -> Option<&str> {
        if self.given_host_cpu.is_some() {
            return None;
        }
        self.decoded_host_cpu().as_ref().err().map(String::as_str)
    }

    /// This machine's CPU from CPUID, decoded once (see [`Host::host_cpu`]), or why not.
    fn decoded_host_cpu(&self) -> &std::result::Result<Sourced<CpuDef>, String> {
        self.decoded_host_cpu.get_or_init(|| {
            if self.only_given_facts {
                return Err("not given (give capabilities with --caps: the judged host is not this machine)".into());
            }
            let arch = crate::libvirt::arch::host_arch();
            if arch != "x86_64" {
                return Err(format!("not given (give capabilities with --caps: this machine's CPU is decoded from CPUID on x86_64 only, not {arch})"));
            }
            let Some(dir) = &self.cpu_map_dir else {
                return Err("not given (give capabilities with --caps: decoding this machine's CPUID needs libvirt's cpu_map, which is not in use)".into());
            };
            if !self.own_cpu_map() {
                return Err(format!("not given (give capabilities with --caps: this machine's CPUID is decoded only with its libvirt's cpu_map, {DEFAULT_CPU_MAP}, not {})", dir.display()));
            }
            let map = self
                .x86_map()
                .map_err(|e| format!("this machine's CPUID not decoded: {e}"))?;
            let raw = cpuid::this_machine(map)
                .ok_or_else(|| format!("this machine's CPUID cannot be read on {arch}"))?;
            let value = map
                .decode_host(&raw)
                .map_err(|e| format!("this machine's CPUID not decoded: {e}"))?;
            Ok(Sourced {
                value,
                source: format!(
                    "CPUID of this machine, decoded with libvirt's cpu_map at {} (virCPUx86GetHost)",
                    dir.display()
                ),
            })
        })
    }
}
