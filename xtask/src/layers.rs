//! The layering check (`cargo xtask layers`; part of `cargo xtask check` and CI).
//!
//! ARCHITECTURE.md orders the library's top-level modules as data flows — libvirt's documents,
//! CPU knowledge, the domain, facts, the plan, the judges, the verdict, the views, the front
//! ends — and `src/lib.rs` declares them in that order. A rule only described drifts, so this
//! reads the code's own paths and fails when:
//!
//! * a top-level module refers to one declared after it in `src/lib.rs` (an upward import), or
//! * the submodules of one module refer to each other in a circle (also through a re-export of
//!   their parent: `super::name` where the parent has `use child::name`).
//!
//! What counts as a reference: every path of the non-test code (`use` trees, expressions, types,
//! patterns, and `crate::`/`super::` paths inside macro invocations), resolved to the module it
//! names. Test code may import anything: items under `#[cfg(test)]` and `#[test]` functions, and
//! the files of modules declared under `#[cfg(test)]`, are not read. Comments and doc links are
//! not paths. The code is parsed with `syn`, as rustc would read it, not searched as text.

use crate::Failure;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// A module's path below the crate root: `["cluster", "watch"]` for `crate::cluster::watch`.
type ModPath = Vec<String>;

/// One module of the library as read: where it is and the module paths its code refers to.
#[derive(Debug)]
struct Module {
    /// The file it is in (an inline module: its parent's file), relative to the repository.
    file: PathBuf,
    /// Names imported by its `use` items (the last segment, or the `as` name) and the absolute
    /// path each stands for: how `super::name` and `name::item` are resolved.
    imports: BTreeMap<String, ModPath>,
    /// Absolute paths its code refers to (item paths, not yet cut to a module), with the text
    /// of the path as written for the message.
    refs: Vec<(ModPath, String)>,
}

/// One place the layers do not hold.
#[derive(Debug, PartialEq, Eq)]
pub enum Violation {
    /// `from` (a top-level module) refers to `to`, declared after it in `src/lib.rs`.
    Upward {
        /// The top-level module that imports.
        from: String,
        /// The module it imports, listed after it.
        to: String,
        /// The file and path as written: where to look.
        at: String,
    },
    /// Submodules of one module that refer to each other in a circle: `a -> b -> a`.
    Circle {
        /// The modules of the circle, each importing the next, the first repeated at the end.
        modules: Vec<String>,
        /// For each step, the file and path as written.
        at: Vec<String>,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Upward { from, to, at } => write!(
                f,
                "`{from}` imports `{to}`, which src/lib.rs lists after it: {at}"
            ),
            Violation::Circle { modules, at } => {
                write!(
                    f,
                    "import circle {}: {}",
                    modules.join(" -> "),
                    at.join("; ")
                )
            }
        }
    }
}

/// `cargo xtask layers`: the check over `src/` of the repository at `root`.
pub fn run(root: &Path) -> Result<(), Failure> {
    let found = check(root).map_err(Failure::new)?;
    if found.violations.is_empty() {
        println!(
            "layers: {} modules, {} references to other modules, none against src/lib.rs's order, no import circle",
            found.modules, found.references
        );
        return Ok(());
    }
    for v in &found.violations {
        eprintln!("layers: {v}");
    }
    Err(Failure::new(format!(
        "layers: {} import(s) against ARCHITECTURE.md's layering (see above)",
        found.violations.len()
    )))
}

/// What the check found.
#[derive(Debug)]
pub struct Found {
    /// Modules read (test-only modules left out).
    pub modules: usize,
    /// References from one module to another (resolved, deduplicated per pair of modules and path).
    pub references: usize,
    /// Every violation, upward imports first (in src/lib.rs's order), then circles.
    pub violations: Vec<Violation>,
}

