//! CPU knowledge for libvirt guest CPUs on x86.
//!
//! A guest CPU policy is written in terms of libvirt: CPU model names such as
//! `Haswell-noTSX` and feature names such as `pni` or `sse4.2`. To judge such a
//! policy this module knows three things:
//!
//! * **psABI levels.** [`Level`] is the x86-64 psABI microarchitecture level
//!   (`x86-64-v1` … `x86-64-v4`), with each level's feature list spelled the
//!   way libvirt spells it (source: the x86-64 psABI, cross-checked with QEMU's
//!   `docs/system/cpu-models-x86-abi.csv`). [`Level::highest`] decides the level a
//!   set of features reaches.
//! * **Feature spellings.** QEMU, Linux (`/proc/cpuinfo`) and libvirt spell some
//!   features differently (`sse3` / `pni`, `sse4_1` / `sse4.1`, `lzcnt` / `abm`).
//!   [`normalize_feature`] maps a name to libvirt's `cpu_map` spelling, using the
//!   feature names and aliases of libvirt's `x86_features.xml`.
//! * **CPU model contents.** [`CpuMap`] reads libvirt's own `cpu_map` directory
//!   (normally `/usr/share/libvirt/cpu_map`) and resolves which features each x86
//!   CPU model has; [`CpuMap::builtin`] is a copy of that data generated from
//!   libvirt 9.0.0 for hosts without libvirt installed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;
use std::sync::OnceLock;

pub mod x86_map;

/// x86-64 psABI microarchitecture level.
///
/// The levels are cumulative: every feature of `V1` is also a feature of `V2`,
/// and so on. The ordering of the enum follows that inclusion
/// (`V1 < V2 < V3 < V4`). Feature lists (see [`Level::features`]) come from the
/// x86-64 psABI "microarchitecture levels" table, written in libvirt's
/// `cpu_map` spellings (cross-checked with QEMU's
/// `docs/system/cpu-models-x86-abi.csv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// `x86-64-v1`: the x86-64 baseline (`cmov cx8 fpu fxsr mmx syscall sse sse2 lm`).
    V1,
    /// `x86-64-v2`: v1 plus `cx16 lahf_lm popcnt pni sse4.1 sse4.2 ssse3`
    /// (`pni` is SSE3).
    V2,
    /// `x86-64-v3`: v2 plus `avx avx2 bmi1 bmi2 f16c fma abm movbe xsave`
    /// (`abm` carries LZCNT).
    V3,
    /// `x86-64-v4`: v3 plus `avx512f avx512bw avx512cd avx512dq avx512vl`.
    V4,
}

/// Features a level adds to the previous one, libvirt spellings, in the order
/// of the psABI table. Index 0 is v1, index 3 is v4.
const LEVEL_ADDS: [&[&str]; 4] = [
    &[
        "cmov", "cx8", "fpu", "fxsr", "mmx", "syscall", "sse", "sse2", "lm",
    ],
    &[
        "cx16", "lahf_lm", "popcnt", "pni", "sse4.1", "sse4.2", "ssse3",
    ],
    &[
        "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave",
    ],
    &["avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"],
];

impl Level {
    /// All four levels, lowest first.
    pub const ALL: [Level; 4] = [Level::V1, Level::V2, Level::V3, Level::V4];

    /// Position of the level in [`LEVEL_ADDS`] / [`Level::ALL`].
    const fn index(self) -> usize {
        match self {
            Level::V1 => 0,
            Level::V2 => 1,
            Level::V3 => 2,
            Level::V4 => 3,
        }
    }

    /// All features of this level, cumulative (v2 includes v1), in libvirt
    /// `cpu_map` spellings.
    ///
    /// The order is that of the psABI table: v1's features first
    /// (`cmov cx8 fpu fxsr mmx syscall sse sse2 lm`), then v2's additions
    /// (`cx16 lahf_lm popcnt pni sse4.1 sse4.2 ssse3`), then v3's
    /// (`avx avx2 bmi1 bmi2 f16c fma abm movbe xsave`), then v4's
    /// (`avx512f avx512bw avx512cd avx512dq avx512vl`). Source: the x86-64
    /// psABI, with libvirt's names for the features (`pni` = SSE3,
    /// `abm` = LZCNT).
    #[must_use]
    pub fn features(self) -> Vec<&'static str> {
        LEVEL_ADDS[..=self.index()]
            .iter()
            .flat_map(|adds| adds.iter().copied())
            .collect()
    }

    /// The psABI name of the level: `"x86-64-v1"`, `"x86-64-v2"`,
    /// `"x86-64-v3"` or `"x86-64-v4"` (the spelling used by the psABI, GCC's
    /// `-march=` and QEMU's `docs/system/cpu-models-x86-abi.csv`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Level::V1 => "x86-64-v1",
            Level::V2 => "x86-64-v2",
            Level::V3 => "x86-64-v3",
            Level::V4 => "x86-64-v4",
        }
    }

    /// The highest level all of whose features satisfy `has`, or `None` if
    /// even one `x86-64-v1` feature is missing.
    ///
    /// `has` is asked about libvirt spellings (see [`Level::features`]); wrap
    /// it with [`normalize_feature`] if the feature set uses other spellings.
    /// Levels are cumulative, so a set that lacks a v2 feature is v1 even if it
    /// has every v3 feature.
    pub fn highest(has: impl Fn(&str) -> bool) -> Option<Level> {
        let mut reached = None;
        for level in Level::ALL {
            if LEVEL_ADDS[level.index()].iter().all(|f| has(f)) {
                reached = Some(level);
            } else {
                break;
            }
        }
        reached
    }
}

impl FromStr for Level {
    type Err = String;

