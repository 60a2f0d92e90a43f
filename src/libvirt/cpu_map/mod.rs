//! libvirt's x86 `cpu_map` (normally `/usr/share/libvirt/cpu_map`): one loader, with libvirt's
//! load order and strictness (`cpuMapLoad` in `src/cpu/cpu_map.c`, `virCPUx86LoadMap` in
//! `src/cpu/cpu_x86.c`), and two views of what it loads:
//!
//! * [`x86::X86Map`]: libvirt's own view, every feature as CPUID and MSR bits, vendors, models
//!   in load order, for the cluster baseline (`virsh cpu-baseline`) and the CPU comparison
//!   (`virsh hypervisor-cpu-compare`), which libvirt computes on bits;
//! * [`CpuMap`]: which features each model has, by name, all a rewrite needs; read whole from an
//!   [`x86::X86Map`], or one model and its ancestors at a time ([`CpuMap::load_models`]: the hook
//!   reads one or two model files at a guest start, not sixty), or from the copy of libvirt
//!   9.0's data built into the tool ([`CpuMap::builtin`]) on hosts without libvirt.
//!
//! Load order is libvirt's: the elements written inside `index.xml`'s `<arch name='x86'>`
//! first, then each `<include>` in document order (libvirt 11 wraps them in `<group>`
//! elements), and within a file its vendors, then its features, then its models. A model may
//! only inherit from a model loaded before it (libvirt: "Ancestor model %s not found for CPU
//! model %s"). Every file is read as a regular file of at most 16 MiB, so a FIFO
//! or `/dev/zero` named as the cpu_map never hangs the hook.

mod names;
pub mod x86;

pub use names::{CpuMap, feature_names};

use std::path::{Component, Path, PathBuf};

/// libvirt's default cpu_map directory (Debian, Fedora, RHEL).
pub const DEFAULT_CPU_MAP: &str = "/usr/share/libvirt/cpu_map";

/// Why a cpu_map could not be loaded. Each message is one sentence naming the file concerned.
#[derive(Debug, thiserror::Error)]
pub enum CpuMapError {
    /// A file (`index.xml` or an included file) could not be read. The I/O error is part of
    /// the message.
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
    /// A file is XML but not a cpu_map libvirt loads: another root element, no `<arch
    /// name='x86'>` in `index.xml`, a missing `name` attribute, an unsafe include file name, a
    /// vendor, feature or model defined twice, a feature without CPUID or MSR data, a vendor
    /// string that is not 12 characters, a model naming an unknown vendor or feature. The
    /// message is libvirt's where it has one.
    #[error("cpu_map file {} is invalid: {message}", .path.display())]
    Invalid {
        /// The offending file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A model inherits from a model that is not loaded before it (libvirt: "Ancestor model %s
    /// not found for CPU model %s"), whether it comes later or nowhere.
    #[error(
        "cpu_map file {}: CPU model '{model}' inherits from unknown model '{parent}' (libvirt: \"Ancestor model {parent} not found for CPU model {model}\": a parent must be loaded before its child)",
        .path.display()
    )]
    UnknownParent {
        /// The file defining `model`.
        path: PathBuf,
        /// The model with the dangling parent reference.
        model: String,
        /// The parent name not loaded before it.
        parent: String,
    },
}

/// A `<feature>` of a model, as written in the model's `<model>` element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mark {
    /// Part of the model.
    Plain,
    /// `removed='yes'`: not part of the model's data; libvirt lists it `policy='disable'` in a
    /// guest CPU that does not mention it (`virCPUx86DisableRemovedFeatures`).
    Removed,
    /// `added='yes'` (libvirt 11's `vmx-*` features added to old models): libvirt 11.3 leaves
    /// it out of the model's data too.
    Added,
}

