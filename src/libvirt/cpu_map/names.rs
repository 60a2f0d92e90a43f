//! Which features each x86 model of a cpu_map has, by name: what a rewrite and its validation
//! need (is `popcnt` in `Nehalem`?), from the one loader of [`super`].

use super::x86::X86Map;
use super::{
    CpuMapError, ModelElement, invalid, lists_x86_arch, no_x86_arch, parse, read_file, x86_arch,
};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;
use std::sync::OnceLock;

/// The features of libvirt's x86 CPU models, by name.
///
/// A model's features are its ancestor's plus its own `<feature name='…'/>` entries, minus those
/// marked `removed='yes'` (libvirt keeps those only to disable them explicitly; they are not part
/// of the model's CPUID data) and `added='yes'` (libvirt 11's `vmx-*` additions to old models,
/// which libvirt 11.3 leaves out of the model's data too). Feature names are libvirt spellings.
#[derive(Debug, Clone)]
pub struct CpuMap {
    /// Directory path, or `"built-in"`.
    source: String,
    /// Model name -> resolved features.
    models: BTreeMap<String, BTreeSet<String>>,
}

/// The built-in model table: `Name: feature feature …` lines (kept beside the feature-name table
/// it is generated with, `src/cpu/x86_features.txt`).
const BUILTIN_X86: &str = include_str!("../../cpu/builtin_x86.txt");

/// Non-empty, non-comment (`#`) lines of an embedded data file.
fn data_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
}

impl CpuMap {
    /// Loads every x86 model of libvirt's `cpu_map` directory (e.g.
    /// `/usr/share/libvirt/cpu_map`) as libvirt does ([`X86Map::load`]).
    ///
    /// # Errors
    /// As [`X86Map::load`].
    pub fn load(dir: &Path) -> Result<CpuMap, CpuMapError> {
        Ok(CpuMap::of(&X86Map::load(dir)?))
    }

    /// The models of a loaded map, by name.
    #[must_use]
    pub fn of(map: &X86Map) -> CpuMap {
        CpuMap {
            source: map.source().display().to_string(),
            models: map
                .models()
                .iter()
                .map(|m| (m.name.clone(), m.feature_names.iter().cloned().collect()))
                .collect(),
        }
    }

    /// Loads only `names` (and the ancestors they inherit from) from a `cpu_map` directory:
    /// reads `index.xml` and the files `x86_NAME.xml` that its x86 `<include>`s list, the layout
    /// every libvirt release uses. A name whose file is not listed is simply absent from the
    /// result (an unknown model). This is what a single rewrite needs: one or two model files
    /// instead of the sixty [`CpuMap::load`] reads; the hook does it at every guest start.
    ///
    /// The files read are held to [`CpuMap::load`]'s rules: each model is read by the same
    /// element reader, defined once, and inherits only from a model loaded before it (its file
    /// listed earlier in `index.xml`, or earlier in the same file). Whether each feature exists
    /// is only known to a whole load (it needs `x86_features.xml`).
    ///
    /// # Errors
    /// As [`CpuMap::load`], for the files it reads.
    pub fn load_models(dir: &Path, names: &[&str]) -> Result<CpuMap, CpuMapError> {
        // index.xml is searched for the include lines (every libvirt release writes them as
        // `<include filename='x86_NAME.xml'/>`), not parsed: this runs on every guest start.
        let index_path = dir.join("index.xml");
        let index_text = read_file(&index_path)?;
        if !lists_x86_arch(&index_text) {
            return Err(no_x86_arch(&index_path));
        }
        let listed_at = |file: &str| {
            index_text
                .find(&format!("filename='{file}'"))
                .or_else(|| index_text.find(&format!("filename=\"{file}\"")))
        };
        let mut models = BTreeMap::new();
        for name in names {
            let mut seen = Vec::new();
            if let Some((features, _)) = inherit(dir, name, &listed_at, &mut seen)? {
                models.insert((*name).to_owned(), features);
            }
        }
        Ok(CpuMap {
            source: dir.display().to_string(),
            models,
        })
    }

    /// A built-in copy of the x86 model features, for hosts without libvirt's `cpu_map`.
    ///
    /// Generated from libvirt 9.0.0's `cpu_map` (Debian 12 package `libvirt-daemon` 9.0.0) with
    /// [`CpuMap::load`]; stored in `src/cpu/builtin_x86.txt`, whose header says how to regenerate
    /// it. [`CpuMap::source`] is `"built-in"`.
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

