//! The fleet: every guest judged on every host, each host with its own facts only, by the one
//! judge of a destination ([`crate::destination`], which the hook runs on `migrate begin`).
//!
//! Inputs are files (or directories standing for their `*.xml` files), told apart by their root
//! element: a host is a `<hostFacts>` (what `virt-cpu-policyd --publish` writes: capabilities,
//! one domcapabilities per virt type, the libvirt version), a `<capabilities>` or a
//! `<domainCapabilities>` document (one file per host; its name is the file name without
//! `.xml`); a guest is a `<guestFacts>` entry ([`guest`], its host named), a `<domain>` (a
//! stored definition, `virsh dumpxml`) or a `<domstatus>` (libvirt's status file of a running
//! guest) of unknown host.
//!
//! Hosts with the same facts (apart from their name) and cpu_map share one [`Host`] and one
//! verdict per guest shape (the guest's facts apart from its name and UUID): a fleet of
//! identical hosts costs one judgement per distinct guest, and no host is read twice.
//!
//! The views ([`views`]) answer the three questions: drain (can every guest of a host leave,
//! and where to), admit (what a new host runs, and what it does to the cluster's CPU), upgrade
//! (a host's guests on its next generation, with the rewrite that fixes each when the policy
//! can); [`mod@format`] writes them as text, JSON and Prometheus series.

mod by_class;
mod cpu_maps;
mod cpu_there;
pub mod format;
pub mod gaps;
pub mod guest;
pub mod guest_view;
mod hazard;
mod judge;
pub mod page;
mod read;
mod shared_domcaps;
pub mod views;

use crate::cpu::CpuError;
use crate::destination::group::{HostCpu, Passthrough};
use crate::destination::{Arrival, CpuMapCache};
use crate::domain::Domain;
use crate::finding::Code;
use crate::host::{Host, HostOptions};
use crate::libvirt::cpu_def::CpuMode;
use crate::libvirt::version::{LibvirtVersion, QemuVersion};
use crate::policy::Policy;
use guest::{GuestFacts, GuestState};
use read::{CapsCpu, Input, expand, read_input};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

pub use cpu_maps::CpuMaps;

/// Bad input to the fleet: exit 2.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// A file or directory that cannot be read, or is not UTF-8 XML
    /// ([`CpuError::Input`]); a file that is XML but neither host nor guest facts, or facts
    /// libvirt would refuse ([`CpuError::Facts`]): the cluster's words for the same input.
    #[error(transparent)]
    Cluster(#[from] CpuError),
    /// The command names a host the facts do not hold.
    #[error("no host named '{0}' among the facts given")]
    UnknownHost(String),
    /// The command names a guest no guest facts hold, by name or UUID.
    #[error("no guest named '{0}' (nor of that UUID) among the guest facts given")]
    UnknownGuest(String),
    /// The command names a host by a short name several hosts have.
    #[error("'{name}' names no host exactly, and is the short name of several: {}; give the full name", .hosts.join(", "))]
    AmbiguousHost {
        /// The name given.
        name: String,
        /// The hosts whose short name it is.
        hosts: Vec<String>,
    },
    /// Two files name the same host.
    #[error("{}: names host '{name}' as {} does already; one file per host", .path.display(), .other.display())]
    DuplicateHost {
        /// The host.
        name: String,
        /// The second file.
        path: PathBuf,
        /// The first.
        other: PathBuf,
    },
    /// One file given twice (itself, a link to it, or in a directory given): its guests would
    /// count twice.
    #[error("{path}: given twice (also as {other}); each facts file once")]
    FileTwice {
        /// The second time: the path, and the directory given it was found in.
        path: String,
        /// The first.
        other: String,
    },
    /// No host among the facts.
    #[error(
        "no host facts among the files given (a <hostFacts>, capabilities or domcapabilities file is a host)"
    )]
    NoHosts,
    /// Two guest-facts documents give the guests of one host (by one name, or two that name it):
    /// its guests would count twice.
    #[error("{}: gives the guests of host '{host}' as {} does already; one guest-facts file per host (an old one under another name of the host left beside the new?)", .path.display(), .other.display())]
    GuestFactsTwice {
        /// The host.
        host: String,
        /// The second file.
        path: PathBuf,
        /// The first.
        other: PathBuf,
    },
    /// No host among the facts read, and some files could not be read.
    #[error(
        "no host facts among the files read; {unread} file(s) could not be read, the first: {first}"
    )]
    NoHostsRead {
        /// The files not read.
        unread: usize,
        /// The first one's reason.
        first: String,
    },
}