    /// Parses `"x86-64-v1"` … `"x86-64-v4"` (exact spelling). The error is a
    /// sentence naming the rejected value and listing the valid ones.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Level::ALL
            .into_iter()
            .find(|level| level.as_str() == s)
            .ok_or_else(|| {
                let valid: Vec<&str> = Level::ALL.iter().map(|l| l.as_str()).collect();
                format!(
                    "unknown x86-64 psABI level '{s}': expected one of {}",
                    valid.join(", ")
                )
            })
    }
}

impl fmt::Display for Level {
    /// Writes [`Level::as_str`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Spellings that libvirt's `x86_features.xml` does not list as aliases but
/// that QEMU or Linux use (first) for a libvirt feature (second). Some repeat
/// libvirt's own aliases so that the table in the design document holds even
/// if the generated list changes.
const EXTRA_ALIASES: &[(&str, &str)] = &[
    // QEMU / Linux spellings also listed by libvirt.
    ("sse3", "pni"),
    ("sse4_1", "sse4.1"),
    ("sse4-1", "sse4.1"),
    ("sse4_2", "sse4.2"),
    ("sse4-2", "sse4.2"),
    ("lahf-lm", "lahf_lm"),
    ("pclmulqdq", "pclmuldq"),
    // LZCNT is CPUID 0x80000001 ECX bit 5, which libvirt (like Linux) calls abm.
    ("lzcnt", "abm"),
    // Linux /proc/cpuinfo spelling.
    ("tsc_deadline_timer", "tsc-deadline"),
];

// KNOWN_FEATURES and FEATURE_ALIASES: sorted tables that build.rs generates from
// src/cpu/x86_features.txt (libvirt 9.0.0's cpu_map/x86_features.xml: one feature a line, the
// libvirt name first, then its aliases).
include!(concat!(env!("OUT_DIR"), "/x86_features.rs"));

/// Lookups in the generated tables: bisection, nothing built at run time.
struct FeatureNames;

impl FeatureNames {
    /// Whether `name` is a canonical libvirt name.
    fn contains(&self, name: &str) -> bool {
        KNOWN_FEATURES.binary_search(&name).is_ok()
    }

    /// The canonical libvirt spelling of `name` if it is a known name or alias (libvirt's own
    /// aliases first, then [`EXTRA_ALIASES`]).
    fn lookup(&self, name: &str) -> Option<&'static str> {
        if let Ok(i) = KNOWN_FEATURES.binary_search(&name) {
            return Some(KNOWN_FEATURES[i]);
        }
        if let Ok(i) = FEATURE_ALIASES.binary_search_by(|(a, _)| a.cmp(&name)) {
            return Some(FEATURE_ALIASES[i].1);
        }
        EXTRA_ALIASES
            .iter()
            .find(|(a, _)| *a == name)
            .map(|(_, n)| *n)
    }
}

/// Whether `name` (libvirt spelling) is an x86 feature libvirt 9.0's cpu_map defines
/// (`x86_features.xml`). A newer libvirt may know more: callers treat an unknown name as a warning.
#[must_use]
pub fn is_known_x86_feature(name: &str) -> bool {
    feature_names().contains(name)
}

/// The feature-name tables.
fn feature_names() -> &'static FeatureNames {
    &FeatureNames
}

/// Non-empty, non-comment (`#`) lines of an embedded data file.
fn data_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
}

/// Normalise a feature name to libvirt's `cpu_map` spelling.
///
/// The name is lower-cased (ASCII). Returns `None` if it is empty or then
/// contains characters other than `[a-z0-9._-]`. Otherwise returns, in order
/// of preference:
///
/// 1. the name itself if it is one of libvirt's x86 feature names (libvirt
///    9.0.0 `cpu_map/x86_features.xml`, e.g. `tsc-deadline`, `lahf_lm`);
/// 2. libvirt's name for a QEMU or Linux alias: the `<alias>` entries of
///    `x86_features.xml` (`sse3` → `pni`, `sse4_1`/`sse4-1` → `sse4.1`,
///    `sse4_2`/`sse4-2` → `sse4.2`, `lahf-lm` → `lahf_lm`, `pclmulqdq` →
///    `pclmuldq`, `i64` → `lm`, …) plus `lzcnt` → `abm` and Linux's
///    `tsc_deadline_timer` → `tsc-deadline`;
/// 3. the first known name among the spelling variants `-` → `_`, `_` → `-`,
///    `-`/`_` → `.`, and `-`/`_` removed (so Linux's `sha_ni` → `sha-ni`,
///    `avx512_vnni` → `avx512vnni`);
/// 4. the lower-cased name unchanged: unknown features are passed through for
///    libvirt to judge.
#[must_use]
pub fn normalize_feature(name: &str) -> Option<String> {
    let lower = name.to_ascii_lowercase();
    if lower.is_empty()
        || !lower.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        })
    {
        return None;
    }
    let names = feature_names();
    if let Some(found) = names.lookup(&lower) {
        return Some(found.to_owned());
    }
    let variants = [
        lower.replace('-', "_"),
        lower.replace('_', "-"),
        lower.replace(['-', '_'], "."),
        lower.replace(['-', '_'], ""),
    ];
    for variant in &variants {
        if let Some(found) = names.lookup(variant) {
            return Some(found.to_owned());
        }
    }
    Some(lower)
}

/// The QEMU default CPU model libvirt uses when a domain names none, by guest arch (QEMU
/// `target/i386/cpu.h`: `qemu64` for x86_64, `qemu32` for i686).
#[must_use]
pub fn default_model(arch: &str) -> Option<&'static str> {
    match arch {
        "x86_64" => Some("qemu64"),
        "i686" => Some("qemu32"),
        _ => None,
    }
}