/// One `<model>` element as written, before inheritance: what both views take from it.
#[derive(Debug, Clone)]
pub(crate) struct ModelElement<'a> {
    /// `name`.
    pub(crate) name: &'a str,
    /// The first `<model name=...>` child: the ancestor (libvirt's `string(./model/@name)`).
    pub(crate) parent: Option<&'a str>,
    /// The first `<vendor name=...>` child.
    pub(crate) vendor: Option<&'a str>,
    /// `<decode host=...>`; cpu_maps older than libvirt 9.0 have no `<decode>`: every model
    /// was a candidate then.
    pub(crate) decode_host: bool,
    /// `<decode guest=...>`.
    pub(crate) decode_guest: bool,
    /// `<check partial=...>` (libvirt 11.3's cpu_map marks its older models `compat`).
    pub(crate) check_partial: Option<&'a str>,
    /// Its own `<feature>`s, in file order.
    pub(crate) features: Vec<(&'a str, Mark)>,
}

impl<'a> ModelElement<'a> {
    /// Reads the `<model>` element `node` of the file `path`.
    ///
    /// # Errors
    /// [`CpuMapError::Invalid`] for a `<model>`, `<vendor>` or `<feature>` without a name.
    pub(crate) fn read(path: &Path, node: roxmltree::Node<'a, '_>) -> Result<Self, CpuMapError> {
        let element = |tag: &str| node.children().find(|n| n.has_tag_name(tag));
        let (decode_host, decode_guest) = element("decode").map_or((true, true), |d| {
            (
                d.attribute("host") != Some("off"),
                d.attribute("guest") != Some("off"),
            )
        });
        let mut features = Vec::new();
        for f in node.children().filter(|n| n.has_tag_name("feature")) {
            let mark = if f.attribute("removed") == Some("yes") {
                Mark::Removed
            } else if f.attribute("added") == Some("yes") {
                Mark::Added
            } else {
                Mark::Plain
            };
            features.push((required_name(path, f)?, mark));
        }
        Ok(ModelElement {
            name: required_name(path, node)?,
            parent: element("model")
                .map(|p| required_name(path, p))
                .transpose()?,
            vendor: element("vendor")
                .map(|v| required_name(path, v))
                .transpose()?,
            decode_host,
            decode_guest,
            check_partial: element("check").and_then(|c| c.attribute("partial")),
            features,
        })
    }

    /// Its own features that are part of its data ([`Mark::Plain`]).
    pub(crate) fn plain_features(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.features
            .iter()
            .filter(|(_, m)| *m == Mark::Plain)
            .map(|(n, _)| *n)
    }
}

