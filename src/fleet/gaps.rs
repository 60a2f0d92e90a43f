//! What a fleet's answers could not take into account: facts files that could not be read, and
//! guests whose facts name a host the fleet has no facts of. An answer built on missing evidence
//! is never a "safe": each gap is named in every view (text, JSON, Prometheus), the rest of the
//! report is still given, and the command's exit code says the answer is incomplete
//! (docs/exit-codes.md, `fleet`: 4 unless something cannot).
//!
//! Host names are matched as DNS names are compared (RFC 4343: case-insensitively), and a name
//! that matches no host as given is matched by its first label when exactly one host has that
//! first label: libvirt's guest facts are published under the machine's node name (`uname -n`),
//! which is the short name on Debian and the FQDN on EL, while an inventory names hosts either
//! way. Every such match is said ([`Gaps::matched`]); a name whose first label matches several
//! hosts, or none, stays unknown.

use super::FleetError;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;

/// A facts file that could not be read: the file and the one-line reason (naming the file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unread {
    /// The file.
    pub path: PathBuf,
    /// Why, one sentence naming the file.
    pub message: String,
}

/// A host name guest facts give that no host's facts have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownHost {
    /// The name as the guest facts give it.
    pub name: String,
    /// How many guests name it.
    pub guests: usize,
    /// The hosts whose first label matches it, when several do (ambiguous); empty when none.
    pub ambiguous: Vec<String>,
}

/// What the fleet's answers could not take into account ([`super::Fleet::gaps`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gaps {
    /// Facts files not read, in the order met.
    pub unread: Vec<Unread>,
    /// Host names of guest facts that match no host, sorted.
    pub unknown_hosts: Vec<UnknownHost>,
    /// Hosts a view asks about (a drain, an upgrade) whose guests are not known: no guest facts
    /// name them, so "no guest" would be a guess.
    pub guests_not_known: Vec<String>,
    /// Host names of guest facts matched to a host only after normalising (case, FQDN against
    /// short name): (the name given, the host's own), sorted. Not a gap: said so that the
    /// match can be checked.
    pub matched: Vec<(String, String)>,
}

impl Gaps {
    /// Whether the answers took every input into account: no file unread, no guest of an
    /// unknown host.
    #[must_use]
    pub fn complete(&self) -> bool {
        self.unread.is_empty() && self.unknown_hosts.is_empty() && self.guests_not_known.is_empty()
    }

    /// The guests whose facts name a host not among the facts.
    #[must_use]
    pub fn unknown_host_guests(&self) -> usize {
        self.unknown_hosts.iter().map(|u| u.guests).sum()
    }