impl From<crate::Error> for FleetError {
    fn from(e: crate::Error) -> Self {
        FleetError::Cluster(CpuError::Input(e))
    }
}

/// One reason a host cannot run a guest: a finding's code and sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason {
    /// The finding's code.
    pub code: Code,
    /// Its sentence (the fact and its source).
    pub message: String,
}

/// One host of the fleet.
#[derive(Debug)]
pub struct FleetHost {
    /// Its name: `<hostFacts name>`, else the file name without `.xml`.
    pub name: String,
    /// Its facts file.
    pub path: PathBuf,
    /// The libvirt it runs, when its facts say.
    pub libvirt: Option<LibvirtVersion>,
    /// The QEMU libvirt drives there, when its facts say (`<hostFacts qemu>`).
    pub qemu: Option<QemuVersion>,
    /// Its class: hosts of one class have the same facts.
    class: usize,
}

/// One guest of the fleet.
#[derive(Debug, Clone)]
pub struct FleetGuest {
    /// Its facts.
    pub facts: GuestFacts,
    /// Its shape: index of its facts without name and UUID (guests of one shape are judged
    /// once per host class).
    shape: usize,
}

/// A `passthrough-group` question: the guest's passthrough CPU (an index in
/// `Fleet::passthroughs`), its source, the destination's class.
type GroupKey = (usize, SourceKey, usize);

/// Where a running host-passthrough guest comes from, as the group question depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum SourceKey {
    /// Its facts name no host.
    Unknown,
    /// Its facts name a host without facts (the name is put in after, as [`SOURCE`]).
    Missing,
    /// A host of this class.
    Class(usize),
}

/// Hosts of the same facts: one [`Host`], one cpu_map.
struct HostClass {
    host: Host,
    map: Rc<CpuMapCache>,
    /// Whether its cpu_map was given (`--cpu-map`), not this machine's taken for it.
    map_given: bool,
    /// Its capabilities' host CPU, as read.
    caps_cpu: Option<CapsCpu>,
    /// That CPU as a host-passthrough guest sees it, made on first use.
    passthrough: std::sync::OnceLock<Result<HostCpu, String>>,
    /// Its libvirt and QEMU releases (part of what makes hosts alike).
    releases: crate::hazards::Releases,
    /// The known hazards whose conditions on a destination hold for it, or may (each with the
    /// facts it lacks: [`crate::hazards::at_destination`]).
    hazards: Vec<(&'static crate::hazards::Hazard, Vec<&'static str>)>,
}

impl HostClass {
    /// `reasons` as this class's cpu_map can back them: a model or feature name a cpu_map does
    /// not define is libvirt's refusal only when that cpu_map is the host's own libvirt's. A
    /// class judged with this machine's cpu_map, no `--cpu-map` given for it, cannot say so of
    /// another host's libvirt (a libvirt 12.8 host knows `Haswell-v2`, this machine's 9.0 does
    /// not): such a reason is `not-compared`, naming the fact missing, never a refusal that
    /// depends on the machine the tool runs on.
    fn names_judged(&self, reasons: Vec<Reason>) -> Vec<Reason> {
        if self.map_given {
            return reasons;
        }
        reasons
            .into_iter()
            .map(|r| match r.code {
                Code::CpuModelUnknown | Code::CpuFeatureUnknown => Reason {
                    code: Code::NotCompared,
                    message: format!(
                        "not compared: the host's own libvirt's cpu_map is not given, and this machine's, taken for it, says: {}; the host's libvirt may know the name (give its cpu_map: --cpu-map HOST=DIR, the host's /usr/share/libvirt/cpu_map)",
                        r.message
                    ),
                },
                _ => r,
            })
            .collect()
    }

