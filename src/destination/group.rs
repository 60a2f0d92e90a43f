//! The migration group of a `host-passthrough` guest: the hosts whose CPU is the same as its
//! source host's, the only ones it may live-migrate to.
//!
//! A `host-passthrough` guest sees its host's CPU as is (QEMU's `-cpu host`: every feature KVM
//! gives, the model, family and stepping), and libvirt checks nothing on its migration: libvirt's
//! domain format says such a migration "is dangerous if the source and destination hosts are not
//! identical in both hardware, QEMU version, microcode version and configuration", and the guest
//! "may hang or crash upon resuming execution on the destination host" (formatdomain.rst, CPU
//! model and topology); libvirt's migration notes (kbase) add that the destination "must always
//! expose a superset of the features" and that source and destination should be identical; Nova
//! asks for identical CPUs, kernel and microcode for host-passthrough instances (its CPU models
//! guide; Red Hat OpenStack's migration constraints: "the CPU of the source and destination
//! Compute node must match exactly, such as instances that use CPU host passthrough").
//!
//! The group is decided from the facts each host publishes, its capabilities' `<host><cpu>`
//! (the physical CPU as its libvirt decodes it, [`HostCpu`]): the same arch and vendor, the same
//! `<signature>` (family, model, stepping) and `<microcode version>` when both hosts publish
//! them (libvirt 7.0 writes no signature), and the same features. Two libvirts describe one CPU
//! with different names (the four generations of the test rig, one physical CPU, say
//! `Broadwell-noTSX-IBRS` on 7.0 and 9.0 and `Icelake-Server-v2` on 11.3 and 12.8), so on x86 a
//! CPU is its model's features plus the listed ones, expanded through its own host's cpu_map,
//! and only the features both hosts' cpu_maps define are compared (a feature one libvirt cannot
//! name is no fact about its host, nor are the bits of an MSR its libvirt did not read:
//! [`HostCpu::unread`]); elsewhere (aarch64) the model and the listed features are
//! compared as written. QEMU's version and the kernel are not part of the group: the facts
//! hold no more of them than the machine types, which keep the device model, and on one CPU
//! host-passthrough KVM guests migrate live between QEMU 5.2, 7.2, 10.0 and 11.1
//! (tests/fleet/migrate).
//!
//! When two hosts agree on arch, vendor, signature and microcode and differ only in features,
//! and their facts were read through two cpu_maps (or their libvirts' versions differ), the
//! difference may be no more than how each libvirt's cpu_map names one CPU (a host's facts read
//! through another libvirt's cpu_map: features its own libvirt could not list count as missing):
//! the sentence says so, names the cpu_map each host was read through, and asks for each host's
//! own (`--cpu-map HOST=DIR`).
//!
//! The features the guest's own `<cpu>` turns off (`policy='disable'` or `forbid`) are not the
//! guest's, and are left out of the comparison; a running guest's live XML adds none (libvirt
//! 9.0 writes `<cpu mode='host-passthrough' check='none' migratable='on'/>`).

use crate::domain::Domain;
use crate::finding::{Code, Finding};
use crate::libvirt::cpu_def::{CpuDef, CpuMode, CpuType, FeaturePolicy};
use crate::libvirt::cpu_map::x86::X86Map;
use crate::libvirt::version::LibvirtVersion;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// How many differing features of one host a sentence names.
const FEATURES_SHOWN: usize = 8;

/// A host's CPU as a host-passthrough guest sees it, from its capabilities' `<host><cpu>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCpu {
    /// `<arch>`.
    pub arch: String,
    /// `<vendor>`, when given.
    pub vendor: Option<String>,
    /// `<model>` as the host's libvirt names it.
    pub model: Option<String>,
    /// `<signature>` as "family F model M stepping S", when given.
    pub signature: Option<String>,
    /// `<microcode version>`, when given.
    pub microcode: Option<String>,
    /// Its features: on x86 with a cpu_map, the model's and the listed ones (the names the
    /// host's cpu_map decodes its CPUID data to); else the listed ones.
    pub features: BTreeSet<String>,
    /// Every feature name the host's libvirt knows (its x86 cpu_map); None: not known, every
    /// name is compared.
    pub known: Option<BTreeSet<String>>,
    /// The cpu_map directory its features were read through (x86 with a cpu_map), for the
    /// sentence when two hosts may differ only through their cpu_maps.
    pub cpu_map: Option<PathBuf>,
    /// The host's libvirt, when its facts say (`<hostFacts libvirt=...>`); set by the caller.
    pub libvirt: Option<LibvirtVersion>,
    /// The features of an MSR of which the host lists none (x86 with a cpu_map): its libvirt did
    /// not read that MSR, so they are no fact about its host. libvirt 9.0 reads
    /// `IA32_ARCH_CAPABILITIES` only when CPUID 7.0 EDX bit 29 says it exists, which AMD CPUs
    /// never set; libvirt 11.3 lists its bits (`rdctl-no`, `mds-no`...) on the same AMD host
    /// (seen on one machine: a host-passthrough guest migrated live between the two).
    pub unread: BTreeSet<String>,
}

