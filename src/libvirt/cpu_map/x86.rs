//! libvirt's x86 CPU map as libvirt's own CPU driver holds it: features as CPUID and MSR bits,
//! vendors, and models in the order libvirt loaded them.
//!
//! [`super::CpuMap`] answers "which features does model X have" and is all a rewrite needs. The
//! cluster baseline (`virsh cpu-baseline`) and the comparison of a guest CPU with a host
//! (`virsh hypervisor-cpu-compare`) need more, because libvirt computes them on CPUID data, not on
//! names: it intersects the hosts' data bit by bit, walks the models newest first
//! (`x86Decode` in libvirt's `src/cpu/cpu_x86.c`), skips models whose `<decode guest='off'/>` or
//! whose vendor differs, and turns the data left over back into feature names in the order of
//! `x86_features.xml`. [`X86Map`] keeps exactly that: every feature's bits, the vendors, and every
//! model's vendor, decode flags, data and `removed='yes'` features, in load order.
//!
//! Load order and strictness are libvirt's ([`super`]).

use super::{
    CpuMapError, Mark, ModelElement, arch_entries, include_path, invalid, parse, read_file,
    x86_arch,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

mod decode;
mod signature;

pub use decode::{DecodeFor, FeatureList, HostDecodeError};
pub use signature::X86Signature;
use signature::signatures;

/// A set of CPUID/MSR bits of one [`X86Map`] (libvirt's `virCPUx86Data`), as a bit set over the
/// bits the map's features use. Every value made by one map has the same length; mixing the data
/// of two maps is a logic error (the sets would not line up) and is never done.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct CpuData {
    words: Vec<u64>,
}

impl CpuData {
    /// An empty set sized for `nbits` bits.
    fn empty(nbits: usize) -> CpuData {
        CpuData {
            words: vec![0; nbits.div_ceil(64)],
        }
    }

    fn set(&mut self, bit: u32) {
        self.words[bit as usize / 64] |= 1 << (bit % 64);
    }

    /// Whether no bit is set (libvirt's `x86DataIsEmpty`).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    /// Adds every bit of `other` (libvirt's `x86DataAdd`).
    pub fn add(&mut self, other: &CpuData) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
    }

    /// Keeps only the bits `other` also has (libvirt's `x86DataIntersect`).
    pub fn intersect(&mut self, other: &CpuData) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a &= b;
        }
    }

    /// Removes every bit of `other` (libvirt's `x86DataSubtract`).
    pub fn subtract(&mut self, other: &CpuData) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a &= !b;
        }
    }

    /// `self` minus `other`, as a new set.
    #[must_use]
    pub fn minus(&self, other: &CpuData) -> CpuData {
        let mut d = self.clone();
        d.subtract(other);
        d
    }

    /// Whether every bit of `other` is in `self` (libvirt's `x86DataIsSubset(self, other)`).
    #[must_use]
    pub fn contains(&self, other: &CpuData) -> bool {
        self.words
            .iter()
            .zip(&other.words)
            .all(|(a, b)| a & b == *b)
    }
}

/// One `<feature>` of `x86_features.xml`.
#[derive(Debug, Clone)]
pub struct X86Feature {
    /// libvirt's name (`pni`, `sse4.2`, `tsc-deadline`...).
    pub name: String,
    /// Its CPUID/MSR bits.
    pub data: CpuData,
    /// False for `migratable='no'` (`invtsc`, `xsaves` in libvirt 9.0): libvirt drops such
    /// features from a baseline asked with `--migratable` (`x86FeatureIsMigratable`).
    pub migratable: bool,
    /// The MSR index of an `<msr>` feature (`0x10a`, `IA32_ARCH_CAPABILITIES`, for `rdctl-no`,
    /// `mds-no`...); None for a CPUID one.
    pub msr: Option<u32>,
}