    /// The host CPU a host-passthrough guest sees ([`HostCpu`]), or why it is not known.
    fn passthrough_cpu(&self) -> Result<&HostCpu, &str> {
        self.passthrough
            .get_or_init(|| {
                let c = self.caps_cpu.as_ref().ok_or(
                    "its facts hold no capabilities host CPU (virsh capabilities' <host><cpu>)",
                )?;
                let mut cpu = HostCpu::new(
                    &c.cpu,
                    c.signature.as_deref(),
                    c.microcode.as_deref(),
                    self.map.get().ok(),
                )?;
                cpu.libvirt = self.host.libvirt_version().map(|v| v.value);
                Ok(cpu)
            })
            .as_ref()
            .map_err(String::as_str)
    }
}

/// The fleet: hosts, guests, and what is needed to judge a pair.
pub struct Fleet {
    /// The hosts, in the order given.
    pub hosts: Vec<FleetHost>,
    /// The guests, in the order given.
    pub guests: Vec<FleetGuest>,
    classes: Vec<HostClass>,
    shapes: Vec<String>,
    /// Per shape: its passthrough CPU (an index in `passthroughs`) when it is `host-passthrough`
    /// (its migration group matters), read once when the shape is first seen.
    passthrough_shapes: Vec<Option<usize>>,
    /// Per shape: what the table of known hazards asks of it ([`hazard::shape_of`]), None when
    /// it can meet no entry ([`crate::hazards::may_meet`]).
    hazard_shapes: Vec<Option<crate::hazards::GuestShape>>,
    /// The distinct passthrough CPUs of the guests (mode, the features they turn off): shapes
    /// alike in these share every group answer.
    passthroughs: Vec<Passthrough>,
    passthrough_of: HashMap<Passthrough, usize>,
    /// The `passthrough-group` reason by (passthrough CPU, source, destination class), its host
    /// names as the markers [`SOURCE`] and [`DEST`].
    groups: std::cell::RefCell<HashMap<GroupKey, Option<Reason>>>,
    /// The operator's policy: the models it pins (`admit`), its rewrite (`upgrade`).
    pub policy: Policy,
    /// No rule at all: guests are judged as they are.
    none: Policy,
    verdicts: std::cell::RefCell<by_class::ByClass<Rc<Vec<Reason>>>>,
    /// The CPU each guest shape would have on each class, as `verdicts`: worked out for the
    /// page and `--guest` only.
    cpus: std::cell::RefCell<by_class::ByClass<cpu_there::CpuThere>>,
    maps: CpuMaps,
    /// Each class's judged facts and cpu_map, to find a host's class ([`read::Judged`]).
    class_of: Vec<(Box<read::Judged>, Option<PathBuf>)>,
    /// The index in `hosts` of each host name (names are unique: [`FleetError::DuplicateHost`]).
    host_of: HashMap<String, usize>,
    /// The guests (indexes, in order) whose facts name each host, by name, whether or not the
    /// host's facts are given.
    guests_of: HashMap<String, Vec<usize>>,
    /// Per guest: the index in `hosts` of the host its facts name, once that host is read.
    sources: Vec<Option<usize>>,
    shape_of: HashMap<String, usize>,
    maps_by_dir: HashMap<Option<PathBuf>, Rc<CpuMapCache>>,
    /// What the answers could not take into account ([`gaps::Gaps`]).
    pub gaps: gaps::Gaps,
    /// The host names `<guestFacts>` documents name, as given (their guests may be none).
    reported: Vec<(String, PathBuf)>,
    /// The hosts (indexes) whose guests some `<guestFacts>` document gives: a host without
    /// them has guests not known, not none.
    reported_hosts: std::collections::HashSet<usize>,
    /// Where the steps of a long answer (reading, judging) are shown, if anywhere.
    progress: crate::progress::Progress,
}

impl Fleet {
    /// The fleet of the facts in `paths`, judged under `policy` with each host's cpu_map from
    /// `maps`. A host's facts are its own: nothing is asked of this machine (its kernel, its
    /// libvirt caches).
    ///
    /// # Errors
    /// [`FleetError`]: a file that cannot be read or is not facts, two files naming one host,
    /// a cpu_map that cannot be read, no host at all.
    pub fn read(paths: &[PathBuf], policy: Policy, maps: &CpuMaps) -> Result<Fleet, FleetError> {
        Fleet::read_showing(paths, policy, maps, crate::progress::Progress::off())
    }