/// Errors from [`CpuMap::load`]. Each message is one sentence naming the
/// `cpu_map` file concerned.
#[derive(Debug, thiserror::Error)]
pub enum CpuMapError {
    /// A file (`index.xml` or an included model file) could not be read.
    /// The I/O error is part of the message.
    #[error("cannot read cpu_map file {}: {error}", .path.display())]
    Read {
        /// The file that could not be read.
        path: PathBuf,
        /// The underlying I/O error.
        error: std::io::Error,
    },
    /// A file is not well-formed XML (roxmltree's message, with position).
    #[error("cpu_map file {} is not well-formed XML: {message}", .path.display())]
    Xml {
        /// The malformed file.
        path: PathBuf,
        /// roxmltree's description of the problem.
        message: String,
    },
    /// A file is well-formed XML but not shaped like libvirt's `cpu_map`:
    /// wrong root element, no `<arch name='x86'>` in `index.xml`, a missing
    /// `name` attribute, an unsafe include file name, a model defined twice, or
    /// a model with more than one parent.
    #[error("cpu_map file {} is invalid: {message}", .path.display())]
    Invalid {
        /// The offending file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A model names a parent model (`<model name='parent'/>`) that no file defines.
    #[error(
        "cpu_map file {}: CPU model '{model}' inherits from unknown model '{parent}'",
        .path.display()
    )]
    UnknownParent {
        /// The file defining `model`.
        path: PathBuf,
        /// The model with the dangling parent reference.
        model: String,
        /// The parent name that no file defines.
        parent: String,
    },
    /// Models inherit from each other in a cycle.
    #[error(
        "cpu_map file {}: CPU model '{model}' is part of an inheritance cycle ({chain})",
        .path.display()
    )]
    Cycle {
        /// The file defining `model`.
        path: PathBuf,
        /// A model on the cycle.
        model: String,
        /// The cycle, e.g. `A -> B -> A`.
        chain: String,
    },
}

/// The features of libvirt's CPU models, for arch `x86`.
///
/// Built either from a libvirt `cpu_map` directory ([`CpuMap::load`]) or from
/// the built-in copy of libvirt 9.0.0's data ([`CpuMap::builtin`]). A model's
/// features are its resolved features: those of its parent model (if any),
/// plus its own `<feature name='…'/>` entries, minus entries marked
/// `removed='yes'` (libvirt keeps those only to disable them explicitly; they
/// are not part of the model's CPUID data) and entries marked `added='yes'` (libvirt 11's
/// `vmx-*` additions to old models, which libvirt 11.3 leaves out of the model's data too).
/// Feature names are libvirt spellings.
#[derive(Debug, Clone)]
pub struct CpuMap {
    /// Directory path, or `"built-in"`.
    source: String,
    /// Model name -> resolved features.
    models: BTreeMap<String, BTreeSet<String>>,
}

/// The built-in model table: `Name: feature feature …` lines.
const BUILTIN_X86: &str = include_str!("cpu/builtin_x86.txt");

/// A model as written in a file, before inheritance is resolved.
struct RawModel {
    /// The file defining the model.
    path: PathBuf,
    /// `<model name='parent'/>`, if any.
    parent: Option<String>,
    /// The model's own features (not `removed='yes'`).
    features: BTreeSet<String>,
}

impl CpuMap {
    /// Load libvirt's `cpu_map` directory (e.g. `/usr/share/libvirt/cpu_map`).
    ///
    /// Reads `index.xml`, follows the `<include filename='…'/>` entries of its
    /// `<arch name='x86'>` element, also inside libvirt 11's `<group>` elements (models
    /// written directly inside that element are accepted too), and reads the `<cpus><model name='X'>…</model></cpus>`
    /// elements of each included file; other elements (vendors, feature
    /// definitions, signatures) and XML comments are ignored. A model's
    /// `<model name='Parent'/>` child makes it inherit the parent's features
    /// (parents may be defined in any included file, in any order).
    ///
    /// # Errors
    ///
    /// [`CpuMapError::Read`] if a file cannot be read, [`CpuMapError::Xml`] if
    /// one is not well-formed, [`CpuMapError::Invalid`] if one is not shaped
    /// like a `cpu_map` file (including an `index.xml` without an x86 arch or
    /// a model defined twice), [`CpuMapError::UnknownParent`] and
    /// [`CpuMapError::Cycle`] for broken inheritance.
    pub fn load(dir: &Path) -> Result<CpuMap, CpuMapError> {
        let index_path = dir.join("index.xml");
        let index_text = read_file(&index_path)?;
        let index = parse_xml(&index_path, &index_text)?;
        check_root(&index_path, &index)?;

        let mut raw = BTreeMap::new();
        let mut found_arch = false;
        let arches = index
            .root_element()
            .children()
            .filter(|n| n.has_tag_name("arch") && n.attribute("name") == Some("x86"));
        for arch in arches {
            found_arch = true;
            for child in arch_entries(arch) {
                match child.tag_name().name() {
                    "include" => {
                        let path = include_path(dir, &index_path, child)?;
                        read_model_file(&path, &mut raw)?;
                    }
                    "model" => parse_model(&index_path, child, &mut raw)?,
                    _ => {}
                }
            }
        }
        if !found_arch {
            return Err(CpuMapError::Invalid {
                path: index_path,
                message: "it has no <arch name='x86'> element".to_owned(),
            });
        }

        let mut models = BTreeMap::new();
        let mut stack = Vec::new();
        for (name, model) in &raw {
            resolve(name, model, &raw, &mut models, &mut stack)?;
        }
        Ok(CpuMap {
            source: dir.display().to_string(),
            models,
        })
    }