/// Reads the library from `root/src/lib.rs` and checks its layering.
///
/// Errors: a file that cannot be read or parsed, or a `mod` whose file is not found, as a
/// sentence naming the file.
pub fn check(root: &Path) -> Result<Found, String> {
    let mut modules = BTreeMap::new();
    let lib = root.join("src/lib.rs");
    let file = parse(&lib)?;
    let order = top_level_order(&file);
    read_items(root, &lib, &file.items, Vec::new(), &mut modules)?;
    let names: BTreeSet<ModPath> = modules.keys().cloned().collect();

    // Every reference cut to the module it names.
    let mut edges: BTreeMap<(ModPath, ModPath), String> = BTreeMap::new();
    for (from, m) in &modules {
        for (path, text) in &m.refs {
            for to in resolve(path, &modules, &names) {
                if to.is_empty() || is_within(&to, from) || is_within(from, &to) {
                    continue;
                }
                edges
                    .entry((from.clone(), to))
                    .or_insert_with(|| format!("{} ({text})", m.file.display()));
            }
        }
    }

    let mut violations = Vec::new();
    let rank = |m: &str| order.iter().position(|o| o == m);
    let mut upward = BTreeMap::new();
    for ((from, to), at) in &edges {
        let (a, b) = (&from[0], &to[0]);
        if a == b {
            continue;
        }
        if let (Some(i), Some(j)) = (rank(a), rank(b)) {
            if j > i {
                upward.entry((i, j)).or_insert_with(|| Violation::Upward {
                    from: a.clone(),
                    to: b.clone(),
                    at: at.clone(),
                });
            }
        }
    }
    violations.extend(upward.into_values());
    violations.extend(circles(&edges));
    Ok(Found {
        modules: modules.len(),
        references: edges.len(),
        violations,
    })
}

fn parse(path: &Path) -> Result<syn::File, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    syn::parse_file(&text).map_err(|e| {
        let at = e.span().start();
        format!(
            "cannot parse {}:{}:{}: {e}",
            path.display(),
            at.line,
            at.column + 1
        )
    })
}

/// The top-level modules in the order src/lib.rs declares them (test-only ones too: a module
/// may sit anywhere only if nothing imports it).
fn top_level_order(lib: &syn::File) -> Vec<String> {
    lib.items
        .iter()
        .filter_map(|i| match i {
            syn::Item::Mod(m) => Some(m.ident.to_string()),
            _ => None,
        })
        .collect()
}

/// True for an item the test build only compiles: `#[cfg(test)]` or `#[test]`.
pub fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("test")
            || (a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test"))
    })
}

/// The directory where the files of `file`'s submodules are: beside `lib.rs` and `mod.rs`,
/// in `foo/` for `foo.rs`.
pub fn child_dir(file: &Path) -> PathBuf {
    let dir = file.parent().unwrap_or(Path::new("."));
    match file.file_stem().and_then(|s| s.to_str()) {
        Some("lib" | "mod" | "main") => dir.to_path_buf(),
        Some(stem) => dir.join(stem),
        None => dir.to_path_buf(),
    }
}

/// The file of `mod name;` declared in `file`: `name.rs` or `name/mod.rs` in [`child_dir`].
///
/// Errors: neither exists, as a sentence naming both.
pub fn module_file(file: &Path, name: &str) -> Result<PathBuf, String> {
    let dir = child_dir(file);
    let candidates = [
        dir.join(format!("{name}.rs")),
        dir.join(name).join("mod.rs"),
    ];
    match candidates.iter().find(|c| c.is_file()) {
        Some(f) => Ok(f.clone()),
        None => Err(format!(
            "{}: `mod {name};` has no file ({} or {})",
            file.display(),
            candidates[0].display(),
            candidates[1].display()
        )),
    }
}