    /// [`Fleet::read`], its reading and then its judging shown by `progress`.
    ///
    /// # Errors
    /// As [`Fleet::read`].
    pub fn read_showing(
        paths: &[PathBuf],
        policy: Policy,
        maps: &CpuMaps,
        progress: crate::progress::Progress,
    ) -> Result<Fleet, FleetError> {
        let mut fleet = Fleet::empty(policy, maps, progress);
        let files = expand(paths)?;
        let step = fleet.progress.step("reading facts", files.len());
        for (path, input) in read::read_all(files, step) {
            // One file that cannot be read is a gap of the answer, named in it; the rest of the
            // fleet is still judged.
            let input = match input {
                Ok(i) => i,
                Err(e) => {
                    fleet.gaps.unread.push(gaps::Unread {
                        path,
                        message: e.to_string(),
                    });
                    continue;
                }
            };
            match input {
                Input::Host {
                    name,
                    versions,
                    key,
                    cpu,
                } => {
                    let map_dir = fleet.maps.for_host(&name);
                    let given = fleet.maps.given_for(&name);
                    fleet.push_host(
                        name,
                        path,
                        versions,
                        (key, cpu),
                        (map_dir.as_deref(), given),
                    )?;
                }
                Input::Guests(list, host) => {
                    fleet.reported.extend(host.map(|h| (h, path.clone())));
                    for facts in list {
                        fleet.push_guest(facts);
                    }
                }
            }
        }
        if fleet.hosts.is_empty() {
            return Err(match fleet.gaps.unread.first() {
                Some(u) => FleetError::NoHostsRead {
                    unread: fleet.gaps.unread.len(),
                    first: u.message.clone(),
                },
                None => FleetError::NoHosts,
            });
        }
        fleet.resolve_host_names()?;
        Ok(fleet)
    }

    /// A fleet of nothing yet, judged under `policy` with each host's cpu_map from `maps`.
    fn empty(policy: Policy, maps: &CpuMaps, progress: crate::progress::Progress) -> Fleet {
        Fleet {
            hosts: Vec::new(),
            guests: Vec::new(),
            classes: Vec::new(),
            shapes: Vec::new(),
            passthrough_shapes: Vec::new(),
            hazard_shapes: Vec::new(),
            passthroughs: Vec::new(),
            passthrough_of: HashMap::new(),
            groups: std::cell::RefCell::default(),
            policy,
            none: Policy {
                rules: Vec::new(),
                ..Policy::builtin()
            },
            verdicts: std::cell::RefCell::default(),
            cpus: std::cell::RefCell::default(),
            maps: maps.clone(),
            class_of: Vec::new(),
            host_of: HashMap::new(),
            guests_of: HashMap::new(),
            sources: Vec::new(),
            shape_of: HashMap::new(),
            maps_by_dir: HashMap::new(),
            gaps: gaps::Gaps::default(),
            reported: Vec::new(),
            reported_hosts: std::collections::HashSet::new(),
            progress,
        }
    }

    /// The guests of the facts `paths` (files, and directories standing for their `*.xml`
    /// files): `<guestFacts>`, `<domain>` and `<domstatus>` documents, in order; host facts
    /// among them are passed over (a published directory holds both).
    ///
    /// # Errors
    /// As [`Fleet::read`], for a file that cannot be read or holds neither host nor guest facts.
    pub fn read_guests(paths: &[PathBuf]) -> Result<Vec<guest::GuestFacts>, FleetError> {
        let mut out = Vec::new();
        let quiet = crate::progress::Progress::off().step("", 0);
        for (_, input) in read::read_all(expand(paths)?, quiet) {
            if let Input::Guests(list, _) = input? {
                out.extend(list);
            }
        }
        Ok(out)
    }

    /// Adds the host of facts file `path` (`admit`'s new host, `upgrade`'s next generation),
    /// named `name` when given (else as its facts say; its cpu_map is the one of the name its
    /// facts give); returns its index.
    ///
    /// # Errors
    /// As [`Fleet::read`]; a file that holds no host facts.
    pub fn add_host(&mut self, path: &Path, name: Option<&str>) -> Result<usize, FleetError> {
        match read_input(path, &shared_domcaps::SharedDomCaps::default())? {
            Input::Host {
                name: own,
                versions,
                key,
                cpu,
            } => {
                let map_dir = self.maps.for_host(&own);
                let given = self.maps.given_for(&own);
                let name = name.map_or(own, str::to_string);
                let facts = (key, cpu);
                self.push_host(
                    name,
                    path.to_path_buf(),
                    versions,
                    facts,
                    (map_dir.as_deref(), given),
                )?;
                Ok(self.hosts.len() - 1)
            }
            Input::Guests(..) => {
                Err(CpuError::facts(path, "guest facts, where host facts were expected").into())
            }
        }
    }