/// One `<model>` of the map.
#[derive(Debug, Clone)]
pub struct X86Model {
    /// The model's name (`Haswell`, `Haswell-v2`, `EPYC-Rome`...).
    pub name: String,
    /// `<vendor name=...>`, own or inherited; None for vendor-neutral models (`qemu64`, `486`...).
    pub vendor: Option<String>,
    /// `<decode host=...>`: whether libvirt may name a host CPU after this model.
    pub decode_host: bool,
    /// `<decode guest=...>`: whether libvirt may pick this model for a guest CPU, such as a
    /// baseline (libvirt 11's versioned aliases such as `Haswell-v2` are `guest='off'`).
    pub decode_guest: bool,
    /// Its own `<check partial=...>`, not inherited: libvirt 11.3's cpu_map marks its older
    /// models `compat` (their `check='partial'` compares with the host's own CPU, as before);
    /// a model without it (versioned aliases such as `Icelake-Server-v2`, `Denverton`) is
    /// compared with what KVM gives (`src/validate/kvm.rs`). None in older cpu_maps.
    pub check_partial: Option<String>,
    /// Its CPUID bits: the ancestor's plus its own features, without `removed='yes'` ones and
    /// without libvirt 11's `added='yes'` ones (see [`X86Model::added`]).
    pub data: CpuData,
    /// The names of the features `data` is made of: the ancestor's plus its own, as written
    /// (what [`super::CpuMap`] says the model has).
    pub feature_names: Vec<String>,
    /// Its own `removed='yes'` features, in file order: libvirt lists them as
    /// `policy='disable'` in a guest CPU that does not mention them
    /// (`virCPUx86DisableRemovedFeatures`). Not inherited, as in libvirt.
    pub removed: Vec<String>,
    /// Its own `added='yes'` features (libvirt 11 marks the `vmx-*` features it added to old
    /// models so): libvirt 11.3 leaves them out of the model's data, so a baseline or a compare
    /// treats them as features beyond the model (seen: `virsh cpu-baseline` of a host `Penryn`
    /// plus `vmx-activity-hlt` requires `vmx-activity-hlt`).
    pub added: Vec<String>,
    /// Its `<signature>`s, own or inherited (a model's own replace its ancestor's, as libvirt's
    /// `x86ModelParseSignatures` does): the CPUs it is named after. Decoding a host CPU prefers
    /// a model whose signature is the CPU's (`x86DecodeUseCandidate`).
    pub signatures: Vec<X86Signature>,
}

/// libvirt's x86 CPU map, loaded from a `cpu_map` directory (see the module docs).
#[derive(Debug, Clone)]
pub struct X86Map {
    source: PathBuf,
    nbits: usize,
    features: Vec<X86Feature>,
    feature_index: HashMap<String, usize>,
    /// Vendor names with their CPUID leaf 0 registers (ebx, edx, ecx), in load order.
    vendors: Vec<(String, [u32; 3])>,
    models: Vec<X86Model>,
    model_index: HashMap<String, usize>,
    /// Every CPUID/MSR bit a feature uses, with its number in [`CpuData`].
    bit_index: HashMap<BitKey, u32>,
}

/// Where a CPUID or MSR bit lives: (0 = CPUID / 1 = MSR, leaf or MSR index, sub-leaf, register
/// 0..=3 for eax/ebx/ecx/edx, bit 0..=31).
type BitKey = (u8, u32, u32, u8, u8);

/// The map being built: bit numbering plus what is loaded so far.
struct Loader {
    bits: HashMap<BitKey, u32>,
    features: Vec<(String, Vec<u32>, bool, Option<u32>)>,
    feature_index: HashMap<String, usize>,
    vendors: Vec<(String, [u32; 3])>,
    models: Vec<RawModel>,
    model_index: HashMap<String, usize>,
}

/// A model before the bit sets are sized: its bits as a list.
struct RawModel {
    name: String,
    vendor: Option<String>,
    decode_host: bool,
    decode_guest: bool,
    check_partial: Option<String>,
    bits: Vec<u32>,
    names: Vec<String>,
    removed: Vec<String>,
    added: Vec<String>,
    signatures: Vec<X86Signature>,
}