/// Reads `items` (of module `path`, in `file`) into `modules`, recursing into every non-test
/// submodule, inline or in its own file.
fn read_items(
    root: &Path,
    file: &Path,
    items: &[syn::Item],
    path: ModPath,
    modules: &mut BTreeMap<ModPath, Module>,
) -> Result<(), String> {
    let mut refs = Refs::default();
    for item in items {
        if let syn::Item::Mod(m) = item {
            if is_test_only(&m.attrs) {
                continue;
            }
            let mut child = path.clone();
            child.push(m.ident.to_string());
            if let Some((_, inner)) = &m.content {
                read_items(root, file, inner, child, modules)?;
            } else {
                let f = module_file(file, &m.ident.to_string())?;
                let parsed = parse(&f)?;
                read_items(root, &f, &parsed.items, child, modules)?;
            }
            continue;
        }
        if item_attrs(item).is_some_and(is_test_only) {
            continue;
        }
        refs.visit_item(item);
    }
    let rel = file.strip_prefix(root).unwrap_or(file).to_path_buf();
    let abs = |segs: &[String]| absolute(&path, segs);
    let imports = refs
        .uses
        .iter()
        .filter_map(|(name, segs)| Some((name.clone(), abs(segs)?)))
        .collect();
    let refs = refs
        .paths
        .iter()
        .filter_map(|segs| Some((abs(segs)?, segs.join("::"))))
        .collect();
    modules.insert(
        path,
        Module {
            file: rel,
            imports,
            refs,
        },
    );
    Ok(())
}

fn item_attrs(item: &syn::Item) -> Option<&[syn::Attribute]> {
    use syn::Item::*;
    Some(match item {
        Const(i) => &i.attrs,
        Enum(i) => &i.attrs,
        ExternCrate(i) => &i.attrs,
        Fn(i) => &i.attrs,
        ForeignMod(i) => &i.attrs,
        Impl(i) => &i.attrs,
        Macro(i) => &i.attrs,
        Mod(i) => &i.attrs,
        Static(i) => &i.attrs,
        Struct(i) => &i.attrs,
        Trait(i) => &i.attrs,
        TraitAlias(i) => &i.attrs,
        Type(i) => &i.attrs,
        Union(i) => &i.attrs,
        Use(i) => &i.attrs,
        _ => return None,
    })
}

/// A path as written, made absolute from module `at`: `crate::a::b` is `[a, b]`, `super::` and
/// `self::` climb from `at`. Paths that start with another name (a local item, an import, an
/// extern crate) are kept relative with a leading empty marker, resolved later against the
/// module's imports and submodules.
fn absolute(at: &[String], segs: &[String]) -> Option<ModPath> {
    let mut out: ModPath = at.to_vec();
    let mut rest = segs;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            out.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                out.pop()?;
                rest = &rest[1..];
            }
        }
        Some(_) => {
            // Relative: the module's own child, an import, or outside the crate.
            let mut rel = vec![String::new()];
            rel.extend(at.iter().cloned());
            rel.push("\0".into());
            rel.extend(rest.iter().cloned());
            return Some(rel);
        }
        None => return None,
    }
    out.extend(rest.iter().cloned());
    Some(out)
}

/// The module a reference names: the longest known module prefix of its absolute path, after
/// replacing a name imported by a module (`use child::name` in a parent, `use crate::x` then
/// `x::y`) with what it stands for; each module it lands in on the way. Empty for a path
/// outside the crate.
fn resolve(
    path: &ModPath,
    modules: &BTreeMap<ModPath, Module>,
    names: &BTreeSet<ModPath>,
) -> Vec<ModPath> {
    let mut via = Vec::new();
    resolve_via(path, modules, names, &mut via);
    via
}