    /// One sentence for stderr when the answer is incomplete; None when complete.
    #[must_use]
    pub fn summary(&self) -> Option<String> {
        if self.complete() {
            return None;
        }
        let mut parts = Vec::new();
        if !self.unread.is_empty() {
            parts.push(format!("{} facts file(s) not read", self.unread.len()));
        }
        if !self.unknown_hosts.is_empty() {
            parts.push(format!(
                "{} guest(s) name {} host(s) not among the facts ({})",
                self.unknown_host_guests(),
                self.unknown_hosts.len(),
                self.unknown_hosts
                    .iter()
                    .take(3)
                    .map(|u| u.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
                    + if self.unknown_hosts.len() > 3 {
                        ", ..."
                    } else {
                        ""
                    }
            ));
        }
        if !self.guests_not_known.is_empty() {
            parts.push(format!(
                "the guests of {} are not known (no guest facts name it)",
                self.guests_not_known.join(", ")
            ));
        }
        Some(format!(
            "the answer is incomplete: {} (each is named in the report)",
            parts.join("; ")
        ))
    }

    /// The lines the text views end with: each file not read, each unknown host, each name
    /// matched after normalising; empty when there is nothing to say.
    #[must_use]
    pub fn text(&self) -> String {
        let mut s = String::new();
        for (given, host) in &self.matched {
            let _ = writeln!(
                s,
                "note: host '{given}' (as guest facts or the command name it) taken as host '{host}' (the same name but for case or domain)"
            );
        }
        if self.complete() {
            return s;
        }
        let _ = writeln!(s, "incomplete: the answer above leaves out:");
        for h in &self.guests_not_known {
            let _ = writeln!(
                s,
                "  the guests of host '{h}': no guest facts name it (publish them: `virt-cpu-policy facts --guests` or `virt-cpu-policyd --publish` on that host); \"no guest\" is not known"
            );
        }
        for u in &self.unread {
            let _ = writeln!(s, "  not read: {}", u.message);
        }
        for u in &self.unknown_hosts {
            let why = if u.ambiguous.is_empty() {
                "no host's facts have that name".to_string()
            } else {
                format!(
                    "its short name matches several hosts: {}",
                    u.ambiguous.join(", ")
                )
            };
            let _ = writeln!(
                s,
                "  host '{}' of {} guest(s): {why}; those guests are judged on every host, but no drain or upgrade of it is known",
                u.name, u.guests
            );
        }
        s
    }

    /// The `incomplete` object of the JSON views: `{"complete": bool, "unread": [{"file",
    /// "error"}], "unknown_hosts": [{"host", "guests", "ambiguous": [HOST]}],
    /// "guests_not_known": [HOST], "matched": [{"given", "host"}]}` (docs/json.md).
    #[must_use]
    pub fn json(&self) -> Value {
        json!({
            "complete": self.complete(),
            "unread": self.unread.iter().map(|u| json!({
                "file": u.path.display().to_string(),
                "error": u.message,
            })).collect::<Vec<_>>(),
            "unknown_hosts": self.unknown_hosts.iter().map(|u| json!({
                "host": u.name,
                "guests": u.guests,
                "ambiguous": u.ambiguous,
            })).collect::<Vec<_>>(),
            "guests_not_known": self.guests_not_known,
            "matched": self.matched.iter().map(|(given, host)| json!({
                "given": given,
                "host": host,
            })).collect::<Vec<_>>(),
        })
    }
}

/// A host name as DNS compares it (RFC 4343: case-insensitive; a trailing dot is the root).
fn folded(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// The first label of a host name, folded: `kvm1` for `KVM1.example.org.`.
pub(super) fn short_name(name: &str) -> String {
    let f = folded(name);
    match f.split_once('.') {
        Some((first, _)) => first.to_string(),
        None => f,
    }
}

/// Whether `a` and `b` name one host as the fleet matches names (`--cpu-map HOST=DIR` among
/// them): the same but for case and a trailing dot, or one a short name the other begins with
/// (`kvm1`, `KVM1.example.org.`); two different FQDNs never.
pub(super) fn same_host(a: &str, b: &str) -> bool {
    let (fa, fb) = (folded(a), folded(b));
    fa == fb || ((!fa.contains('.') || !fb.contains('.')) && short_name(a) == short_name(b))
}

/// Host names as the fleet looks them up when the exact name is not a host's: by the folded
/// name, then by the short name when exactly one host has it.
pub(super) struct NameIndex {
    folded: HashMap<String, Vec<usize>>,
    short: HashMap<String, Vec<usize>>,
}

impl NameIndex {
    /// The index of `names` (the hosts' names, in order).
    pub(super) fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> NameIndex {
        let mut folded_map: HashMap<String, Vec<usize>> = HashMap::new();
        let mut short: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, n) in names.into_iter().enumerate() {
            folded_map.entry(folded(n)).or_default().push(i);
            short.entry(short_name(n)).or_default().push(i);
        }
        NameIndex {
            folded: folded_map,
            short,
        }
    }

    /// The host `name` stands for: `Ok(index)` when one host matches, else `Err` with the
    /// hosts that match by short name (several: ambiguous; none: unknown).
    pub(super) fn find(&self, name: &str) -> Result<usize, Vec<usize>> {
        if let Some([one]) = self.folded.get(&folded(name)).map(Vec::as_slice) {
            return Ok(*one);
        }
        match self.short.get(&short_name(name)).map(Vec::as_slice) {
            Some([one]) => Ok(*one),
            Some(many) => Err(many.to_vec()),
            None => Err(Vec::new()),
        }
    }
}

impl super::Fleet {
    /// The guests whose facts name a host by a name no host has exactly: moved to the one host
    /// the name stands for ([`NameIndex`], said in [`Gaps::matched`]), else
    /// counted as guests of an unknown host; and the hosts whose guests a `<guestFacts>`
    /// document gives.
    ///
    /// # Errors
    /// [`FleetError::GuestFactsTwice`]: two guest-facts documents for one host.
    pub(super) fn resolve_host_names(&mut self) -> Result<(), FleetError> {
        let index = NameIndex::new(self.hosts.iter().map(|h| h.name.as_str()));
        let mut unmatched: Vec<String> = self
            .guests_of
            .keys()
            .filter(|n| !self.host_of.contains_key(*n))
            .cloned()
            .collect();
        unmatched.sort();
        for name in unmatched {
            match index.find(&name) {
                Ok(h) => {
                    let host = self.hosts[h].name.clone();
                    let moved = self.guests_of.remove(&name).unwrap_or_default();
                    for g in &moved {
                        self.sources[*g] = Some(h);
                        self.guests[*g].facts.host = Some(host.clone());
                    }
                    let list = self.guests_of.entry(host.clone()).or_default();
                    list.extend(moved);
                    list.sort_unstable();
                    self.gaps.matched.push((name, host));
                }
                Err(candidates) => self.gaps.unknown_hosts.push(UnknownHost {
                    guests: self.guests_of.get(&name).map_or(0, Vec::len),
                    name,
                    ambiguous: candidates
                        .into_iter()
                        .map(|h| self.hosts[h].name.clone())
                        .collect(),
                }),
            }
        }
        let mut first: std::collections::HashMap<usize, &PathBuf> =
            std::collections::HashMap::new();
        for (name, path) in &self.reported {
            let Some(h) = self
                .host_of
                .get(name)
                .copied()
                .or_else(|| index.find(name).ok())
            else {
                continue;
            };
            if let Some(other) = first.insert(h, path) {
                return Err(FleetError::GuestFactsTwice {
                    host: self.hosts[h].name.clone(),
                    path: path.clone(),
                    other: other.clone(),
                });
            }
            self.reported_hosts.insert(h);
        }
        Ok(())
    }