impl X86Map {
    /// Loads the x86 part of libvirt's `cpu_map` directory (e.g. `/usr/share/libvirt/cpu_map`),
    /// as libvirt's `virCPUx86LoadMap` does.
    ///
    /// # Errors
    /// [`CpuMapError::Read`] / [`CpuMapError::Xml`] for a file that cannot be read or parsed;
    /// [`CpuMapError::Invalid`] for what libvirt also refuses: an `index.xml` without
    /// `<arch name='x86'>`, a vendor, feature or model defined twice, a feature without CPUID
    /// or MSR data ("no x86 CPU data found"), a vendor string that is not 12 characters, a model
    /// naming an unknown vendor or feature ("Feature %s required by CPU model %s not found");
    /// [`CpuMapError::UnknownParent`] for a model whose ancestor is not loaded before it.
    pub fn load(dir: &Path) -> Result<X86Map, CpuMapError> {
        let index_path = dir.join("index.xml");
        let index_text = read_file(&index_path)?;
        let index = parse(&index_path, &index_text)?;
        let mut loader = Loader {
            bits: HashMap::new(),
            features: Vec::new(),
            feature_index: HashMap::new(),
            vendors: Vec::new(),
            models: Vec::new(),
            model_index: HashMap::new(),
        };
        let arch = x86_arch(&index_path, &index)?;
        loader.load_elements(&index_path, arch)?;
        for include in arch_entries(arch)
            .into_iter()
            .filter(|n| n.has_tag_name("include"))
        {
            let path = include_path(dir, &index_path, include)?;
            let text = read_file(&path)?;
            let doc = parse(&path, &text)?;
            loader.load_elements(&path, doc.root_element())?;
        }
        Ok(loader.finish(dir))
    }

    /// The directory the map was loaded from.
    #[must_use]
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// Every feature, in `x86_features.xml` order (the order libvirt lists features in).
    #[must_use]
    pub fn features(&self) -> &[X86Feature] {
        &self.features
    }

    /// The feature named `name` (exact libvirt name, no aliases: libvirt's `x86FeatureFind`).
    #[must_use]
    pub fn feature(&self, name: &str) -> Option<&X86Feature> {
        self.feature_index.get(name).map(|i| &self.features[*i])
    }

    /// Every model, in load order (libvirt walks them from the last: newest first).
    #[must_use]
    pub fn models(&self) -> &[X86Model] {
        &self.models
    }

    /// The model named `name` (case-sensitive, as libvirt's `x86ModelFind`).
    #[must_use]
    pub fn model(&self, name: &str) -> Option<&X86Model> {
        self.model_index.get(name).map(|i| &self.models[*i])
    }

    /// Whether libvirt compares a guest CPU of model `name` under `check='partial'` with what
    /// KVM gives rather than with the host's own CPU: the map marks models `<check
    /// partial='compat'/>` (libvirt 11.3 and later) and this one is not so marked (see
    /// [`X86Model::check_partial`]). False for a model the map lacks, and for every model of an
    /// older map.
    #[must_use]
    pub fn partial_check_against_kvm(&self, name: &str) -> bool {
        let marks = self.models.iter().any(|m| m.check_partial.is_some());
        marks
            && self
                .model(name)
                .is_some_and(|m| m.check_partial.as_deref() != Some("compat"))
    }

    /// Whether `name` is a vendor of the map (`Intel`, `AMD`, `Hygon`...).
    #[must_use]
    pub fn has_vendor(&self, name: &str) -> bool {
        self.vendors.iter().any(|(v, _)| v == name)
    }

    /// An empty data set of this map.
    #[must_use]
    pub fn empty_data(&self) -> CpuData {
        CpuData::empty(self.nbits)
    }

    /// The names of the features whose bits are all in `data`, in map order, each bit counted
    /// once: a feature found takes its bits out of what later features may match (libvirt's
    /// `x86DataToCPUFeatures`). With one bit per feature, as in every libvirt release seen, this
    /// is simply every feature of `data`.
    #[must_use]
    pub fn decode_features(&self, data: &CpuData) -> Vec<&str> {
        let mut left = data.clone();
        let mut names = Vec::new();
        for f in &self.features {
            if left.contains(&f.data) {
                left.subtract(&f.data);
                names.push(f.name.as_str());
            }
        }
        names
    }