    fn push_host(
        &mut self,
        name: String,
        path: PathBuf,
        (libvirt, qemu): (Option<LibvirtVersion>, Option<QemuVersion>),
        (key, caps_cpu): (Box<read::Judged>, Option<CapsCpu>),
        (map_dir, map_given): (Option<&Path>, bool),
    ) -> Result<(), FleetError> {
        if let Some(other) = self.host_of.get(&name) {
            return Err(FleetError::DuplicateHost {
                name,
                path,
                other: self.hosts[*other].path.clone(),
            });
        }
        let map_dir = map_dir.map(Path::to_path_buf);
        let known = self
            .class_of
            .iter()
            .position(|(k, d)| *d == map_dir && *k == key);
        let class = if let Some(c) = known {
            c
        } else {
            let host = remote_host(&path, map_dir.as_deref())?;
            let map = self
                .maps_by_dir
                .entry(map_dir.clone())
                .or_insert_with(|| Rc::new(CpuMapCache::new(map_dir.as_deref())))
                .clone();
            let vendor = caps_cpu.as_ref().and_then(|c| c.cpu.vendor.clone());
            let releases = crate::hazards::Releases { libvirt, qemu };
            self.classes.push(HostClass {
                host,
                map,
                map_given,
                caps_cpu,
                passthrough: std::sync::OnceLock::new(),
                hazards: crate::hazards::at_destination(releases, vendor.as_deref()),
                releases,
            });
            self.class_of.push((key, map_dir));
            self.classes.len() - 1
        };
        // Its guests read before it (their facts came first) learn where they are.
        for g in self.guests_of.get(&name).into_iter().flatten() {
            self.sources[*g] = Some(self.hosts.len());
        }
        self.host_of.insert(name.clone(), self.hosts.len());
        self.hosts.push(FleetHost {
            name,
            path,
            libvirt,
            qemu,
            class,
        });
        Ok(())
    }

    fn push_guest(&mut self, facts: GuestFacts) {
        let key = format!("{}\n{}", facts.state.as_str(), shape_key(&facts.domain));
        let next = self.shape_of.len();
        let shape = *self.shape_of.entry(key).or_insert_with_key(|k| {
            self.shapes.push(k.clone());
            // Parsed only when the text can be one: a fleet of thousands of shapes. `maximum`
            // under hardware virtualisation "is functionally identical to host-passthrough"
            // (libvirt's formatdomain; QEMU's `-cpu max` under KVM is `-cpu host`): the same
            // group. Under TCG it is QEMU's emulated CPU, the same on every host of a QEMU.
            // Read here once, for every group question of the shape. The text search is the
            // filter that keeps the parse off the other shapes (it can only say yes too often:
            // the parse decides).
            let maybe = [CpuMode::HostPassthrough, CpuMode::Maximum]
                .iter()
                .any(|m| facts.domain.contains(m.as_str()));
            let passthrough = maybe
                .then(|| Domain::parse(&facts.domain, "guest facts").ok())
                .flatten()
                .and_then(|d| Passthrough::of(&d))
                .map(|p| {
                    let n = self.passthroughs.len();
                    *self.passthrough_of.entry(p).or_insert_with_key(|p| {
                        self.passthroughs.push(p.clone());
                        n
                    })
                });
            self.passthrough_shapes.push(passthrough);
            let running = facts.state == GuestState::Running;
            let shape = hazard::shape_of(&facts.domain, running);
            self.hazard_shapes
                .push(crate::hazards::may_meet(&shape).then_some(shape));
            next
        });
        if let Some(h) = &facts.host {
            let here = self.guests_of.entry(h.clone()).or_default();
            here.push(self.guests.len());
        }
        let source = facts
            .host
            .as_ref()
            .and_then(|h| self.host_of.get(h).copied());
        self.sources.push(source);
        self.guests.push(FleetGuest { facts, shape });
    }