/// [`resolve`]'s steps: every module the path lands in on its way (a sibling's re-export is
/// a dependence on that sibling too), pushed onto `via`.
fn resolve_via(
    path: &ModPath,
    modules: &BTreeMap<ModPath, Module>,
    names: &BTreeSet<ModPath>,
    via: &mut Vec<ModPath>,
) -> Option<()> {
    let mut path = path.clone();
    for _ in 0..8 {
        if path.first().is_some_and(String::is_empty) {
            // [ "", at..., "\0", first, rest... ]
            let sep = path.iter().position(|s| s == "\0")?;
            let at: ModPath = path[1..sep].to_vec();
            let first = path.get(sep + 1)?.clone();
            let rest = &path[sep + 2..];
            let mut child = at.clone();
            child.push(first.clone());
            if names.contains(&child) {
                child.extend(rest.iter().cloned());
                path = child;
                continue;
            }
            let target = modules.get(&at)?.imports.get(&first)?;
            let mut p = target.clone();
            p.extend(rest.iter().cloned());
            path = p;
            continue;
        }
        // Through a parent's imports: `super::name` where the parent has `use child::name`.
        // From the crate root up: `crate::name` may be a root re-export (`pub use error::Error`).
        let known = (0..=path.len())
            .rev()
            .find(|n| names.contains(&path[..*n].to_vec()))?;
        via.push(path[..known].to_vec());
        if let (Some(m), Some(next)) = (modules.get(&path[..known].to_vec()), path.get(known)) {
            if let Some(target) = m.imports.get(next) {
                if !target.starts_with(&path[..known]) || target.len() > known + 1 {
                    let mut p = target.clone();
                    p.extend(path[known + 1..].iter().cloned());
                    if p != path {
                        path = p;
                        continue;
                    }
                }
            }
        }
        return Some(());
    }
    None
}

/// True when `inner` is `outer` or below it.
fn is_within(inner: &[String], outer: &[String]) -> bool {
    inner.starts_with(outer)
}

/// Circles among the submodules of each module: an edge `a -> b` between two children of one
/// parent for every reference from `a` (or below it) to `b` (or below it).
fn circles(edges: &BTreeMap<(ModPath, ModPath), String>) -> Vec<Violation> {
    // parent -> child -> child -> where
    let mut graphs: BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, String>>> = BTreeMap::new();
    for ((from, to), at) in edges {
        let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
        if common == 0 || common >= from.len() || common >= to.len() {
            // Top level (the order rule judges it) or a module and its own ancestor.
            continue;
        }
        graphs
            .entry(from[..common].to_vec())
            .or_default()
            .entry(from[common].clone())
            .or_default()
            .entry(to[common].clone())
            .or_insert_with(|| at.clone());
    }
    let mut out = Vec::new();
    for (parent, graph) in graphs {
        let mut seen = BTreeSet::new();
        for start in graph.keys() {
            if let Some(cycle) = find_cycle(
                &graph,
                start,
                &mut vec![start.clone()],
                &mut BTreeSet::new(),
            ) {
                let key: BTreeSet<_> = cycle.iter().cloned().collect();
                if !seen.insert(key) {
                    continue;
                }
                let at = cycle
                    .windows(2)
                    .map(|w| graph[&w[0]][&w[1]].clone())
                    .collect();
                let qualified = cycle
                    .iter()
                    .map(|c| {
                        let mut p = parent.clone();
                        p.push(c.clone());
                        p.join("::")
                    })
                    .collect();
                out.push(Violation::Circle {
                    modules: qualified,
                    at,
                });
            }
        }
    }
    out
}

/// A path back to `stack[0]` from the last node of `stack`, depth first.
fn find_cycle(
    graph: &BTreeMap<String, BTreeMap<String, String>>,
    start: &str,
    stack: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    let last = stack.last()?.clone();
    for next in graph.get(&last).into_iter().flat_map(|m| m.keys()) {
        if next == start {
            let mut c = stack.clone();
            c.push(start.to_string());
            return Some(c);
        }
        if stack.contains(next) || done.contains(next) {
            continue;
        }
        stack.push(next.clone());
        if let Some(c) = find_cycle(graph, start, stack, done) {
            return Some(c);
        }
        stack.pop();
        done.insert(next.clone());
    }
    None
}

/// The paths of one module's non-test items.
#[derive(Default)]
struct Refs {
    /// Every path of two or more segments (one-segment paths name local items or preludes).
    paths: Vec<Vec<String>>,
    /// `use` items: the name brought in and its path.
    uses: Vec<(String, Vec<String>)>,
}

