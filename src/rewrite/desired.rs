//! The desired `<cpu>`: every top-level `<cpu>` folded into one (rule 1 of docs/rewrite.md), before
//! the plan is applied to it.
//!
//! libvirt reads mode, model and features from the first `<cpu>` only and silently ignores the
//! rest (seen with libvirt 9.0 and 11.3), so an appended `<cpu>` is an operator's override that
//! never took effect: a later element's attributes and children override the earlier ones',
//! features merge by name, `<numa>` is kept once. Each kept child remembers the node it came from,
//! so the emitter can copy it byte for byte.

use crate::cpu::normalize_feature;
use crate::finding::{Code, Finding};
use crate::libvirt::cpu_def::CpuMode;
use crate::xml::{text_of, written_value};
use roxmltree::Node;
use std::collections::{HashMap, HashSet};

/// Children that occur once; a later `<cpu>`'s replaces the first one's.
pub(crate) const SINGLES: [&str; 4] = ["vendor", "topology", "cache", "maxphysaddr"];

/// One `<feature>` of the desired `<cpu>`.
pub(crate) struct DesiredFeature<'a, 't> {
    /// The name in libvirt's spelling (the key features merge by).
    pub(crate) key: String,
    /// The name as first written (kept when the element is copied).
    pub(crate) name: String,
    /// `policy`, `require` when absent (libvirt's default).
    pub(crate) policy: String,
    /// The first `<feature>` of the first `<cpu>` with this name, kept in place.
    pub(crate) node: Option<Node<'a, 't>>,
    /// Whether a later `<cpu>` lists it (an override libvirt ignored).
    pub(crate) later: bool,
}

/// The desired `<model>`.
pub(crate) struct DesiredModel<'a, 't> {
    /// The model name.
    pub(crate) text: String,
    /// `fallback`, when written.
    pub(crate) fallback: Option<String>,
    /// The element it was read from, while it is unchanged (copied byte for byte).
    pub(crate) src: Option<Node<'a, 't>>,
}

/// A once-only child written again in the same `<cpu>`, and dropped.
pub(crate) struct Repeat {
    /// `model` or one of [`SINGLES`].
    pub(crate) element: &'static str,
    /// The kept (first) element's value ([`crate::xml::written_value`]).
    pub(crate) kept: String,
    /// The dropped one's.
    pub(crate) dropped: String,
}

/// The `<cpu>` the rewrite aims at.
#[derive(Default)]
pub(crate) struct Desired<'a, 't> {
    /// Attributes of `<cpu>` in order (mode, match, check, migratable...).
    pub(crate) attrs: Vec<(String, String)>,
    pub(crate) model: Option<DesiredModel<'a, 't>>,
    /// The [`SINGLES`] present, each with the node it comes from.
    pub(crate) singles: Vec<(String, Node<'a, 't>)>,
    pub(crate) numa: Option<Node<'a, 't>>,
    /// Features in document order; [`Desired::feature`] finds them through `feature_index`.
    pub(crate) features: Vec<DesiredFeature<'a, 't>>,
    /// Key → position in `features` (a domain may list thousands: no linear search).
    feature_index: HashMap<String, usize>,
    /// Unknown or foreign children of later `<cpu>` elements, moved into the first.
    pub(crate) extras: Vec<Node<'a, 't>>,
    /// New markup for the kept `<topology>` (the vCPU rules reshape it).
    pub(crate) topology_markup: Option<String>,
    /// New markup for the kept `<numa>` (cells follow the vCPU maximum).
    pub(crate) numa_markup: Option<String>,
    /// Feature names listed more than once within one `<cpu>` (libvirt refuses that), in the
    /// order met, each with the policy it had before it was listed again.
    pub(crate) duplicates: Vec<(String, String)>,
    duplicate_keys: HashSet<String>,
    /// Elements that occur once (`model`, `topology`...) written more than once in one `<cpu>`:
    /// the first is kept (libvirt reads the first, `virXPathNode`), each later one dropped.
    pub(crate) repeated: Vec<Repeat>,
    /// The model's name as written when it has spaces around it (rewritten without them).
    pub(crate) padded_model: Option<String>,
    /// The `<cpu>` the model was read from (a second `<model>` in it is a [`Repeat`]).
    model_parent: Option<Node<'a, 't>>,
    /// The first `<cpu>`, the one libvirt reads (None without any).
    pub(crate) first: Option<Node<'a, 't>>,
}