    /// The index of the host named `name`.
    ///
    /// # Errors
    /// [`FleetError::UnknownHost`].
    pub fn host_index(&self, name: &str) -> Result<usize, FleetError> {
        if let Some(h) = self.host_of.get(name) {
            return Ok(*h);
        }
        // The operator's spelling of a host (its FQDN, another case): the one host it stands
        // for, as guest facts' names are matched.
        gaps::NameIndex::new(self.hosts.iter().map(|h| h.name.as_str()))
            .find(name)
            .map_err(|candidates| match candidates.as_slice() {
                [] => FleetError::UnknownHost(name.to_string()),
                many => FleetError::AmbiguousHost {
                    name: name.to_string(),
                    hosts: many.iter().map(|h| self.hosts[*h].name.clone()).collect(),
                },
            })
    }

    /// Why host `h` cannot run guest `g` (empty: it runs there). Judged once per (guest
    /// shape, host class) and kept; a running host-passthrough guest's migration group
    /// ([`Passthrough::group`]) depends on its source host too, and is added after.
    #[must_use]
    pub fn reasons(&self, g: usize, h: usize) -> Rc<Vec<Reason>> {
        let r = self.verdict(g, h);
        let r = if r.iter().any(|x| x.message.contains(FACTS)) {
            Rc::new(self.in_own_words(h, (*r).clone()))
        } else {
            r
        };
        // A guest of an arch the host does not run has that one reason.
        let other_arch = r.iter().any(|x| x.code == Code::ArchUnsupported);
        let mut more: Vec<Reason> = self.group_reason(g, h).into_iter().collect();
        if self.sources[g] != Some(h) {
            more.extend(self.hazard_in(g, self.hosts[h].class));
        }
        if other_arch || more.is_empty() {
            return r;
        }
        let mut all = (*r).clone();
        all.extend(more);
        Rc::new(all)
    }

    /// Hosts `hosts` (indexes, in order) as the cluster's baseline reads them
    /// ([`crate::cluster::hosts::ClusterHost`]), from the facts already read: each class's made
    /// once, for the first of its hosts, then given each host's name and file.
    ///
    /// # Errors
    /// As [`crate::cluster::hosts::ClusterHost::of_facts`], for the first host whose facts
    /// cannot be a cluster's host.
    pub(crate) fn cluster_hosts(
        &self,
        hosts: impl IntoIterator<Item = usize>,
    ) -> Result<Vec<crate::cluster::hosts::ClusterHost>, CpuError> {
        let mut made: HashMap<usize, crate::cluster::hosts::ClusterHost> = HashMap::new();
        hosts
            .into_iter()
            .map(|h| {
                let host = &self.hosts[h];
                match made.entry(host.class) {
                    std::collections::hash_map::Entry::Occupied(e) => {
                        e.get().renamed(&host.name, &host.path)
                    }
                    std::collections::hash_map::Entry::Vacant(e) => {
                        let first = self.class_of[host.class]
                            .0
                            .cluster_host(&host.name, &host.path)?;
                        Ok(e.insert(first).clone())
                    }
                }
            })
            .collect()
    }

    /// `reasons` of host `h`'s class, each naming `h`'s own facts file where the class's judge
    /// names its placeholder ([`FACTS`]): what `h`'s own facts would have said.
    pub(crate) fn in_own_words(&self, h: usize, mut reasons: Vec<Reason>) -> Vec<Reason> {
        for r in &mut reasons {
            self.own_text(h, &mut r.message);
        }
        reasons
    }

    /// `text` of host `h`'s class's judge, naming `h`'s own facts file for the placeholder.
    pub(crate) fn own_text(&self, h: usize, text: &mut String) {
        if text.contains(FACTS) {
            *text = text.replace(FACTS, &self.hosts[h].path.display().to_string());
        }
    }

    /// The policy of no rule: what the judge uses (guests as they are).
    #[must_use]
    pub fn policy_none(&self) -> &Policy {
        &self.none
    }