    /// The names of the features whose bits are all in `data`, in map order, without taking
    /// bits out (libvirt's `x86FeatureNames`, used in its compare messages).
    #[must_use]
    pub fn feature_names(&self, data: &CpuData) -> Vec<&str> {
        self.features
            .iter()
            .filter(|f| data.contains(&f.data))
            .map(|f| f.name.as_str())
            .collect()
    }

    /// Whether `data` has every bit of the feature `name`; false for a name the map lacks.
    #[must_use]
    pub fn has_feature(&self, data: &CpuData, name: &str) -> bool {
        self.feature(name).is_some_and(|f| data.contains(&f.data))
    }
}

impl Loader {
    /// Loads the `<vendor>`, `<feature>` and `<model>` children of `node`, in that order.
    fn load_elements(
        &mut self,
        path: &Path,
        node: roxmltree::Node<'_, '_>,
    ) -> Result<(), CpuMapError> {
        let kids = |tag: &'static str| node.children().filter(move |n| n.has_tag_name(tag));
        for v in kids("vendor") {
            self.vendor(path, v)?;
        }
        for f in kids("feature") {
            self.feature(path, f)?;
        }
        for m in kids("model") {
            self.model(path, m)?;
        }
        Ok(())
    }

    fn vendor(&mut self, path: &Path, node: roxmltree::Node<'_, '_>) -> Result<(), CpuMapError> {
        let name = super::required_name(path, node)?;
        if self.vendors.iter().any(|(v, _)| v == name) {
            return Err(invalid(path, format!("CPU vendor {name} already defined")));
        }
        let string = match node.attribute("string") {
            Some(s) if s.len() == 12 => s.as_bytes(),
            Some(s) => return Err(invalid(path, format!("Invalid CPU vendor string '{s}'"))),
            None => {
                return Err(invalid(
                    path,
                    format!("Missing vendor string for CPU vendor {name}"),
                ));
            }
        };
        // CPUID leaf 0 gives the string in ebx, edx, ecx, four bytes each, little-endian
        // (libvirt's `virCPUx86VendorToData`).
        let reg =
            |i: usize| u32::from_le_bytes([string[i], string[i + 1], string[i + 2], string[i + 3]]);
        self.vendors
            .push((name.to_owned(), [reg(0), reg(4), reg(8)]));
        Ok(())
    }

    fn feature(&mut self, path: &Path, node: roxmltree::Node<'_, '_>) -> Result<(), CpuMapError> {
        let name = super::required_name(path, node)?;
        if self.feature_index.contains_key(name) {
            return Err(invalid(path, format!("CPU feature {name} already defined")));
        }
        let mut bits = Vec::new();
        let mut items = 0;
        let mut msr = None;
        for item in node.children().filter(roxmltree::Node::is_element) {
            let (kind, regs): (u8, &[&str]) = match item.tag_name().name() {
                "alias" => continue,
                "cpuid" => (0, &["eax", "ebx", "ecx", "edx"]),
                "msr" => (1, &["eax", "", "", "edx"]),
                other => {
                    return Err(invalid(
                        path,
                        format!("feature {name} has an unknown <{other}> element"),
                    ));
                }
            };
            items += 1;
            let (leaf, sub) = if kind == 0 {
                (
                    attr_u32(path, item, "eax_in")?,
                    opt_u32(path, item, "ecx_in")?,
                )
            } else {
                let index = attr_u32(path, item, "index")?;
                msr = Some(index);
                (index, 0)
            };
            for (reg, attr) in regs.iter().enumerate().filter(|(_, a)| !a.is_empty()) {
                let value = opt_u32(path, item, attr)?;
                for bit in (0..32u8).filter(|b| value & (1 << b) != 0) {
                    let next = u32::try_from(self.bits.len()).unwrap_or(u32::MAX);
                    let key = (kind, leaf, sub, u8::try_from(reg).unwrap_or(0), bit);
                    bits.push(*self.bits.entry(key).or_insert(next));
                }
            }
        }
        if items == 0 {
            return Err(invalid(
                path,
                format!("feature {name}: no x86 CPU data found"),
            ));
        }
        let migratable = node.attribute("migratable") != Some("no");
        self.feature_index
            .insert(name.to_owned(), self.features.len());
        self.features.push((name.to_owned(), bits, migratable, msr));
        Ok(())
    }