/// The elements of `index.xml`'s `<arch>`, in document order, with the children of libvirt 11's
/// `<group name='...'>` elements (which only gather includes) in place of each group.
pub(crate) fn arch_entries<'a, 'i>(arch: roxmltree::Node<'a, 'i>) -> Vec<roxmltree::Node<'a, 'i>> {
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

/// `index.xml`'s `<arch name='x86'>` element.
///
/// # Errors
/// [`CpuMapError::Invalid`] when there is none.
pub(crate) fn x86_arch<'a, 'i>(
    path: &Path,
    index: &'a roxmltree::Document<'i>,
) -> Result<roxmltree::Node<'a, 'i>, CpuMapError> {
    index
        .root_element()
        .children()
        .find(|n| n.has_tag_name("arch") && n.attribute("name") == Some("x86"))
        .ok_or_else(|| no_x86_arch(path))
}

/// Whether the text of an `index.xml` has an `<arch name='x86'>` start tag, found without
/// parsing (the hook's per-start path reads index.xml as text, [`CpuMap::load_models`]): an
/// index of another arch's data only lists no x86 model, and must not read as "unknown model".
pub(crate) fn lists_x86_arch(index_text: &str) -> bool {
    index_text.match_indices("<arch").any(|(at, _)| {
        let tag = &index_text[at + "<arch".len()..];
        let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
        tag.starts_with(|c: char| c.is_ascii_whitespace())
            && (tag.contains("name='x86'") || tag.contains("name=\"x86\""))
    })
}

/// [`CpuMapError::Invalid`] for an `index.xml` without x86 data, in libvirt's words
/// (`cpuMapLoad`: "cannot find CPU map for %s architecture").
pub(crate) fn no_x86_arch(path: &Path) -> CpuMapError {
    invalid(
        path,
        "it has no <arch name='x86'> element, no x86 data (libvirt: \"cannot find CPU map for x86 architecture\")"
            .to_owned(),
    )
}

/// Reads a whole `cpu_map` file: a regular file (a FIFO there would hang the hook) of at most
/// [`crate::readfile::MAX_FACT_BYTES`], UTF-8.
///
/// # Errors
/// [`CpuMapError::Read`].
pub(crate) fn read_file(path: &Path) -> Result<String, CpuMapError> {
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

/// Parses a `cpu_map` file's XML and checks that its root element is `<cpus>`.
///
/// # Errors
/// [`CpuMapError::Xml`], or [`CpuMapError::Invalid`] for another root element.
pub(crate) fn parse<'a>(
    path: &Path,
    text: &'a str,
) -> Result<roxmltree::Document<'a>, CpuMapError> {
    let doc = roxmltree::Document::parse(text).map_err(|e| CpuMapError::Xml {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    let root = doc.root_element().tag_name().name();
    if root != "cpus" {
        return Err(invalid(
            path,
            format!("its root element is <{root}>, expected <cpus>"),
        ));
    }
    Ok(doc)
}

/// The `name` attribute of `node`, or an [`CpuMapError::Invalid`] error.
pub(crate) fn required_name<'a>(
    path: &Path,
    node: roxmltree::Node<'a, '_>,
) -> Result<&'a str, CpuMapError> {
    node.attribute("name").ok_or_else(|| {
        invalid(
            path,
            format!(
                "a <{}> element has no name attribute",
                node.tag_name().name()
            ),
        )
    })
}

/// The path of an `<include filename='…'/>`: a plain file name inside `dir`.
pub(crate) fn include_path(
    dir: &Path,
    index_path: &Path,
    node: roxmltree::Node<'_, '_>,
) -> Result<PathBuf, CpuMapError> {
    let filename = node.attribute("filename").ok_or_else(|| {
        invalid(
            index_path,
            "an <include> element has no filename attribute".to_owned(),
        )
    })?;
    let mut components = Path::new(filename).components();
    match (components.next(), components.next()) {
        (Some(Component::Normal(_)), None) => Ok(dir.join(filename)),
        _ => Err(invalid(
            index_path,
            format!(
                "<include filename='{filename}'/> is not a plain file name in the cpu_map directory"
            ),
        )),
    }
}

/// [`CpuMapError::Invalid`] for `path`.
pub(crate) fn invalid(path: &Path, message: String) -> CpuMapError {
    CpuMapError::Invalid {
        path: path.to_owned(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::lists_x86_arch;

    #[test]
    fn an_index_lists_x86_data_only_in_an_x86_arch_start_tag() {
        for yes in [
            "<cpus>\n  <arch name='x86'>\n",
            "<cpus><arch  name=\"x86\"><include filename='x86_Nehalem.xml'/></arch></cpus>",
            "<cpus><arch name='arm'/><arch\tname='x86'></arch></cpus>",
        ] {
            assert!(lists_x86_arch(yes), "{yes}");
        }
        for no in [
            "",
            "<cpus",
            "<cpus><arch name='arm'><include filename='arm_a64fx.xml'/></arch></cpus>",
            "<cpus><arch name='x86_64'></arch></cpus>",
            "<cpus><architecture name='x86'/></cpus>",
            "<cpus><!-- name='x86' --><arch name='ppc64'/></cpus>",
        ] {
            assert!(!lists_x86_arch(no), "{no}");
        }
    }
}