impl HostCpu {
    /// The CPU of a capabilities' `<host><cpu>` `cpu`, with its `<signature>` and `<microcode>`;
    /// on x86 expanded through `map`, the host's own libvirt's cpu_map (features it does not
    /// define are left out, as libvirt could never have listed them).
    ///
    /// # Errors
    /// A sentence: no `<arch>`, or a model `map` does not define (the cpu_map given is not the
    /// host's libvirt's).
    pub fn new(
        cpu: &CpuDef,
        signature: Option<&str>,
        microcode: Option<&str>,
        map: Option<&X86Map>,
    ) -> Result<HostCpu, String> {
        let arch = cpu.arch.clone().ok_or("its host CPU names no <arch>")?;
        let listed = || cpu.features.iter().map(|(f, _)| f.clone()).collect();
        let mut unread = BTreeSet::new();
        let map = map.filter(|_| crate::libvirt::arch::is_x86(&arch));
        let (features, known) = match map {
            Some(map) => {
                let mut data = map.empty_data();
                if let Some(m) = &cpu.model {
                    let model = map.model(m).ok_or_else(|| {
                        format!(
                            "its host CPU model '{m}' is not in the cpu_map {} (not its libvirt's)",
                            map.source().display()
                        )
                    })?;
                    data.add(&model.data);
                }
                for f in cpu.features.iter().filter_map(|(f, _)| map.feature(f)) {
                    data.add(&f.data);
                }
                let names: BTreeSet<String> = map
                    .feature_names(&data)
                    .into_iter()
                    .map(str::to_string)
                    .collect();
                let read: BTreeSet<u32> = map
                    .features()
                    .iter()
                    .filter(|f| names.contains(&f.name))
                    .filter_map(|f| f.msr)
                    .collect();
                unread = map
                    .features()
                    .iter()
                    .filter(|f| f.msr.is_some_and(|m| !read.contains(&m)))
                    .map(|f| f.name.clone())
                    .collect();
                let known = map.features().iter().map(|f| f.name.clone()).collect();
                (names, Some(known))
            }
            None => (listed(), None),
        };
        Ok(HostCpu {
            arch,
            vendor: cpu.vendor.clone(),
            model: cpu.model.clone(),
            signature: signature.map(str::to_string),
            microcode: microcode.map(str::to_string),
            features,
            known,
            cpu_map: map.map(|m| m.source().to_path_buf()),
            libvirt: None,
            unread,
        })
    }

    /// When this CPU and `other` differ in features only, with the same arch, vendor, signature
    /// and microcode (both given), read by two libvirts through one cpu_map, or by one libvirt
    /// (or one unknown) through two (module docs; two libvirts each through a map of its own
    /// is no hint):
    /// the sentence saying their difference may be only their cpu_maps' names, with each host's
    /// (`me`, `them`) cpu_map and libvirt, and the `--cpu-map HOST=DIR` to give. None otherwise.
    #[must_use]
    pub fn cpu_map_hint(&self, other: &HostCpu, me: &str, them: &str) -> Option<String> {
        let same = self.arch == other.arch
            && self.vendor == other.vendor
            && self.signature.is_some()
            && self.signature == other.signature
            && self.microcode.is_some()
            && self.microcode == other.microcode
            && self.known.is_some()
            && other.known.is_some();
        let two_libvirts =
            self.libvirt.is_some() && other.libvirt.is_some() && self.libvirt != other.libvirt;
        // Two libvirts read through two cpu_maps is each host judged with its own map (as
        // `--cpu-map HOST=DIR` for each gives): the difference is the CPUs', nothing to suggest.
        // One map for two libvirts, or two maps for one libvirt (or an unknown one), may be
        // a reading that is not the host's own.
        let two_maps = self.cpu_map != other.cpu_map;
        if !same || two_maps == two_libvirts {
            return None;
        }
        let read = |c: &HostCpu, host: &str| {
            let libvirt = c
                .libvirt
                .as_ref()
                .map_or_else(|| "libvirt unknown".to_string(), |v| format!("libvirt {v}"));
            let map = c
                .cpu_map
                .as_ref()
                .map_or_else(|| "?".to_string(), |p| p.display().to_string());
            format!("{host}'s facts ({libvirt}) through {map}")
        };
        Some(format!(
            "their arch, vendor, signature ({}) and microcode ({}) are the same: the features may differ only in how two libvirts' cpu_maps name one CPU (read: {}; {}); judge each host with its own libvirt's cpu_map (--cpu-map {me}=DIR --cpu-map {them}=DIR, DIR the host's /usr/share/libvirt/cpu_map)",
            self.signature.as_deref().unwrap_or_default(),
            self.microcode.as_deref().unwrap_or_default(),
            read(self, me),
            read(other, them),
        ))
    }