impl Refs {
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let name = n.ident.to_string();
                let mut full = prefix.clone();
                if name != "self" {
                    full.push(name.clone());
                }
                let key = if name == "self" {
                    prefix.last().cloned().unwrap_or_default()
                } else {
                    name
                };
                self.add_use(key, full);
            }
            syn::UseTree::Rename(r) => {
                let mut full = prefix.clone();
                if r.ident != "self" {
                    full.push(r.ident.to_string());
                }
                self.add_use(r.rename.to_string(), full);
            }
            syn::UseTree::Glob(_) => self.paths.push(prefix.clone()),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    fn add_use(&mut self, name: String, full: Vec<String>) {
        if full.len() >= 2
            || matches!(
                full.first().map(String::as_str),
                Some("crate" | "super" | "self")
            )
        {
            self.paths.push(full.clone());
        }
        self.uses.push((name, full));
    }

    /// `"crate::a::b"` string literals among an attribute's tokens (serde's `default = "..."`,
    /// `with = "..."`): paths rustc resolves too.
    fn literal_paths(&mut self, tokens: proc_macro2::TokenStream) {
        for t in tokens {
            match t {
                proc_macro2::TokenTree::Group(g) => self.literal_paths(g.stream()),
                proc_macro2::TokenTree::Literal(l) => {
                    let Ok(text) = syn::parse_str::<syn::LitStr>(&l.to_string()) else {
                        continue;
                    };
                    let Ok(p) = syn::parse_str::<syn::Path>(&text.value()) else {
                        continue;
                    };
                    let segs: Vec<String> =
                        p.segments.iter().map(|s| s.ident.to_string()).collect();
                    if segs.len() >= 2 && matches!(segs[0].as_str(), "crate" | "super") {
                        self.paths.push(segs);
                    }
                }
                _ => {}
            }
        }
    }

    /// `crate::a::b` and `super::a` inside a macro's tokens (`matches!`, `format!`, ...).
    fn tokens(&mut self, tokens: proc_macro2::TokenStream) {
        use proc_macro2::TokenTree;
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            match &trees[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id) if id == "crate" || id == "super" => {
                    let mut segs = vec![id.to_string()];
                    let mut j = i + 1;
                    while let (
                        Some(TokenTree::Punct(a)),
                        Some(TokenTree::Punct(b)),
                        Some(TokenTree::Ident(n)),
                    ) = (trees.get(j), trees.get(j + 1), trees.get(j + 2))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        segs.push(n.to_string());
                        j += 3;
                    }
                    if segs.len() >= 2 {
                        self.paths.push(segs);
                    }
                    i = j.max(i + 1);
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for Refs {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if item_attrs(item).is_some_and(is_test_only) {
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {
        // Submodules are read as modules of their own (read_items).
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test_only(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.segments.len() >= 2 {
            self.paths
                .push(p.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_attribute(&mut self, a: &'ast syn::Attribute) {
        // An attribute's arguments are tokens to syn (`#[arg(default_value = crate::x::DIR)]`):
        // read them as a macro's are.
        if let syn::Meta::List(l) = &a.meta {
            self.tokens(l.tokens.clone());
            self.literal_paths(l.tokens.clone());
        }
        syn::visit::visit_attribute(self, a);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crate_of(name: &str, files: &[(&str, &str)]) -> PathBuf {
        crate::scratch_crate(&format!("layers-{name}"), files)
    }

    #[test]
    fn an_upward_import_is_caught() {
        let dir = crate_of(
            "upward",
            &[
                ("lib.rs", "pub mod low;\npub mod high;\n"),
                ("low.rs", "pub fn f() -> u32 { crate::high::g() }\n"),
                (
                    "high.rs",
                    "use crate::low;\npub fn g() -> u32 { 1 }\npub fn h() -> u32 { low::f() }\n",
                ),
            ],
        );
        let found = check(&dir).unwrap();
        assert_eq!(
            found.violations,
            vec![Violation::Upward {
                from: "low".into(),
                to: "high".into(),
                at: "src/low.rs (crate::high::g)".into(),
            }]
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn imports_through_a_use_and_in_a_macro_are_caught() {
        let dir = crate_of(
            "through",
            &[
                ("lib.rs", "pub mod low;\npub mod high;\n"),
                (
                    "low.rs",
                    "use crate::high;\npub fn f() -> bool { high::g() }\npub fn k(x: u8) -> bool { matches!(x, crate::high::N) }\n",
                ),
                (
                    "high.rs",
                    "pub const N: u8 = 1;\npub fn g() -> bool { true }\n",
                ),
            ],
        );
        let found = check(&dir).unwrap();
        assert_eq!(found.violations.len(), 1, "{:?}", found.violations);
        assert!(
            matches!(&found.violations[0], Violation::Upward { from, to, .. } if from == "low" && to == "high")
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn paths_in_attributes_and_through_root_reexports_are_caught() {
        for (tag, low) in [
            (
                "attr",
                "pub struct A {\n    #[arg(default_value = crate::high::DIR)]\n    pub dir: String,\n}\n",
            ),
            (
                "attr-string",
                "#[serde(default = \"crate::high::g\")]\npub struct A;\n",
            ),
            ("root-reexport", "pub fn f() -> u8 {\n    crate::g()\n}\n"),
        ] {
            let dir = crate_of(
                tag,
                &[
                    ("lib.rs", "pub mod low;\npub mod high;\npub use high::g;\n"),
                    ("low.rs", low),
                    (
                        "high.rs",
                        "pub const DIR: &str = \"x\";\npub fn g() -> u8 {\n    1\n}\n",
                    ),
                ],
            );
            let found = check(&dir).unwrap();
            assert!(
                matches!(found.violations.as_slice(), [Violation::Upward { from, to, .. }] if from == "low" && to == "high"),
                "{tag}: {:?}",
                found.violations
            );
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    #[test]
    fn test_code_and_comments_may_import_anything() {
        let dir = crate_of(
            "tests",
            &[
                (
                    "lib.rs",
                    "pub mod low;\npub mod high;\n#[cfg(test)]\nmod fixtures;\n",
                ),
                (
                    "low.rs",
                    "//! See [`crate::high`].\npub fn f() {}\n#[cfg(test)]\nmod tests {\n    use crate::high::g;\n    #[test]\n    fn t() { g(); crate::fixtures::x(); }\n}\n",
                ),
                ("high.rs", "pub fn g() { crate::low::f() }\n"),
                ("fixtures.rs", "pub fn x() { crate::high::g() }\n"),
            ],
        );
        let found = check(&dir).unwrap();
        assert_eq!(found.violations, vec![]);
        assert_eq!(found.modules, 3, "the test-only module is not read");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_circle_of_submodules_is_caught_through_a_reexport() {
        let dir = crate_of(
            "circle",
            &[
                ("lib.rs", "pub mod daemon;\n"),
                (
                    "daemon/mod.rs",
                    "mod apply;\nmod snapshot;\npub use snapshot::safe_name;\n",
                ),
                ("daemon/apply.rs", "pub fn go() { super::safe_name() }\n"),
                (
                    "daemon/snapshot.rs",
                    "pub fn safe_name() {}\npub fn take() { super::apply::go() }\n",
                ),
            ],
        );
        let found = check(&dir).unwrap();
        assert_eq!(found.violations.len(), 1, "{:?}", found.violations);
        match &found.violations[0] {
            Violation::Circle { modules, .. } => assert_eq!(
                modules,
                &["daemon::apply", "daemon::snapshot", "daemon::apply"]
            ),
            v => panic!("not a circle: {v}"),
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_missing_module_file_is_an_error_naming_it() {
        let dir = crate_of("missing", &[("lib.rs", "pub mod gone;\n")]);
        let e = check(&dir).unwrap_err();
        assert!(e.contains("`mod gone;` has no file"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The repository itself: its layers hold (CI runs this through `cargo test -p xtask`, and
    /// `cargo xtask layers` as a step of its own).
    #[test]
    fn the_repositorys_layers_hold() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let found = check(root).unwrap();
        assert!(found.modules > 50, "read only {} modules", found.modules);
        let listed: Vec<String> = found.violations.iter().map(|v| v.to_string()).collect();
        assert!(listed.is_empty(), "{}", listed.join("\n"));
    }
}