    /// The index of host `name` a view asks about (`--drain`, `--upgrade`), found as
    /// [`super::Fleet::host_index`] finds it; a host whose guests are not known
    /// ([`super::Fleet::guests_known`]) is a gap of the answer ([`Gaps::guests_not_known`]): its
    /// guests are not known, which is no "0 guests, safe".
    ///
    /// # Errors
    /// [`FleetError::UnknownHost`].
    pub fn asked_about(&mut self, name: &str) -> Result<usize, FleetError> {
        let h = self.host_index(name)?;
        let matched = (name.to_string(), self.hosts[h].name.clone());
        if matched.0 != matched.1 && !self.gaps.matched.contains(&matched) {
            self.gaps.matched.push(matched);
        }
        if !self.guests_known(h) {
            let name = self.hosts[h].name.clone();
            self.gaps.guests_not_known.push(name);
        }
        Ok(h)
    }

    /// Whether the guests of host `h` are known: a `<guestFacts>` document gives them (none
    /// at all included), or some guest's facts name it. A host of neither has guests not
    /// known, never "none": a drain of it says so.
    #[must_use]
    pub fn guests_known(&self, h: usize) -> bool {
        self.reported_hosts.contains(&h) || !self.guests_on(h).is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_by_case_and_short_name_when_one_host_has_it() {
        let idx = NameIndex::new(["kvm1", "KVM2.example.org", "db.a.org", "db.b.org"]);
        assert_eq!(idx.find("kvm1.example.org"), Ok(0));
        assert_eq!(idx.find("KVM1."), Ok(0));
        assert_eq!(idx.find("kvm2"), Ok(1));
        assert_eq!(idx.find("kvm2.example.org."), Ok(1));
        // Two hosts share the short name: the exact name decides, the short name is ambiguous.
        assert_eq!(idx.find("DB.b.org"), Ok(3));
        assert_eq!(idx.find("db"), Err(vec![2, 3]));
        assert_eq!(idx.find("kvm3.example.org"), Err(vec![]));
        assert!(same_host("KVM2", "kvm2.example.org."));
        assert!(same_host("kvm2.example.org", "KVM2.example.org"));
        assert!(!same_host("db.a.org", "db.b.org"));
        assert!(!same_host("kvm2", "kvm3"));
    }

    #[test]
    fn an_incomplete_answer_says_what_it_left_out() {
        let mut g = Gaps::default();
        assert!(g.complete() && g.summary().is_none() && g.text().is_empty());
        g.matched.push(("kvm1.example.org".into(), "kvm1".into()));
        assert!(g.complete(), "a matched name is no gap");
        assert!(g.text().contains("taken as host 'kvm1'"));
        g.unread.push(Unread {
            path: "bad.xml".into(),
            message: "bad.xml is not acceptable XML: x".into(),
        });
        g.unknown_hosts.push(UnknownHost {
            name: "kvm9".into(),
            guests: 3,
            ambiguous: Vec::new(),
        });
        assert!(!g.complete());
        let s = g.summary().unwrap();
        assert!(s.contains("1 facts file(s) not read"), "{s}");
        assert!(
            s.contains("3 guest(s) name 1 host(s) not among the facts (kvm9)"),
            "{s}"
        );
        let t = g.text();
        assert!(t.contains("not read: bad.xml is not acceptable XML"), "{t}");
        assert!(t.contains("host 'kvm9' of 3 guest(s)"), "{t}");
        assert_eq!(g.json()["complete"], json!(false));
        assert_eq!(g.json()["unknown_hosts"][0]["guests"], json!(3));
    }
}