    /// How `other` differs from this CPU, each a phrase ("vendor Intel vs AMD", "features only
    /// on A: x, y"), `own` the features the guest's `<cpu>` turns off (left out); `me` and `them`
    /// name the hosts. Empty: the same CPU, one migration group.
    #[must_use]
    pub fn differences(
        &self,
        other: &HostCpu,
        own: &BTreeSet<String>,
        me: &str,
        them: &str,
    ) -> Vec<String> {
        let mut out = Vec::new();
        let mut differ = |what: &str, a: Option<&str>, b: Option<&str>, both: bool| {
            if (both || (a.is_some() && b.is_some())) && a != b {
                let v = |x: Option<&str>| x.unwrap_or("none").to_string();
                out.push(format!("{what} {} vs {}", v(a), v(b)));
            }
        };
        differ("arch", Some(&self.arch), Some(&other.arch), true);
        differ(
            "vendor",
            self.vendor.as_deref(),
            other.vendor.as_deref(),
            true,
        );
        differ(
            "signature",
            self.signature.as_deref(),
            other.signature.as_deref(),
            false,
        );
        differ(
            "microcode",
            self.microcode.as_deref(),
            other.microcode.as_deref(),
            false,
        );
        // On x86 the model is a name its libvirt gave the CPUID data: compared through the
        // features. Elsewhere it is the CPU's own name (`Neoverse-N1`).
        if self.known.is_none() || other.known.is_none() {
            differ("model", self.model.as_deref(), other.model.as_deref(), true);
        }
        let compared = |f: &&String| {
            !own.contains(*f)
                && !self.unread.contains(*f)
                && !other.unread.contains(*f)
                && self.known.as_ref().is_none_or(|k| k.contains(*f))
                && other.known.as_ref().is_none_or(|k| k.contains(*f))
        };
        let only = |a: &HostCpu, b: &HostCpu| -> Vec<String> {
            a.features
                .difference(&b.features)
                .filter(compared)
                .cloned()
                .collect()
        };
        for (host, list) in [(me, only(self, other)), (them, only(other, self))] {
            // A few name the difference; two CPUs of other generations differ in dozens.
            let more = list.len().saturating_sub(FEATURES_SHOWN);
            if !list.is_empty() {
                let shown = list[..list.len() - more].join(", ");
                let tail = if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                };
                out.push(format!("features only on {host}: {shown}{tail}"));
            }
        }
        out
    }
}