    fn model(&mut self, path: &Path, node: roxmltree::Node<'_, '_>) -> Result<(), CpuMapError> {
        let element = ModelElement::read(path, node)?;
        let name = element.name;
        if self.model_index.contains_key(name) {
            return Err(invalid(
                path,
                format!("Multiple definitions of CPU model '{name}'"),
            ));
        }
        let mut model = RawModel {
            name: name.to_owned(),
            vendor: None,
            decode_host: element.decode_host,
            decode_guest: element.decode_guest,
            check_partial: element.check_partial.map(str::to_owned),
            bits: Vec::new(),
            names: Vec::new(),
            removed: Vec::new(),
            added: Vec::new(),
            signatures: Vec::new(),
        };
        if let Some(parent) = element.parent {
            let Some(ancestor) = self.model_index.get(parent).map(|i| &self.models[*i]) else {
                return Err(CpuMapError::UnknownParent {
                    path: path.to_owned(),
                    model: name.to_owned(),
                    parent: parent.to_owned(),
                });
            };
            model.vendor.clone_from(&ancestor.vendor);
            model.bits.clone_from(&ancestor.bits);
            model.names.clone_from(&ancestor.names);
            model.signatures.clone_from(&ancestor.signatures);
        }
        let own = signatures(path, name, node)?;
        if !own.is_empty() {
            model.signatures = own;
        }
        if let Some(vendor) = element.vendor {
            if !self.vendors.iter().any(|(v, _)| v == vendor) {
                return Err(invalid(
                    path,
                    format!("Unknown vendor {vendor} referenced by CPU model {name}"),
                ));
            }
            model.vendor = Some(vendor.to_owned());
        }
        for (fname, mark) in &element.features {
            let Some(i) = self.feature_index.get(*fname) else {
                return Err(invalid(
                    path,
                    format!("Feature {fname} required by CPU model {name} not found"),
                ));
            };
            match mark {
                Mark::Removed => model.removed.push((*fname).to_owned()),
                Mark::Added => model.added.push((*fname).to_owned()),
                Mark::Plain => {
                    model.bits.extend_from_slice(&self.features[*i].1);
                    if !model.names.iter().any(|n| n == fname) {
                        model.names.push((*fname).to_owned());
                    }
                }
            }
        }
        self.model_index.insert(name.to_owned(), self.models.len());
        self.models.push(model);
        Ok(())
    }

    /// Sizes every bit set now that the number of bits is known.
    fn finish(self, dir: &Path) -> X86Map {
        let nbits = self.bits.len();
        let data = |bits: &[u32]| {
            let mut d = CpuData::empty(nbits);
            for b in bits {
                d.set(*b);
            }
            d
        };
        X86Map {
            source: dir.to_owned(),
            nbits,
            features: self
                .features
                .iter()
                .map(|(name, bits, migratable, msr)| X86Feature {
                    name: name.clone(),
                    data: data(bits),
                    migratable: *migratable,
                    msr: *msr,
                })
                .collect(),
            feature_index: self.feature_index,
            vendors: self.vendors,
            models: self
                .models
                .iter()
                .map(|m| X86Model {
                    name: m.name.clone(),
                    vendor: m.vendor.clone(),
                    decode_host: m.decode_host,
                    decode_guest: m.decode_guest,
                    check_partial: m.check_partial.clone(),
                    data: data(&m.bits),
                    feature_names: m.names.clone(),
                    removed: m.removed.clone(),
                    added: m.added.clone(),
                    signatures: m.signatures.clone(),
                })
                .collect(),
            model_index: self.model_index,
            bit_index: self.bits,
        }
    }
}

