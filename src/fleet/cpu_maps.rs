//! Where each host's cpu_map is (`--cpu-map [HOST=]DIR`), and the names given for hosts no facts
//! file named.

use super::{Fleet, gaps};
use std::path::{Path, PathBuf};

/// Where each host's cpu_map is: one for all (`--cpu-map DIR`) and one per host
/// (`--cpu-map HOST=DIR`); the default is libvirt's on this machine.
#[derive(Debug, Clone, Default)]
pub struct CpuMaps {
    /// For hosts not named in `by_host`.
    pub default: Option<PathBuf>,
    /// Per host name.
    pub by_host: Vec<(String, PathBuf)>,
    /// The host names of `by_host` a host's facts asked for ([`CpuMaps::for_host`]).
    matched: std::cell::RefCell<std::collections::BTreeSet<String>>,
    /// `by_host`'s entries by short name ([`gaps::short_name`]), in order, made on first use
    /// (after the command line filled `by_host`): a fleet of 10,000 hosts gives 10,000
    /// `--cpu-map`s, and a search of the list per host grew with the square of the fleet.
    by_short: std::cell::OnceCell<std::collections::HashMap<String, Vec<usize>>>,
}

impl CpuMaps {
    /// Whether a cpu_map is given for `host` (`--cpu-map HOST=DIR`, or `--cpu-map DIR` for
    /// every host), not this machine's taken for it.
    #[must_use]
    pub fn given_for(&self, host: &str) -> bool {
        self.default.is_some() || self.own(host).is_some()
    }

    /// The `--cpu-map HOST=DIR` entry of `host`: its name as given, else one that names it as
    /// the fleet matches names ([`gaps::same_host`]: case, FQDN or short name).
    fn own(&self, host: &str) -> Option<&(String, PathBuf)> {
        let index = self.by_short.get_or_init(|| {
            let mut index: std::collections::HashMap<String, Vec<usize>> =
                std::collections::HashMap::new();
            for (i, (h, _)) in self.by_host.iter().enumerate() {
                index.entry(gaps::short_name(h)).or_default().push(i);
            }
            index
        });
        // Names that match as the fleet matches them have the same short name.
        let same_short = index.get(&gaps::short_name(host))?;
        let entries = || same_short.iter().map(|&i| &self.by_host[i]);
        entries()
            .find(|(h, _)| h == host)
            .or_else(|| entries().find(|(h, _)| gaps::same_host(h, host)))
    }

    /// The cpu_map directory of `host`: its own, else the default, else libvirt's on this machine
    /// when there is one.
    #[must_use]
    pub fn for_host(&self, host: &str) -> Option<PathBuf> {
        self.own(host)
            .map(|(h, d)| {
                self.matched.borrow_mut().insert(h.clone());
                d.clone()
            })
            .or_else(|| self.default.clone())
            .or_else(|| {
                let d = Path::new(crate::libvirt::cpu_map::DEFAULT_CPU_MAP);
                d.join("index.xml").is_file().then(|| d.to_path_buf())
            })
    }
}

impl Fleet {
    /// The `--cpu-map HOST=DIR` HOSTs no facts file named, after every host of the view was
    /// read: a typo would judge that host with another cpu_map, so the command says so (a
    /// warning: a script may give every generation's cpu_map to fleets of some of them).
    #[must_use]
    pub fn unused_cpu_map_hosts(&self) -> Vec<String> {
        let matched = self.maps.matched.borrow();
        self.maps
            .by_host
            .iter()
            .filter(|(h, _)| !matched.contains(h))
            .map(|(h, _)| h.clone())
            .collect()
    }
}