impl<'a, 't> Desired<'a, 't> {
    pub(crate) fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn set_attr(&mut self, name: &str, value: &str) {
        if let Some(a) = self.attrs.iter_mut().find(|(n, _)| n == name) {
            a.1 = value.to_string();
        } else {
            self.attrs.push((name.to_string(), value.to_string()));
        }
    }

    pub(crate) fn remove_attr(&mut self, name: &str) -> Option<String> {
        let i = self.attrs.iter().position(|(n, _)| n == name)?;
        Some(self.attrs.remove(i).1)
    }

    /// `mode` as written, libvirt's default `custom` when absent.
    pub(crate) fn mode(&self) -> String {
        self.attr("mode")
            .unwrap_or(CpuMode::Custom.as_str())
            .to_string()
    }

    /// The mode as libvirt reads it ([`Desired::mode`]); None for a word libvirt does not know
    /// (validation says so).
    pub(crate) fn mode_kind(&self) -> Option<CpuMode> {
        CpuMode::parse(self.attr("mode").unwrap_or(CpuMode::Custom.as_str()))
    }

    /// Whether the mode is `mode`.
    pub(crate) fn mode_is(&self, mode: CpuMode) -> bool {
        self.mode_kind() == Some(mode)
    }

    pub(crate) fn feature(&self, key: &str) -> Option<&DesiredFeature<'a, 't>> {
        self.feature_index.get(key).map(|i| &self.features[*i])
    }

    /// Add a feature not listed yet.
    fn push_feature(&mut self, f: DesiredFeature<'a, 't>) {
        self.feature_index
            .insert(f.key.clone(), self.features.len());
        self.features.push(f);
    }

    /// Keep the features `keep` says yes to; returns the others, in order.
    pub(crate) fn retain_features(
        &mut self,
        keep: impl Fn(&DesiredFeature<'a, 't>) -> bool,
    ) -> Vec<DesiredFeature<'a, 't>> {
        let (kept, dropped): (Vec<_>, Vec<_>) = std::mem::take(&mut self.features)
            .into_iter()
            .partition(|f| keep(f));
        self.feature_index.clear();
        for f in kept {
            self.push_feature(f);
        }
        dropped
    }

    /// The policy `key` had before, if it was listed.
    pub(crate) fn feature_policy(&self, key: &str) -> Option<String> {
        self.feature(key).map(|f| f.policy.clone())
    }

    /// Give `key` the policy `policy`; returns the previous policy when it was listed.
    pub(crate) fn set_feature(&mut self, key: &str, policy: &str) -> Option<String> {
        if let Some(i) = self.feature_index.get(key) {
            let f = &mut self.features[*i];
            let old = std::mem::replace(&mut f.policy, policy.to_string());
            return Some(old);
        }
        self.push_feature(DesiredFeature {
            key: key.to_string(),
            name: key.to_string(),
            policy: policy.to_string(),
            node: None,
            later: false,
        });
        None
    }

    /// Whether `key` was listed more than once within one `<cpu>`.
    pub(crate) fn is_duplicate(&self, key: &str) -> bool {
        self.duplicate_keys.contains(key)
    }

    pub(crate) fn single(&self, name: &str) -> Option<Node<'a, 't>> {
        self.singles
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| *s)
    }

    /// Whether `node`'s parent is the first `<cpu>`.
    pub(crate) fn in_first(&self, node: Option<Node<'a, 't>>) -> bool {
        node.and_then(|n| n.parent())
            .is_some_and(|p| Some(p) == self.first)
    }

    /// Whether a model is named (an empty `<model/>`, as host-model writes, names none).
    pub(crate) fn has_model(&self) -> bool {
        self.model
            .as_ref()
            .is_some_and(|m| !m.text.trim().is_empty())
    }

    /// Whether the model comes from the first `<cpu>`.
    pub(crate) fn model_in_first(&self) -> bool {
        self.model.is_some() && self.model_parent.is_some() && self.model_parent == self.first
    }

    /// Drop the single child `name`; returns its node when it was there.
    pub(crate) fn remove_single(&mut self, name: &str) -> Option<Node<'a, 't>> {
        let i = self.singles.iter().position(|(n, _)| n == name)?;
        Some(self.singles.remove(i).1)
    }
}