/// A required unsigned attribute, read as libvirt's `virXMLPropUInt` with base 0 does
/// (`0x` hexadecimal, a leading `0` octal, else decimal).
pub(super) fn attr_u32(
    path: &Path,
    node: roxmltree::Node<'_, '_>,
    name: &str,
) -> Result<u32, CpuMapError> {
    let value = node.attribute(name).ok_or_else(|| {
        invalid(
            path,
            format!("<{}> lacks its {name} attribute", node.tag_name().name()),
        )
    })?;
    let parsed = if let Some(hex) = value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
    {
        u32::from_str_radix(hex, 16)
    } else if value.len() > 1 && value.starts_with('0') {
        u32::from_str_radix(&value[1..], 8)
    } else {
        value.parse()
    };
    parsed.map_err(|_| {
        invalid(
            path,
            format!(
                "<{} {name}='{value}'> is not an unsigned number",
                node.tag_name().name()
            ),
        )
    })
}

/// An optional unsigned attribute (0 when absent).
fn opt_u32(path: &Path, node: roxmltree::Node<'_, '_>, name: &str) -> Result<u32, CpuMapError> {
    if node.attribute(name).is_some() {
        attr_u32(path, node, name)
    } else {
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libvirt_9_0_models_decode_to_their_feature_names() {
        let dir = crate::testdata::cpu_map();
        let map = X86Map::load(&dir).expect("load libvirt 9.0's cpu_map");
        assert_eq!(map.models().len(), 58);
        for m in map.models() {
            let mut decoded: Vec<&str> = map.decode_features(&m.data);
            decoded.sort_unstable();
            let mut by_name: Vec<&str> = m.feature_names.iter().map(String::as_str).collect();
            by_name.sort_unstable();
            assert_eq!(decoded, by_name, "{}", m.name);
        }
        assert!(!map.feature("invtsc").unwrap().migratable);
        assert!(map.feature("sse2").unwrap().migratable);
        assert_eq!(
            map.model("Haswell").unwrap().vendor.as_deref(),
            Some("Intel")
        );
        assert_eq!(map.model("qemu64").unwrap().vendor, None);
        assert!(!map.model("cpu64-rhel6").unwrap().decode_guest);
        assert_eq!(map.model("EPYC").unwrap().removed, ["monitor"]);
        assert!(map.has_vendor("Hygon"));
        // Index order: 486 is loaded first, so libvirt considers it last.
        assert_eq!(map.models()[0].name, "486");
    }

    fn write(dir: &Path, files: &[(&str, &str)]) {
        std::fs::create_dir_all(dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
    }

    const INDEX: &str = "<cpus><arch name='x86'><vendor name='Inline' string='InlineVendor'/>\
        <include filename='x86_vendors.xml'/><include filename='x86_features.xml'/>\
        <group name='libvirt 11 groups'><include filename='x86_models.xml'/></group></arch></cpus>";
    const FEATURES: &str = "<cpus>\
        <feature name='a'><cpuid eax_in='0x01' edx='0x00000001'/></feature>\
        <feature name='b'><alias name='bee'/><cpuid eax_in='0x07' ecx_in='0x00' ebx='0x8'/></feature>\
        <feature name='c' migratable='no'><msr index='0x10a' edx='0' eax='0x2'/></feature>\
        <feature name='ab'><cpuid eax_in='0x01' edx='0x00000001'/><cpuid eax_in='7' ebx='8'/></feature>\
        </cpus>";

    #[test]
    fn bits_order_inheritance_and_errors() {
        let dir = std::env::temp_dir().join(format!("vcp-x86map-{}", std::process::id()));
        let models = "<cpus><model name='Base'><decode host='on' guest='on'/><vendor name='Intel'/>\
            <feature name='a'/><feature name='c' removed='yes'/><feature name='ab' added='yes'/></model>\
            <model name='Base-v1'><decode host='on' guest='off'/><model name='Base'/><feature name='b'/></model></cpus>";
        write(
            &dir,
            &[
                ("index.xml", INDEX),
                (
                    "x86_vendors.xml",
                    "<cpus><vendor name='Intel' string='GenuineIntel'/></cpus>",
                ),
                ("x86_features.xml", FEATURES),
                ("x86_models.xml", models),
            ],
        );
        let map = X86Map::load(&dir).unwrap();
        assert!(map.has_vendor("Inline") && map.has_vendor("Intel"));
        let v1 = map.model("Base-v1").unwrap();
        assert_eq!(v1.vendor.as_deref(), Some("Intel"));
        assert!(v1.removed.is_empty(), "removed features are not inherited");
        assert_eq!(map.model("Base").unwrap().added, ["ab"]);
        assert!(!map.has_feature(&map.model("Base").unwrap().data, "ab"));
        assert!(!v1.decode_guest && v1.decode_host);
        assert_eq!(map.decode_features(&v1.data), ["a", "b"]);
        // `ab` shares a's and b's bits: it is a name, but decoding takes bits once, in map order.
        assert_eq!(map.feature_names(&v1.data), ["a", "b", "ab"]);
        assert!(map.has_feature(&v1.data, "ab") && !map.has_feature(&v1.data, "c"));
        assert!(!map.has_feature(&v1.data, "nope"));

        for (models, needle) in [
            (
                "<cpus><model name='X'><model name='Later'/></model><model name='Later'/></cpus>",
                "Later",
            ),
            (
                "<cpus><model name='X'><feature name='zz'/></model></cpus>",
                "Feature zz required by CPU model X not found",
            ),
            (
                "<cpus><model name='X'><vendor name='Zhaoxin'/></model></cpus>",
                "Unknown vendor Zhaoxin",
            ),
            (
                "<cpus><model name='X'/><model name='X'/></cpus>",
                "Multiple definitions of CPU model 'X'",
            ),
        ] {
            write(&dir, &[("x86_models.xml", models)]);
            let err = X86Map::load(&dir).unwrap_err().to_string();
            assert!(err.contains(needle), "{err}");
            assert!(err.contains("x86_models.xml"), "{err}");
        }
        write(
            &dir,
            &[
                ("x86_models.xml", "<cpus/>"),
                ("x86_features.xml", "<cpus><feature name='e'/></cpus>"),
            ],
        );
        let err = X86Map::load(&dir).unwrap_err().to_string();
        assert!(err.contains("no x86 CPU data found"), "{err}");
        write(
            &dir,
            &[(
                "x86_features.xml",
                "<cpus><feature name='e'><cpuid eax_in='zz'/></feature></cpus>",
            )],
        );
        let err = X86Map::load(&dir).unwrap_err().to_string();
        assert!(err.contains("eax_in='zz'"), "{err}");
        write(
            &dir,
            &[
                ("x86_features.xml", FEATURES),
                (
                    "x86_vendors.xml",
                    "<cpus><vendor name='Intel' string='Intel'/></cpus>",
                ),
            ],
        );
        let err = X86Map::load(&dir).unwrap_err().to_string();
        assert!(err.contains("Invalid CPU vendor string 'Intel'"), "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn deeply_nested_groups_do_not_exhaust_the_stack() {
        let dir = std::env::temp_dir().join(format!("vcp-x86map-deep-{}", std::process::id()));
        let depth = 100_000;
        let index = format!(
            "<cpus><arch name='x86'>{}<include filename='x86_features.xml'/>{}</arch></cpus>",
            "<group>".repeat(depth),
            "</group>".repeat(depth)
        );
        write(
            &dir,
            &[("index.xml", &index), ("x86_features.xml", FEATURES)],
        );
        let map = X86Map::load(&dir).unwrap();
        assert_eq!(map.features().len(), 4);
        std::fs::remove_dir_all(&dir).ok();
    }
}