    /// Resolved feature set of `model` (libvirt spellings, inherited features included), or
    /// `None` if the model is unknown. Model names are case-sensitive, as in libvirt
    /// (`Haswell`, `qemu64`).
    #[must_use]
    pub fn model_features(&self, model: &str) -> Option<&BTreeSet<String>> {
        self.models.get(model)
    }

    /// Where this map came from: the `cpu_map` directory path as given, or `"built-in"`.
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

/// Where a model was read: its file's position in `index.xml`, then its place in the file.
type LoadedAt = (usize, usize);

/// The features of `name` read from its own file `x86_NAME.xml`, its ancestors' first, and
/// where it was loaded; None when the file is not listed or does not define it. `seen` holds
/// the models being resolved: each model's ancestor must be loaded before it, so an ancestor
/// met again, or loaded later, is one libvirt would not have found.
fn inherit(
    dir: &Path,
    name: &str,
    listed_at: &dyn Fn(&str) -> Option<usize>,
    seen: &mut Vec<String>,
) -> Result<Option<(BTreeSet<String>, LoadedAt)>, CpuMapError> {
    let Some((own, at, path)) = read_own(dir, name, listed_at)? else {
        return Ok(None);
    };
    let mut features = BTreeSet::new();
    if let Some(parent) = &own.parent {
        seen.push(name.to_owned());
        let inherited = if seen.iter().any(|s| s == parent) {
            None
        } else {
            inherit(dir, parent, listed_at, seen)?.filter(|(_, p_at)| *p_at < at)
        };
        let Some((inherited, _)) = inherited else {
            return Err(CpuMapError::UnknownParent {
                path,
                model: name.to_owned(),
                parent: parent.clone(),
            });
        };
        features = inherited;
    }
    features.extend(own.features);
    Ok(Some((features, at)))
}

/// A model as its own file defines it: its ancestor and its own features.
struct OwnModel {
    parent: Option<String>,
    features: Vec<String>,
}

/// `name`'s definition in `x86_NAME.xml`, when `index.xml` lists that file and it defines the
/// model, with where it was loaded and the file.
///
/// # Errors
/// A file that cannot be read or parsed, a `<model>` without a name, a model defined twice in
/// the file.
fn read_own(
    dir: &Path,
    name: &str,
    listed_at: &dyn Fn(&str) -> Option<usize>,
) -> Result<Option<(OwnModel, LoadedAt, std::path::PathBuf)>, CpuMapError> {
    let file = format!("x86_{name}.xml");
    let Some(position) = listed_at(&file).filter(|_| !file.contains('/')) else {
        return Ok(None);
    };
    let path = dir.join(&file);
    let text = read_file(&path)?;
    let doc = parse(&path, &text)?;
    let mut found = None;
    let mut defined = HashSet::new();
    let models = doc
        .root_element()
        .children()
        .filter(|n| n.has_tag_name("model"));
    for (i, node) in models.enumerate() {
        let m = ModelElement::read(&path, node)?;
        if !defined.insert(m.name) {
            return Err(invalid(
                &path,
                format!("Multiple definitions of CPU model '{}'", m.name),
            ));
        }
        if m.name == name {
            let own = OwnModel {
                parent: m.parent.map(str::to_owned),
                features: m.plain_features().map(str::to_owned).collect(),
            };
            found = Some((own, (position, i), path.clone()));
        }
    }
    Ok(found)
}

/// The feature names libvirt's x86 cpu_map at `dir` defines, with their QEMU and Linux
/// `<alias>` names: every `<feature name>` and `<alias name>` of the files `index.xml`'s x86
/// arch includes whose name says features (`x86_features.xml`), as libvirt loads them.
///
/// # Errors
/// A file that cannot be read or parsed.
pub fn feature_names(dir: &Path) -> Result<HashSet<String>, CpuMapError> {
    let index_path = dir.join("index.xml");
    let index_text = read_file(&index_path)?;
    let index = parse(&index_path, &index_text)?;
    let arch = x86_arch(&index_path, &index)?;
    let mut names = HashSet::new();
    let includes = super::arch_entries(arch)
        .into_iter()
        .filter(|n| n.has_tag_name("include"))
        .filter(|n| {
            n.attribute("filename")
                .is_some_and(|f| f.contains("features"))
        });
    for include in includes {
        let path = super::include_path(dir, &index_path, include)?;
        let text = read_file(&path)?;
        let doc = parse(&path, &text)?;
        for feature in doc
            .root_element()
            .children()
            .filter(|n| n.has_tag_name("feature"))
        {
            names.insert(super::required_name(&path, feature)?.to_owned());
            for alias in feature.children().filter(|n| n.has_tag_name("alias")) {
                names.insert(super::required_name(&path, alias)?.to_owned());
            }
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A scratch directory removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(files: &[(&str, &str)]) -> TempDir {
            static COUNTER: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "virt-cpu-policy-cpu-map-test-{}-{}",
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
                         <include filename='x86_features.xml'/>\n    \
                         <include filename='x86_Base.xml'/>\n    <include filename='x86_Child.xml'/>\n  </arch>\n  \
                         <arch name='ppc64'><include filename='missing.xml'/></arch>\n</cpus>\n";
    const VENDORS: &str = "<cpus><vendor name='Intel' string='GenuineIntel'/></cpus>";
    const FEATURES: &str = "<cpus>\
        <feature name='fpu'><cpuid eax_in='0x01' edx='0x00000001'/></feature>\
        <feature name='monitor'><alias name='pni-monitor'/><cpuid eax_in='0x01' ecx='0x00000008'/></feature>\
        <feature name='sse2'><cpuid eax_in='0x01' edx='0x04000000'/></feature>\
        <feature name='avx'><cpuid eax_in='0x01' ecx='0x10000000'/></feature>\
        </cpus>";

    /// A cpu_map of `Base` (in `x86_Base.xml`) and `child` (in `x86_Child.xml`).
    fn map_of(base: &str, child: &str) -> TempDir {
        TempDir::new(&[
            ("index.xml", INDEX),
            ("x86_vendors.xml", VENDORS),
            ("x86_features.xml", FEATURES),
            ("x86_Base.xml", base),
            ("x86_Child.xml", child),
        ])
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn both_loads_resolve_inheritance_alike() {
        let base = "<cpus>\n  <!-- <model name='Ghost'><feature name='sse2'/></model> -->\n  \
                    <model name='Base'>\n    <vendor name='Intel'/>\n    <feature name='fpu'/>\n    \
                    <!-- <feature name='sse2'/> -->\n    <feature name='monitor' removed='yes'/>\n  </model>\n</cpus>\n";
        let child = "<cpus>\n  <model name='Child'>\n    <model name='Base'/>\n    <feature name='sse2'/>\n  \
                     </model>\n  <model name='Grandchild'><model name='Child'/><feature name='avx'/></model>\n</cpus>\n";
        let dir = map_of(base, child);
        let map = CpuMap::load(&dir.0).expect("load");
        assert_eq!(map.model_names(), ["Base", "Child", "Grandchild"]);
        assert_eq!(map.model_features("Base"), Some(&set(&["fpu"])));
        assert_eq!(map.model_features("Child"), Some(&set(&["fpu", "sse2"])));
        assert_eq!(
            map.model_features("Grandchild"),
            Some(&set(&["avx", "fpu", "sse2"]))
        );
        assert_eq!(map.model_features("Ghost"), None);
        assert_eq!(map.source(), dir.0.display().to_string());
        let one = CpuMap::load_models(&dir.0, &["Child", "Grandchild", "Ghost"]).unwrap();
        assert_eq!(one.model_features("Child"), map.model_features("Child"));
        // Grandchild is in Child's file, not one of its own: only a whole load finds it.
        assert_eq!(one.model_names(), ["Child"]);
        let names = feature_names(&dir.0).unwrap();
        assert!(names.contains("monitor") && names.contains("pni-monitor"));
        assert!(!names.contains("Base"));
    }

    /// libvirt's load order: a parent loaded after its child (or the child itself, or nothing)
    /// is "Ancestor model %s not found for CPU model %s", for the whole load and the partial one
    /// alike (the name-only loader used to resolve parents in any order, and found cycles).
    #[test]
    fn a_parent_must_be_loaded_before_its_child() {
        for (base, child, model, parent) in [
            (
                "<cpus><model name='Base'><model name='Child'/><feature name='fpu'/></model></cpus>",
                "<cpus><model name='Child'><feature name='sse2'/></model></cpus>",
                "Base",
                "Child",
            ),
            (
                "<cpus><model name='Base'><model name='Base'/></model></cpus>",
                "<cpus/>",
                "Base",
                "Base",
            ),
            (
                "<cpus><model name='Base'><feature name='fpu'/></model></cpus>",
                "<cpus><model name='Child'><model name='Nowhere'/></model></cpus>",
                "Child",
                "Nowhere",
            ),
        ] {
            let dir = map_of(base, child);
            for err in [
                CpuMap::load(&dir.0).unwrap_err(),
                CpuMap::load_models(&dir.0, &[model]).unwrap_err(),
            ] {
                assert!(
                    matches!(&err, CpuMapError::UnknownParent { model: m, parent: p, .. }
                        if m == model && p == parent),
                    "{err:?}"
                );
                let text = err.to_string();
                assert!(
                    text.contains(&format!("x86_{model}.xml"))
                        && text.contains(&format!(
                            "Ancestor model {parent} not found for CPU model {model}"
                        )),
                    "{text}"
                );
            }
        }
    }

    #[test]
    fn broken_files_are_refused_naming_the_file() {
        let good = "<cpus><model name='Base'><feature name='fpu'/></model></cpus>";
        let dir = map_of(
            "<cpus><model name='Base'><feature name='fpu'></model></cpus>",
            good,
        );
        let err = CpuMap::load(&dir.0).unwrap_err();
        assert!(matches!(&err, CpuMapError::Xml { .. }), "{err:?}");
        assert!(err.to_string().contains("x86_Base.xml"), "{err}");

        let missing = TempDir::new(&[("index.xml", INDEX), ("x86_vendors.xml", VENDORS)]);
        let err = CpuMap::load(&missing.0).unwrap_err();
        assert!(matches!(&err, CpuMapError::Read { .. }), "{err:?}");
        assert!(err.to_string().contains("x86_features.xml"), "{err}");

        let empty = TempDir::new(&[]);
        let err = CpuMap::load(&empty.0).unwrap_err();
        assert!(err.to_string().contains("index.xml"), "{err}");

        let no_x86 = TempDir::new(&[("index.xml", "<cpus><arch name='ppc64'/></cpus>")]);
        let err = CpuMap::load(&no_x86.0).unwrap_err();
        assert!(matches!(&err, CpuMapError::Invalid { .. }), "{err:?}");
        // The hook's per-start reader says the same, not "no such model".
        let one = CpuMap::load_models(&no_x86.0, &["Nehalem"]).unwrap_err();
        assert_eq!(one.to_string(), err.to_string());
        assert!(
            err.to_string()
                .contains("cannot find CPU map for x86 architecture"),
            "{err}"
        );

        let escape = TempDir::new(&[(
            "index.xml",
            "<cpus><arch name='x86'><include filename='../etc/passwd'/></arch></cpus>",
        )]);
        let err = CpuMap::load(&escape.0).unwrap_err();
        assert!(matches!(&err, CpuMapError::Invalid { .. }), "{err:?}");

        let twice = map_of(good, good);
        let err = CpuMap::load(&twice.0).unwrap_err();
        assert!(
            err.to_string()
                .contains("Multiple definitions of CPU model 'Base'"),
            "{err}"
        );
        let twice_in_one = map_of(
            &good.replace("</cpus>", "<model name='Base'/></cpus>"),
            "<cpus/>",
        );
        let err = CpuMap::load_models(&twice_in_one.0, &["Base"]).unwrap_err();
        assert!(err.to_string().contains("Multiple definitions"), "{err}");

        let nameless = map_of(
            "<cpus><model name='Base'><feature/></model></cpus>",
            "<cpus/>",
        );
        let err = CpuMap::load(&nameless.0).unwrap_err();
        assert!(err.to_string().contains("no name attribute"), "{err}");
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

    /// The partial load (the hook's) gives every model of libvirt 9.0's map the features the
    /// whole load gives it.
    #[test]
    fn load_models_matches_full_load() {
        let dir = &crate::testdata::cpu_map();
        let full = CpuMap::load(dir).unwrap();
        for name in full.model_names() {
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
        let names = feature_names(dir).unwrap();
        assert!(names.contains("pni") && names.contains("sse3") && names.len() > 200);
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
}