/// Where a guest comes from, for [`Passthrough::group`].
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// Its facts name no host.
    Unknown,
    /// Its facts name this host, whose facts are not among those given.
    Missing(&'a str),
    /// This host, and its CPU (or why it is not known).
    Host(&'a str, Result<&'a HostCpu, &'a str>),
}

/// How `dom`'s CPU is its host's CPU as is, in words, or None: `host-passthrough`, or `maximum`
/// under hardware virtualisation, which "is functionally identical to host-passthrough"
/// (libvirt's formatdomain); under TCG `maximum` is the emulated CPU, the same on every host of a
/// QEMU.
#[must_use]
pub fn passthrough_mode(dom: &Domain<'_>) -> Option<&'static str> {
    match dom
        .cpus()
        .first()
        .copied()
        .and_then(crate::domain::cpu_mode)
    {
        Some(CpuMode::HostPassthrough) => Some(CpuMode::HostPassthrough.as_str()),
        Some(CpuMode::Maximum) if dom.virt_type() != "qemu" => {
            Some("maximum (under KVM, host-passthrough)")
        }
        _ => None,
    }
}

/// What a host-passthrough guest brings to the question of its migration group, read once from
/// its domain: how its CPU is its host's ([`passthrough_mode`]) and the features its own `<cpu>`
/// turns off (`policy='disable'` or `forbid`: not the guest's, left out of the comparison).
/// Guests alike in both get the same answer on every pair of hosts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Passthrough {
    /// [`passthrough_mode`]'s words.
    pub mode: &'static str,
    /// The features the guest's `<cpu>` disables or forbids.
    pub own: BTreeSet<String>,
}

impl Passthrough {
    /// The passthrough CPU of `dom`, or None: its first `<cpu>` is not host-passthrough (nor
    /// `maximum` under hardware virtualisation), or it has none.
    #[must_use]
    pub fn of(dom: &Domain<'_>) -> Option<Passthrough> {
        let cpu = dom.cpus().first().copied()?;
        let mode = passthrough_mode(dom)?;
        let own = CpuDef::read_as(cpu, CpuType::Guest)
            .map(|c| {
                c.features
                    .into_iter()
                    .filter(|(_, p)| matches!(p, FeaturePolicy::Disable | FeaturePolicy::Forbid))
                    .map(|(f, _)| f)
                    .collect()
            })
            .unwrap_or_default();
        Some(Passthrough { mode, own })
    }

    /// Whether this guest, running and arriving by live migration from `source`, stays in its
    /// migration group on host `dest` (its CPU, or why it is not known): None when it does, or
    /// when the question does not arise (the source host itself); else the `passthrough-group`
    /// finding naming both hosts and what differs, or what is not known (a source host or a CPU
    /// the facts do not give: the pair is not said to run on a guess). A guest that is started
    /// rather than migrated boots with the new host's CPU: the caller does not ask.
    #[must_use]
    pub fn group(
        &self,
        source: Source<'_>,
        dest: &str,
        dest_cpu: Result<&HostCpu, &str>,
    ) -> Option<Finding> {
        let mode = self.mode;
        let rule = format!(
            "a running {mode} guest sees its host's CPU as is and migrates only to a host of the same CPU (libvirt: between hosts not identical in hardware and microcode the guest may hang or crash)"
        );
        let error = |why: String| {
            Finding::error(
                Code::PassthroughGroup,
                format!("{rule}: {why}"),
                "migrate it to a host of its group (virt-cpu-policy baseline lists the groups of identical CPUs), or shut it down and start it there (a started host-passthrough guest takes that host's CPU)",
            )
        };
        let (src, src_cpu) = match source {
            Source::Unknown => {
                return Some(error(format!(
                    "its source host is unknown (its facts name no host), so whether {dest}'s CPU is the same cannot be told (publish its facts with its host's: virt-cpu-policy facts --guests)"
                )));
            }
            Source::Missing(h) => {
                return Some(error(format!(
                    "its source host {h} has no facts among those given, so whether {dest}'s CPU is the same cannot be told"
                )));
            }
            Source::Host(h, _) if h == dest => return None,
            Source::Host(h, c) => (h, c),
        };
        let (s, d) = match (src_cpu, dest_cpu) {
            (Ok(s), Ok(d)) => (s, d),
            (Err(why), _) => return Some(error(format!("the CPU of {src} is not known: {why}"))),
            (_, Err(why)) => return Some(error(format!("the CPU of {dest} is not known: {why}"))),
        };
        let diffs = s.differences(d, &self.own, src, dest);
        (!diffs.is_empty()).then(|| {
            let hint = s
                .cpu_map_hint(d, src, dest)
                .map_or_else(String::new, |h| format!("; {h}"));
            error(format!(
                "{src} and {dest} differ: {} (each host's capabilities host CPU){hint}",
                diffs.join("; ")
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    /// One AMD CPU as libvirt 9.0 lists it (no IA32_ARCH_CAPABILITIES bit: it reads the MSR
    /// only when CPUID says it exists) and as libvirt 11.3 does (`rdctl-no`, `mds-no` of that
    /// MSR): one migration group; a CPUID feature only one lists is still a difference.
    #[test]
    fn an_msr_one_host_did_not_read_is_no_difference() {
        let map = crate::libvirt::cpu_map::x86::X86Map::load(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data/generations/bookworm/cpu_map"),
        )
        .unwrap();
        let host = |features: &[&str]| {
            let cpu = CpuDef {
                arch: Some("x86_64".into()),
                model: Some("kvm64".into()),
                vendor: Some("AMD".into()),
                features: features
                    .iter()
                    .map(|f| ((*f).to_string(), FeaturePolicy::Require))
                    .collect(),
                ..CpuDef::default()
            };
            HostCpu::new(
                &cpu,
                Some("family 25 model 17 stepping 1"),
                Some("1"),
                Some(&map),
            )
            .unwrap()
        };
        let none = BTreeSet::new();
        let v90 = host(&["avx2"]);
        let v113 = host(&["avx2", "rdctl-no", "mds-no"]);
        assert!(v90.unread.contains("rdctl-no") && !v113.unread.contains("rdctl-no"));
        assert!(v90.differences(&v113, &none, "a", "b").is_empty());
        let more = host(&["avx2", "avx512f", "rdctl-no", "mds-no"]);
        assert_eq!(
            v113.differences(&more, &none, "a", "b"),
            ["features only on b: avx512f"]
        );
    }

    use super::*;

    fn host(xml: &str) -> CpuDef {
        let doc = roxmltree::Document::parse(xml).unwrap();
        CpuDef::read_as(doc.root_element(), CpuType::Host).unwrap()
    }

    /// The cpu_map sentence needs arch, vendor, signature and microcode alike (both given) and
    /// two cpu_maps or two libvirts; anything else is a difference of the CPUs.
    #[test]
    fn the_cpu_map_sentence_needs_one_signature_and_two_readings() {
        let cpu = |map: &str, libvirt: Option<&str>| HostCpu {
            arch: "x86_64".into(),
            vendor: Some("Intel".into()),
            model: None,
            signature: Some("family 6 model 167 stepping 8".into()),
            microcode: Some("1".into()),
            features: BTreeSet::new(),
            known: Some(BTreeSet::new()),
            cpu_map: Some(PathBuf::from(map)),
            libvirt: libvirt.map(|v| v.parse().unwrap()),
            unread: BTreeSet::new(),
        };
        let a = cpu("/a", Some("9.0.0"));
        let hint = a.cpu_map_hint(&cpu("/b", Some("9.0.0")), "x", "y").unwrap();
        assert!(
            hint.contains(
                "read: x's facts (libvirt 9.0.0) through /a; y's facts (libvirt 9.0.0) through /b"
            ) && hint.ends_with(
                "(--cpu-map x=DIR --cpu-map y=DIR, DIR the host's /usr/share/libvirt/cpu_map)"
            ),
            "{hint}"
        );
        assert!(
            a.cpu_map_hint(&cpu("/a", Some("11.3.0")), "x", "y")
                .is_some()
        );
        // Each of two libvirts read through a map of its own: a difference of the CPUs.
        assert!(
            a.cpu_map_hint(&cpu("/b", Some("11.3.0")), "x", "y")
                .is_none()
        );
        assert!(a.cpu_map_hint(&cpu("/b", None), "x", "y").is_some());
        assert!(
            a.cpu_map_hint(&cpu("/a", Some("9.0.0")), "x", "y")
                .is_none()
        );
        assert!(a.cpu_map_hint(&cpu("/a", None), "x", "y").is_none());
        for other in [
            HostCpu {
                microcode: Some("2".into()),
                ..cpu("/b", None)
            },
            HostCpu {
                signature: None,
                ..cpu("/b", None)
            },
            HostCpu {
                vendor: Some("AMD".into()),
                ..cpu("/b", None)
            },
            HostCpu {
                known: None,
                ..cpu("/b", None)
            },
        ] {
            assert!(a.cpu_map_hint(&other, "x", "y").is_none(), "{other:?}");
        }
    }

    #[test]
    fn arm_cpus_compare_by_model_and_features() {
        let n1 = host(
            "<cpu><arch>aarch64</arch><model>Neoverse-N1</model><vendor>ARM</vendor><feature name='fp'/><feature name='asimd'/></cpu>",
        );
        let v1 = host(
            "<cpu><arch>aarch64</arch><model>Neoverse-V1</model><vendor>ARM</vendor><feature name='fp'/><feature name='sve'/></cpu>",
        );
        let a = HostCpu::new(&n1, None, None, None).unwrap();
        let b = HostCpu::new(&v1, None, None, None).unwrap();
        assert!(a.differences(&a, &BTreeSet::new(), "a", "b").is_empty());
        assert_eq!(
            a.differences(&b, &BTreeSet::new(), "a", "b"),
            [
                "model Neoverse-N1 vs Neoverse-V1",
                "features only on a: asimd",
                "features only on b: sve"
            ]
        );
        // A feature the guest turns off is not its own.
        let own = BTreeSet::from(["sve".to_string(), "asimd".to_string()]);
        assert_eq!(
            a.differences(&b, &own, "a", "b"),
            ["model Neoverse-N1 vs Neoverse-V1"]
        );
    }
}