    /// Host `h`'s arch, from its facts (its domcapabilities, else its capabilities' machine
    /// types).
    #[must_use]
    pub fn host_arch(&self, h: usize) -> Option<&str> {
        let class = &self.classes[self.hosts[h].class];
        let host = &class.host;
        // The capabilities' own <host><cpu><arch> before the first <guest>'s: a capabilities
        // file lists the emulated arches too (armv6l first on an x86_64 host).
        host.domcaps
            .first()
            .map(|d| d.arch.as_str())
            .or_else(|| class.caps_cpu.as_ref().and_then(|c| c.cpu.arch.as_deref()))
            .or_else(|| host.machines.first().map(|m| m.arch.as_str()))
    }

    /// Host `h`'s facts as the judge reads them (its class's).
    #[must_use]
    pub fn host_facts(&self, h: usize) -> &Host {
        &self.classes[self.hosts[h].class].host
    }

    /// The model of host `h`'s own CPU (its capabilities' `<host><cpu><model>`), when its facts
    /// hold it: what a `host-passthrough` guest is given there.
    #[must_use]
    pub fn host_cpu_model(&self, h: usize) -> Option<String> {
        let class = &self.classes[self.hosts[h].class];
        class.caps_cpu.as_ref().and_then(|c| c.cpu.model.clone())
    }

    /// The psABI level host `h`'s KVM host-model CPU reaches ([`Host::host_model_level`] of its
    /// `kvm` domcapabilities): `x86-64-vN`, `below x86-64-v1`, or None when its facts hold no
    /// KVM host-model CPU.
    #[must_use]
    pub fn host_level(&self, h: usize) -> Option<&'static str> {
        let host = self.host_facts(h);
        // psABI levels are x86-64's.
        let d = host
            .domcaps
            .iter()
            .find(|d| d.virt_type == "kvm" && d.arch == "x86_64")?;
        let (_, level) = host.host_model_level(d)?;
        Some(level.map_or("below x86-64-v1", crate::cpu::Level::as_str))
    }

    /// The host guest `g` is on (an index in [`Fleet::hosts`]): the one its facts name, when
    /// that host's facts are given.
    #[must_use]
    pub fn source(&self, g: usize) -> Option<usize> {
        self.sources[g]
    }

    /// The guests on host `h` (their facts name it).
    #[must_use]
    pub fn guests_on(&self, h: usize) -> Vec<usize> {
        self.guests_of
            .get(&self.hosts[h].name)
            .cloned()
            .unwrap_or_default()
    }
}

/// Stands for a host's facts file in its class's judge ([`Host::relabel_file`]): each host's own
/// is put in ([`Fleet::in_own_words`]).
const FACTS: &str = "\u{1}facts\u{1}";

/// Stands for the source host's name in a kept `passthrough-group` reason (no host name has a
/// control character).
const SOURCE: &str = "\u{1}source\u{1}";

/// Stands for the destination's name likewise.
const DEST: &str = "\u{1}destination\u{1}";

/// A guest's shape: its reduced domain without `<name>` and `<uuid>` lines.
fn shape_key(domain: &str) -> String {
    domain
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !(t.starts_with("<name>") || t.starts_with("<uuid>"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A [`Host`] of another machine's facts file: its cpu_map `map_dir` (else the built-in table),
/// never this machine's kernel or QEMU capability cache.
fn remote_host(path: &Path, map_dir: Option<&Path>) -> Result<Host, FleetError> {
    let mut host = Host::discover(&HostOptions::of_facts(
        vec![path.to_path_buf()],
        map_dir.map(Path::to_path_buf),
        None,
    ))
    .map_err(|e| FleetError::from(CpuError::facts(path, &e.to_string())))?;
    host.relabel_file(&path.display().to_string(), FACTS);
    Ok(host)
}

/// Whether `reasons` say the pair was not compared: its only reason is `not-compared` (a fact
/// missing), nothing refuses it.
#[must_use]
pub fn not_compared(reasons: &[Reason]) -> bool {
    !reasons.is_empty() && reasons.iter().all(|r| r.code == Code::NotCompared)
}

/// How a guest in `state` arrives on another host: a running one by live migration, a stopped
/// one by define and start.
#[must_use]
pub fn arrival(state: GuestState) -> Arrival {
    match state {
        GuestState::Running => Arrival::Migration,
        GuestState::Shutoff => Arrival::Start,
    }
}

/// Whether guest `g` is running.
#[must_use]
pub fn running(g: &FleetGuest) -> bool {
    g.facts.state == GuestState::Running
}