/// Fold all `<cpu>` elements into one desired state. Two different `<numa>` elements are a
/// `cpu-numa-conflict` error in `findings`.
pub(crate) fn merge<'a, 't>(cpus: &[Node<'a, 't>], findings: &mut Vec<Finding>) -> Desired<'a, 't> {
    let mut d = Desired::default();
    for (i, cpu) in cpus.iter().enumerate() {
        let first = i == 0;
        if first {
            d.first = Some(*cpu);
        }
        for a in cpu.attributes() {
            if a.namespace().is_none() {
                d.set_attr(a.name(), a.value());
            }
        }
        for c in cpu.children().filter(Node::is_element) {
            let ours = c.tag_name().namespace().is_none();
            let taken = ours
                && match c.tag_name().name() {
                    "model" => merge_model(&mut d, c),
                    "feature" => merge_feature(&mut d, c, first),
                    "numa" => merge_numa(&mut d, c, findings),
                    name if SINGLES.contains(&name) => merge_single(&mut d, name, c),
                    _ => false,
                };
            // The first <cpu>'s other children stay where they are; a later one's move in.
            if !taken && !first {
                d.extras.push(c);
            }
        }
    }
    d
}

fn merge_model<'a, 't>(d: &mut Desired<'a, 't>, c: Node<'a, 't>) -> bool {
    if d.model_parent == c.parent() {
        let kept = d.model.as_ref().map(|m| m.text.clone()).unwrap_or_default();
        d.repeated.push(Repeat {
            element: "model",
            kept,
            dropped: text_of(c).unwrap_or_default(),
        });
        return true;
    }
    d.model_parent = c.parent();
    let raw = crate::domain::model_name(c);
    let text = text_of(c).unwrap_or_default();
    // libvirt takes the name as written, spaces included: a padded name is rewritten trimmed.
    let padded = raw.filter(|r| *r != text);
    d.model = Some(DesiredModel {
        text,
        fallback: c.attribute("fallback").map(str::to_string),
        src: if padded.is_some() { None } else { Some(c) },
    });
    d.padded_model = padded;
    true
}

/// A `<feature>` without a name is not a feature to merge: it is kept as it is.
fn merge_feature<'a, 't>(d: &mut Desired<'a, 't>, c: Node<'a, 't>, first: bool) -> bool {
    let Some(name) = c.attribute("name") else {
        return false;
    };
    let key = normalize_feature(name).unwrap_or_else(|| name.to_string());
    let policy = c.attribute("policy").unwrap_or("require").to_string();
    if let Some(i) = d.feature_index.get(&key).copied() {
        let f = &mut d.features[i];
        // Only the first <cpu> is read by libvirt, which refuses a feature listed twice in it; in
        // a later <cpu> the last listing is simply the override.
        let twice_in_first = first && f.node.is_some_and(|n| n.parent() == c.parent());
        f.later |= !first;
        let before = std::mem::replace(&mut f.policy, policy);
        if twice_in_first && d.duplicate_keys.insert(key.clone()) {
            d.duplicates.push((key, before));
        }
    } else {
        d.push_feature(DesiredFeature {
            key,
            name: name.to_string(),
            policy,
            node: first.then_some(c),
            later: !first,
        });
    }
    true
}

fn merge_numa<'a, 't>(
    d: &mut Desired<'a, 't>,
    c: Node<'a, 't>,
    findings: &mut Vec<Finding>,
) -> bool {
    // Whitespace aside, the same <numa> twice is one <numa>.
    let text_key = |n: Node<'_, '_>| -> String {
        n.document().input_text()[n.range()]
            .split_whitespace()
            .collect::<String>()
    };
    match d.numa {
        Some(prev) if text_key(prev) != text_key(c) => findings.push(Finding::error(
            Code::CpuNumaConflict,
            "two different <numa> elements in separate <cpu> elements; libvirt would use one and ignore the other",
            "keep a single <numa> in the domain's <cpu>",
        )),
        Some(_) => {}
        None => d.numa = Some(c),
    }
    true
}

fn merge_single<'a, 't>(d: &mut Desired<'a, 't>, name: &str, c: Node<'a, 't>) -> bool {
    if let Some(s) = d.singles.iter_mut().find(|(n, _)| n == name) {
        if s.1.parent() == c.parent() {
            let element = SINGLES.into_iter().find(|e| *e == name).unwrap_or("cpu");
            d.repeated.push(Repeat {
                element,
                kept: written_value(s.1),
                dropped: written_value(c),
            });
            return true;
        }
        s.1 = c;
    } else {
        d.singles.push((name.to_string(), c));
    }
    true
}