    /// Load only `names` (and the parents they inherit from) from a `cpu_map` directory: reads
    /// `index.xml` and the files `x86_NAME.xml` that its x86 `<include>`s list, the layout every
    /// libvirt release uses. A name whose file is not listed is simply absent from the result
    /// (an unknown model). This is what a single rewrite needs: one or two models instead of
    /// the 60-odd files [`CpuMap::load`] reads.
    ///
    /// # Errors
    /// As [`CpuMap::load`], for the files it reads.
    pub fn load_models(dir: &Path, names: &[&str]) -> Result<CpuMap, CpuMapError> {
        // index.xml is only searched for the include lines (every libvirt release writes them as
        // `<include filename='x86_NAME.xml'/>`), not parsed: this runs on every guest start.
        let index_path = dir.join("index.xml");
        let index_text = read_file(&index_path)?;
        let listed = |file: &str| {
            index_text.contains(&format!("filename='{file}'"))
                || index_text.contains(&format!("filename=\"{file}\""))
        };
        let mut raw: BTreeMap<String, RawModel> = BTreeMap::new();
        let mut todo: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut tried = BTreeSet::new();
        while let Some(name) = todo.pop() {
            if raw.contains_key(&name) || !tried.insert(name.clone()) || tried.len() > 64 {
                continue;
            }
            let file = format!("x86_{name}.xml");
            if file.contains('/') || !listed(&file) {
                continue;
            }
            read_model_file(&dir.join(&file), &mut raw)?;
            if let Some(parent) = raw.get(&name).and_then(|m| m.parent.clone()) {
                todo.push(parent);
            }
        }
        let mut models = BTreeMap::new();
        let mut stack = Vec::new();
        for name in names {
            if let Some(model) = raw.get(*name) {
                resolve(name, model, &raw, &mut models, &mut stack)?;
            }
        }
        models.retain(|k, _| names.contains(&k.as_str()));
        Ok(CpuMap {
            source: dir.display().to_string(),
            models,
        })
    }

    /// A built-in copy of the x86 model features, for hosts without libvirt's
    /// `cpu_map`.
    ///
    /// Generated from libvirt 9.0.0's `cpu_map` (Debian 12 package
    /// `libvirt-daemon` 9.0.0) with [`CpuMap::load`]; stored in
    /// `src/cpu/builtin_x86.txt`, whose header says how to regenerate it.
    /// [`CpuMap::source`] is `"built-in"`.
    #[must_use]
    pub fn builtin() -> CpuMap {
        static BUILTIN: OnceLock<BTreeMap<String, BTreeSet<String>>> = OnceLock::new();
        let models = BUILTIN.get_or_init(|| {
            data_lines(BUILTIN_X86)
                .filter_map(|line| line.split_once(':'))
                .map(|(name, features)| {
                    (
                        name.trim().to_owned(),
                        features.split_whitespace().map(str::to_owned).collect(),
                    )
                })
                .collect()
        });
        CpuMap {
            source: "built-in".to_owned(),
            models: models.clone(),
        }
    }

    /// Resolved feature set of `model` (libvirt spellings, inherited features
    /// included), or `None` if the model is unknown. Model names are
    /// case-sensitive, as in libvirt (`Haswell`, `qemu64`).
    #[must_use]
    pub fn model_features(&self, model: &str) -> Option<&BTreeSet<String>> {
        self.models.get(model)
    }

    /// Where this map came from: the `cpu_map` directory path as given to
    /// [`CpuMap::load`], or `"built-in"`.
    #[must_use]
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Number of models known.
    #[must_use]
    pub fn len(&self) -> usize {
        self.models.len()
    }

    /// Whether no models are known.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }

    /// Model names, sorted (byte order, so upper-case names come first).
    #[must_use]
    pub fn model_names(&self) -> Vec<&str> {
        self.models.keys().map(String::as_str).collect()
    }
}

/// The elements of `index.xml`'s `<arch>`, in document order, with the children of libvirt 11's
/// `<group name='...'>` elements (which only gather includes) in place of each group.
fn arch_entries<'a, 'i>(arch: roxmltree::Node<'a, 'i>) -> Vec<roxmltree::Node<'a, 'i>> {
    // A stack of sibling iterators, not recursion: --cpu-map may name any directory, and a
    // deeply nested index.xml must not exhaust the stack.
    let mut out = Vec::new();
    let mut stack = vec![arch.children()];
    while let Some(siblings) = stack.last_mut() {
        match siblings.next() {
            None => {
                stack.pop();
            }
            Some(n) if n.has_tag_name("group") => stack.push(n.children()),
            Some(n) if n.is_element() => out.push(n),
            Some(_) => {}
        }
    }
    out
}

/// Reads one `cpu_map` model file (`<cpus><model name=...>...</cpus>`) into `raw`.
fn read_model_file(path: &Path, raw: &mut BTreeMap<String, RawModel>) -> Result<(), CpuMapError> {
    let text = read_file(path)?;
    let doc = parse_xml(path, &text)?;
    check_root(path, &doc)?;
    for model in doc
        .root_element()
        .children()
        .filter(|n| n.has_tag_name("model"))
    {
        parse_model(path, model, raw)?;
    }
    Ok(())
}

/// Reads a whole `cpu_map` file: a regular file (a FIFO there would hang the hook) of at most
/// [`crate::readfile::MAX_FACT_BYTES`], UTF-8.
fn read_file(path: &Path) -> Result<String, CpuMapError> {
    use crate::readfile::{MAX_FACT_BYTES, ReadError, read_regular};
    let read = |error| CpuMapError::Read {
        path: path.to_owned(),
        error,
    };
    let bytes = read_regular(path, MAX_FACT_BYTES).map_err(|e| match e {
        ReadError::Io { source, .. } => read(source),
        ReadError::TooLarge { size, limit, .. } => read(std::io::Error::other(format!(
            "over the limit of {limit} bytes (at least {size} bytes)"
        ))),
    })?;
    String::from_utf8(bytes)
        .map_err(|e| read(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}

/// Parses a `cpu_map` file's XML.
fn parse_xml<'a>(path: &Path, text: &'a str) -> Result<roxmltree::Document<'a>, CpuMapError> {
    roxmltree::Document::parse(text).map_err(|e| CpuMapError::Xml {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

/// Checks that a `cpu_map` file's root element is `<cpus>`.
fn check_root(path: &Path, doc: &roxmltree::Document<'_>) -> Result<(), CpuMapError> {
    let root = doc.root_element().tag_name().name();
    if root == "cpus" {
        Ok(())
    } else {
        Err(CpuMapError::Invalid {
            path: path.to_owned(),
            message: format!("its root element is <{root}>, expected <cpus>"),
        })
    }
}

/// The `name` attribute of `node`, or an [`CpuMapError::Invalid`] error.
fn required_name<'a>(path: &Path, node: roxmltree::Node<'a, '_>) -> Result<&'a str, CpuMapError> {
    node.attribute("name").ok_or_else(|| CpuMapError::Invalid {
        path: path.to_owned(),
        message: format!(
            "a <{}> element has no name attribute",
            node.tag_name().name()
        ),
    })
}

/// The path of an `<include filename='…'/>`: a plain file name inside `dir`.
fn include_path(
    dir: &Path,
    index_path: &Path,
    node: roxmltree::Node<'_, '_>,
) -> Result<PathBuf, CpuMapError> {
    let invalid = |message: String| CpuMapError::Invalid {
        path: index_path.to_owned(),
        message,
    };
    let filename = node
        .attribute("filename")
        .ok_or_else(|| invalid("an <include> element has no filename attribute".to_owned()))?;
    let mut components = Path::new(filename).components();
    match (components.next(), components.next()) {
        (Some(Component::Normal(_)), None) => Ok(dir.join(filename)),
        _ => Err(invalid(format!(
            "<include filename='{filename}'/> is not a plain file name in the cpu_map directory"
        ))),
    }
}

/// Records one `<model>` element of `path` in `raw`.
fn parse_model(
    path: &Path,
    node: roxmltree::Node<'_, '_>,
    raw: &mut BTreeMap<String, RawModel>,
) -> Result<(), CpuMapError> {
    let name = required_name(path, node)?;
    let mut parent = None;
    let mut features = BTreeSet::new();
    for child in node.children().filter(roxmltree::Node::is_element) {
        match child.tag_name().name() {
            "model" => {
                let parent_name = required_name(path, child)?;
                if parent.replace(parent_name.to_owned()).is_some() {
                    return Err(CpuMapError::Invalid {
                        path: path.to_owned(),
                        message: format!("CPU model '{name}' names more than one parent model"),
                    });
                }
            }
            "feature" => {
                let feature = required_name(path, child)?;
                // libvirt 11.3 leaves added='yes' features (vmx-* added to old models) out of
                // the model's CPUID data, as it does removed='yes' ones.
                if child.attribute("removed") != Some("yes")
                    && child.attribute("added") != Some("yes")
                {
                    features.insert(feature.to_owned());
                }
            }
            _ => {}
        }
    }
    if let Some(previous) = raw.get(name) {
        return Err(CpuMapError::Invalid {
            path: path.to_owned(),
            message: format!(
                "CPU model '{name}' is already defined in {}",
                previous.path.display()
            ),
        });
    }
    raw.insert(
        name.to_owned(),
        RawModel {
            path: path.to_owned(),
            parent,
            features,
        },
    );
    Ok(())
}

/// Resolves `model` (named `name`) into `done`, parents first. `stack` holds
/// the models being resolved, to detect cycles.
fn resolve(
    name: &str,
    model: &RawModel,
    raw: &BTreeMap<String, RawModel>,
    done: &mut BTreeMap<String, BTreeSet<String>>,
    stack: &mut Vec<String>,
) -> Result<(), CpuMapError> {
    if done.contains_key(name) {
        return Ok(());
    }
    if let Some(start) = stack.iter().position(|s| s == name) {
        let mut chain = stack[start..].to_vec();
        chain.push(name.to_owned());
        return Err(CpuMapError::Cycle {
            path: model.path.clone(),
            model: name.to_owned(),
            chain: chain.join(" -> "),
        });
    }
    let mut features = BTreeSet::new();
    if let Some(parent) = &model.parent {
        let Some(parent_model) = raw.get(parent) else {
            return Err(CpuMapError::UnknownParent {
                path: model.path.clone(),
                model: name.to_owned(),
                parent: parent.clone(),
            });
        };
        stack.push(name.to_owned());
        resolve(parent, parent_model, raw, done, stack)?;
        stack.pop();
        if let Some(inherited) = done.get(parent) {
            features.extend(inherited.iter().cloned());
        }
    }
    features.extend(model.features.iter().cloned());
    done.insert(name.to_owned(), features);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write as _;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const SYSTEM_CPU_MAP: &str = "/usr/share/libvirt/cpu_map";

    /// A scratch directory removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(files: &[(&str, &str)]) -> TempDir {
            static COUNTER: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "virt-cpu-policy-cpu-test-{}-{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&dir).expect("create temp dir");
            for (name, text) in files {
                std::fs::write(dir.join(name), text).expect("write temp file");
            }
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const INDEX: &str = "<cpus>\n  <arch name='x86'>\n    <include filename='x86_vendors.xml'/>\n    \
                         <include filename='x86_a.xml'/>\n    <include filename='x86_b.xml'/>\n  </arch>\n  \
                         <arch name='ppc64'><include filename='missing.xml'/></arch>\n</cpus>\n";
    const VENDORS: &str = "<cpus><vendor name='Intel' string='GenuineIntel'/></cpus>";

    fn level_of(map: &CpuMap, model: &str) -> Option<Level> {
        let features = map
            .model_features(model)
            .unwrap_or_else(|| panic!("model {model} missing from {}", map.source()));
        Level::highest(|f| features.contains(f))
    }

    #[test]
    fn level_features_are_cumulative_and_ordered() {
        assert_eq!(
            Level::V1.features(),
            [
                "cmov", "cx8", "fpu", "fxsr", "mmx", "syscall", "sse", "sse2", "lm"
            ]
        );
        assert_eq!(Level::V2.features().len(), 16);
        assert_eq!(Level::V3.features().len(), 25);
        assert_eq!(Level::V4.features().len(), 30);
        assert_eq!(Level::V4.features().last(), Some(&"avx512vl"));
        for pair in Level::ALL.windows(2) {
            assert!(pair[0] < pair[1]);
            assert!(pair[1].features().starts_with(&pair[0].features()));
        }
        // Every level feature is a libvirt feature name.
        for f in Level::V4.features() {
            assert_eq!(normalize_feature(f).as_deref(), Some(f));
            assert!(feature_names().contains(f), "{f}");
        }
    }

    #[test]
    fn level_strings() {
        for level in Level::ALL {
            assert_eq!(level.as_str().parse::<Level>(), Ok(level));
            assert_eq!(level.to_string(), level.as_str());
        }
        assert_eq!("x86-64-v3".parse::<Level>(), Ok(Level::V3));
        let err = "x86-64-v5".parse::<Level>().unwrap_err();
        assert!(err.contains("x86-64-v5"), "{err}");
        assert!(
            err.contains("x86-64-v1, x86-64-v2, x86-64-v3, x86-64-v4"),
            "{err}"
        );
        assert!("".parse::<Level>().is_err());
    }

    #[test]
    fn highest_level() {
        assert_eq!(Level::highest(|_| false), None);
        assert_eq!(Level::highest(|_| true), Some(Level::V4));
        let v3: BTreeSet<&str> = Level::V3.features().into_iter().collect();
        assert_eq!(Level::highest(|f| v3.contains(f)), Some(Level::V3));
        // A v2 feature missing caps the level at v1 even with all v3/v4 features.
        assert_eq!(Level::highest(|f| f != "popcnt"), Some(Level::V1));
        assert_eq!(Level::highest(|f| f != "lm"), None);
    }

    #[test]
    fn highest_level_of_libvirt_models() {
        let map = CpuMap::builtin();
        assert_eq!(level_of(&map, "qemu64"), Some(Level::V1));
        assert_eq!(level_of(&map, "kvm64"), Some(Level::V1));
        assert_eq!(level_of(&map, "qemu32"), None); // no lm
        assert_eq!(level_of(&map, "Nehalem"), Some(Level::V2));
        // libvirt's Haswell and Broadwell lack f16c and abm, so they stay v2.
        for model in ["Haswell", "Haswell-noTSX", "Broadwell", "Broadwell-noTSX"] {
            let features = map.model_features(model).expect(model);
            assert!(!features.contains("f16c"), "{model}");
            assert!(!features.contains("abm"), "{model}");
            assert!(features.contains("avx2"), "{model}");
            assert_eq!(level_of(&map, model), Some(Level::V2), "{model}");
        }
        assert_eq!(level_of(&map, "Skylake-Client"), Some(Level::V3));
        assert_eq!(level_of(&map, "Skylake-Server"), Some(Level::V4));
        assert_eq!(level_of(&map, "Icelake-Server"), Some(Level::V4));
        assert_eq!(level_of(&map, "EPYC"), Some(Level::V3));
    }

    #[test]
    fn qemu64_ignores_commented_features() {
        let map = CpuMap::builtin();
        let qemu64 = map.model_features("qemu64").expect("qemu64");
        for absent in ["popcnt", "abm", "lahf_lm", "sse4a"] {
            assert!(!qemu64.contains(absent), "{absent}");
        }
        for present in ["svm", "cx16", "pni", "lm", "sse2"] {
            assert!(qemu64.contains(present), "{present}");
        }
        assert!(map.model_features("QEMU64").is_none());
    }

    #[test]
    fn removed_features_are_not_model_features() {
        let map = CpuMap::builtin();
        // x86_EPYC.xml lists <feature name='monitor' removed='yes'/>.
        let epyc = map.model_features("EPYC").expect("EPYC");
        assert!(!epyc.contains("monitor"));
        assert!(epyc.contains("sha-ni"));
    }

    #[test]
    fn builtin_basics() {
        let map = CpuMap::builtin();
        assert_eq!(map.source(), "built-in");
        assert!(!map.is_empty());
        assert_eq!(map.len(), map.model_names().len());
        let names = map.model_names();
        assert!(names.windows(2).all(|w| w[0] < w[1]));
        assert!(names.contains(&"Skylake-Server-noTSX-IBRS"));
        assert!(names.contains(&"486"));
        // The data file's lines all parsed into models.
        assert_eq!(map.len(), data_lines(BUILTIN_X86).count());
    }

    #[test]
    fn load_models_matches_full_load() {
        let dir = &crate::testdata::cpu_map();
        let full = CpuMap::load(dir).unwrap();
        for name in ["qemu64", "Nehalem", "Haswell", "Skylake-Server", "EPYC"] {
            let one = CpuMap::load_models(dir, &[name]).unwrap();
            assert_eq!(one.len(), 1, "{name}");
            assert_eq!(
                one.model_features(name),
                full.model_features(name),
                "{name}"
            );
        }
        assert!(
            CpuMap::load_models(dir, &["NoSuchModel"])
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn builtin_table_matches_libvirt_9_0() {
        let dir = crate::testdata::cpu_map();
        let system = CpuMap::load(&dir).expect("load libvirt 9.0's cpu_map");
        let builtin = CpuMap::builtin();
        assert_eq!(system.source(), dir.display().to_string());
        assert_eq!(system.model_names(), builtin.model_names());
        for name in system.model_names() {
            assert_eq!(
                system.model_features(name),
                builtin.model_features(name),
                "{name}"
            );
        }
    }

    #[test]
    fn normalize_feature_cases() {
        let cases = [
            ("SSE3", Some("pni")),
            ("sse3", Some("pni")),
            ("pni", Some("pni")),
            ("sse4_1", Some("sse4.1")),
            ("sse4-1", Some("sse4.1")),
            ("sse4.1", Some("sse4.1")),
            ("sse4-2", Some("sse4.2")),
            ("sse4_2", Some("sse4.2")),
            ("lahf-lm", Some("lahf_lm")),
            ("LAHF_LM", Some("lahf_lm")),
            ("lzcnt", Some("abm")),
            ("pclmulqdq", Some("pclmuldq")),
            ("tsc-deadline", Some("tsc-deadline")),
            ("tsc_deadline_timer", Some("tsc-deadline")),
            ("sse4a", Some("sse4a")),
            ("sha_ni", Some("sha-ni")),
            ("avx512_vnni", Some("avx512vnni")),
            ("avx512_vpopcntdq", Some("avx512-vpopcntdq")),
            ("md_clear", Some("md-clear")),
            ("nrip_save", Some("nrip-save")),
            ("cr8_legacy", Some("cr8legacy")),
            ("Avx2", Some("avx2")),
            ("constant_tsc", Some("constant_tsc")),
            ("bad name!", None),
            ("", None),
            ("avx\u{e9}", None),
            ("a/b", None),
        ];
        for (input, expected) in cases {
            assert_eq!(normalize_feature(input).as_deref(), expected, "{input:?}");
        }
    }

    #[test]
    fn load_resolves_inheritance() {
        let a = "<cpus>\n  <!-- <model name='Ghost'><feature name='x'/></model> -->\n  \
                 <model name='Base'>\n    <vendor name='Intel'/>\n    <feature name='fpu'/>\n    \
                 <!-- <feature name='popcnt'/> -->\n    <feature name='monitor' removed='yes'/>\n  </model>\n</cpus>\n";
        let b = "<cpus>\n  <model name='Child'>\n    <model name='Base'/>\n    <feature name='sse2'/>\n  \
                 </model>\n  <model name='Grandchild'><model name='Child'/><feature name='avx'/></model>\n</cpus>\n";
        let dir = TempDir::new(&[
            ("index.xml", INDEX),
            ("x86_vendors.xml", VENDORS),
            ("x86_a.xml", a),
            ("x86_b.xml", b),
        ]);
        let map = CpuMap::load(&dir.0).expect("load");
        assert_eq!(map.model_names(), ["Base", "Child", "Grandchild"]);
        assert_eq!(map.len(), 3);
        let set = |names: &[&str]| -> BTreeSet<String> {
            names.iter().map(|s| (*s).to_owned()).collect()
        };
        assert_eq!(map.model_features("Base"), Some(&set(&["fpu"])));
        assert_eq!(map.model_features("Child"), Some(&set(&["fpu", "sse2"])));
        assert_eq!(
            map.model_features("Grandchild"),
            Some(&set(&["avx", "fpu", "sse2"]))
        );
        assert_eq!(map.model_features("Ghost"), None);
        assert_eq!(map.source(), dir.0.display().to_string());
    }

    #[test]
    fn load_rejects_cycle() {
        let a = "<cpus><model name='A'><model name='B'/><feature name='fpu'/></model></cpus>";
        let b = "<cpus><model name='B'><model name='A'/></model></cpus>";
        let dir = TempDir::new(&[
            ("index.xml", INDEX),
            ("x86_vendors.xml", VENDORS),
            ("x86_a.xml", a),
            ("x86_b.xml", b),
        ]);
        let err = CpuMap::load(&dir.0).unwrap_err();
        assert!(
            matches!(&err, CpuMapError::Cycle { chain, .. } if chain == "A -> B -> A"),
            "{err:?}"
        );
        assert!(err.to_string().contains("x86_a.xml"), "{err}");
    }

    #[test]
    fn load_rejects_self_parent() {
        let a = "<cpus><model name='A'><model name='A'/></model></cpus>";
        let b = "<cpus/>";
        let dir = TempDir::new(&[
            ("index.xml", INDEX),
            ("x86_vendors.xml", VENDORS),
            ("x86_a.xml", a),
            ("x86_b.xml", b),
        ]);
        let err = CpuMap::load(&dir.0).unwrap_err();
        assert!(
            matches!(&err, CpuMapError::Cycle { chain, .. } if chain == "A -> A"),
            "{err:?}"
        );
    }

    #[test]
    fn load_rejects_unknown_parent() {
        let a = "<cpus><model name='A'><feature name='fpu'/></model></cpus>";
        let b = "<cpus><model name='B'><model name='Nowhere'/></model></cpus>";
        let dir = TempDir::new(&[
            ("index.xml", INDEX),
            ("x86_vendors.xml", VENDORS),
            ("x86_a.xml", a),
            ("x86_b.xml", b),
        ]);
        let err = CpuMap::load(&dir.0).unwrap_err();
        assert!(
            matches!(&err, CpuMapError::UnknownParent { model, parent, .. }
                if model == "B" && parent == "Nowhere"),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains("x86_b.xml"), "{message}");
        assert!(message.contains("'Nowhere'"), "{message}");
    }

    #[test]
    fn load_rejects_malformed_file() {
        let a = "<cpus><model name='A'><feature name='fpu'></model></cpus>";
        let dir = TempDir::new(&[
            ("index.xml", INDEX),
            ("x86_vendors.xml", VENDORS),
            ("x86_a.xml", a),
            ("x86_b.xml", "<cpus/>"),
        ]);
        let err = CpuMap::load(&dir.0).unwrap_err();
        assert!(matches!(&err, CpuMapError::Xml { .. }), "{err:?}");
        assert!(err.to_string().contains("x86_a.xml"), "{err}");
    }

    #[test]
    fn load_rejects_missing_file_and_bad_shapes() {
        let dir = TempDir::new(&[
            ("index.xml", INDEX),
            ("x86_vendors.xml", VENDORS),
            ("x86_a.xml", "<cpus/>"),
        ]);
        let err = CpuMap::load(&dir.0).unwrap_err();
        assert!(matches!(&err, CpuMapError::Read { .. }), "{err:?}");
        assert!(err.to_string().contains("x86_b.xml"), "{err}");

        let empty = TempDir::new(&[]);
        let err = CpuMap::load(&empty.0).unwrap_err();
        assert!(err.to_string().contains("index.xml"), "{err}");

        let no_x86 = TempDir::new(&[("index.xml", "<cpus><arch name='ppc64'/></cpus>")]);
        let err = CpuMap::load(&no_x86.0).unwrap_err();
        assert!(matches!(&err, CpuMapError::Invalid { .. }), "{err:?}");

        let escape = TempDir::new(&[(
            "index.xml",
            "<cpus><arch name='x86'><include filename='../etc/passwd'/></arch></cpus>",
        )]);
        let err = CpuMap::load(&escape.0).unwrap_err();
        assert!(matches!(&err, CpuMapError::Invalid { .. }), "{err:?}");

        let duplicate = TempDir::new(&[
            ("index.xml", INDEX),
            ("x86_vendors.xml", VENDORS),
            ("x86_a.xml", "<cpus><model name='A'/></cpus>"),
            ("x86_b.xml", "<cpus><model name='A'/></cpus>"),
        ]);
        let err = CpuMap::load(&duplicate.0).unwrap_err();
        assert!(err.to_string().contains("already defined"), "{err}");

        let nameless = TempDir::new(&[
            ("index.xml", INDEX),
            ("x86_vendors.xml", VENDORS),
            (
                "x86_a.xml",
                "<cpus><model name='A'><feature/></model></cpus>",
            ),
            ("x86_b.xml", "<cpus/>"),
        ]);
        let err = CpuMap::load(&nameless.0).unwrap_err();
        assert!(err.to_string().contains("no name attribute"), "{err}");
    }

    /// Regenerates `src/cpu/builtin_x86.txt` and `src/cpu/x86_features.txt`
    /// from `$CPU_MAP_DIR` (default `/usr/share/libvirt/cpu_map`). Set
    /// `CPU_MAP_ORIGIN` to describe the libvirt build it came from.
    #[test]
    #[ignore = "rewrites the built-in data files from the host's libvirt cpu_map"]
    fn regenerate_builtin_tables() {
        let dir = std::env::var("CPU_MAP_DIR").unwrap_or_else(|_| SYSTEM_CPU_MAP.to_owned());
        let origin = std::env::var("CPU_MAP_ORIGIN").unwrap_or_else(|_| {
            "libvirt 9.0.0's cpu_map (Debian 12 package libvirt-daemon 9.0.0-4+deb12u2)".to_owned()
        });
        let dir = Path::new(&dir);
        let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cpu");
        let regen = "#   cargo test --lib -- --ignored regenerate_builtin_tables\n\
                     # (reads $CPU_MAP_DIR, default /usr/share/libvirt/cpu_map; set CPU_MAP_ORIGIN\n\
                     # to the libvirt version it comes from).\n";

        let map = CpuMap::load(dir).expect("load cpu_map");
        let mut models = format!(
            "# libvirt x86 CPU models and their resolved features (libvirt spellings),\n\
             # one model a line: `Name: feature feature ...`. Parent models are resolved and\n\
             # features marked removed='yes' are left out, as by CpuMap::load.\n\
             # Generated from {origin}\n\
             # at {}. Regenerate with\n{regen}",
            dir.display()
        );
        for name in map.model_names() {
            let features = map.model_features(name).expect("listed model");
            let features: Vec<&str> = features.iter().map(String::as_str).collect();
            writeln!(models, "{name}: {}", features.join(" ")).expect("write to string");
        }
        std::fs::write(out.join("builtin_x86.txt"), models).expect("write builtin_x86.txt");

        let features_path = dir.join("x86_features.xml");
        let text = std::fs::read_to_string(&features_path).expect("read x86_features.xml");
        let doc = roxmltree::Document::parse(&text).expect("parse x86_features.xml");
        let mut features = format!(
            "# libvirt x86 feature names, one a line: the libvirt name first, then its\n\
             # QEMU/Linux <alias> names. Generated from x86_features.xml of\n\
             # {origin}\n\
             # at {}. Regenerate with\n{regen}",
            dir.display()
        );
        for feature in doc
            .root_element()
            .children()
            .filter(|n| n.has_tag_name("feature"))
        {
            let mut line = feature.attribute("name").expect("feature name").to_owned();
            for alias in feature.children().filter(|n| n.has_tag_name("alias")) {
                line.push(' ');
                line.push_str(alias.attribute("name").expect("alias name"));
            }
            writeln!(features, "{line}").expect("write to string");
        }
        std::fs::write(out.join("x86_features.txt"), features).expect("write x86_features.txt");
    }
}
