//! The size check (`cargo xtask sizes`; part of `cargo xtask check` and CI): no file of `src/`
//! over [`FILE_LINES`] lines, no function of the library's non-test code over [`FN_LINES`]
//! lines (one screen: a reader sees a function whole).
//!
//! A function is counted from its first line (attributes and docs left out) to its closing
//! brace, as `syn` reads it: free functions and the methods of `impl` and `trait` blocks, in
//! the modules `src/lib.rs` reaches. Test code (items under `#[cfg(test)]`, `#[test]`
//! functions, modules declared under `#[cfg(test)]`) may be longer: a test reads best whole.

use crate::Failure;
use crate::layers::{is_test_only, module_file};
use std::fmt;
use std::path::{Path, PathBuf};
use syn::spanned::Spanned;

/// Longest file of `src/`, in lines (ARCHITECTURE.md).
pub const FILE_LINES: usize = 800;

/// Longest non-test function, in lines: one screen (ARCHITECTURE.md).
pub const FN_LINES: usize = 80;

/// Something over its bound.
#[derive(Debug, PartialEq, Eq)]
pub enum Oversize {
    /// A file over [`FILE_LINES`].
    File {
        /// The file, relative to the repository.
        path: PathBuf,
        /// Its lines.
        lines: usize,
    },
    /// A function over [`FN_LINES`].
    Function {
        /// The file, relative to the repository.
        path: PathBuf,
        /// The function's name (`Type::method` for a method).
        name: String,
        /// Its first line.
        line: usize,
        /// Its lines.
        lines: usize,
    },
}

impl fmt::Display for Oversize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Oversize::File { path, lines } => write!(
                f,
                "{}: {lines} lines, over the {FILE_LINES} a file may have",
                path.display()
            ),
            Oversize::Function {
                path,
                name,
                line,
                lines,
            } => write!(
                f,
                "{}:{line}: fn {name} is {lines} lines, over the {FN_LINES} of one screen",
                path.display()
            ),
        }
    }
}

/// `cargo xtask sizes`: the check over the repository at `root`.
pub fn run(root: &Path) -> Result<(), Failure> {
    let (found, functions) = check(root).map_err(Failure::new)?;
    if found.is_empty() {
        println!(
            "sizes: every file of src/ at most {FILE_LINES} lines, all {functions} non-test functions at most {FN_LINES}"
        );
        return Ok(());
    }
    for o in &found {
        eprintln!("sizes: {o}");
    }
    Err(Failure::new(format!(
        "sizes: {} over their bound (see above)",
        found.len()
    )))
}

/// Everything over its bound under `root/src`, and how many non-test functions were measured.
///
/// Errors: a file that cannot be read or parsed, a `mod` without its file, as a sentence.
pub fn check(root: &Path) -> Result<(Vec<Oversize>, usize), String> {
    let mut found = Vec::new();
    let mut files = Vec::new();
    rs_files(&root.join("src"), &mut files)?;
    files.sort();
    for f in &files {
        let text =
            std::fs::read_to_string(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?;
        let lines = text.lines().count();
        if lines > FILE_LINES {
            found.push(Oversize::File {
                path: f.strip_prefix(root).unwrap_or(f).to_path_buf(),
                lines,
            });
        }
    }
    let mut counted = 0;
    let lib = root.join("src/lib.rs");
    functions(root, &lib, &mut found, &mut counted)?;
    found.sort_by_key(|o| match o {
        Oversize::File { path, .. } => (0, path.clone(), 0),
        Oversize::Function { path, line, .. } => (1, path.clone(), *line),
    });
    Ok((found, counted))
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    for e in entries {
        let p = e
            .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
            .path();
        if p.is_dir() {
            rs_files(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    Ok(())
}

/// The non-test functions of `file` and of the modules it declares, measured into `found`.
fn functions(
    root: &Path,
    file: &Path,
    found: &mut Vec<Oversize>,
    counted: &mut usize,
) -> Result<(), String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let parsed =
        syn::parse_file(&text).map_err(|e| format!("cannot parse {}: {e}", file.display()))?;
    let rel = file.strip_prefix(root).unwrap_or(file).to_path_buf();
    items(root, file, &rel, &parsed.items, found, counted)
}

fn items(
    root: &Path,
    file: &Path,
    rel: &Path,
    list: &[syn::Item],
    found: &mut Vec<Oversize>,
    counted: &mut usize,
) -> Result<(), String> {
    let mut spans: Vec<(String, proc_macro2::Span)> = Vec::new();
    for item in list {
        match item {
            syn::Item::Fn(f) if !is_test_only(&f.attrs) => {
                spans.push((f.sig.ident.to_string(), fn_span(&f.sig, &f.block)));
            }
            syn::Item::Impl(i) if !is_test_only(&i.attrs) => {
                let ty = type_name(&i.self_ty);
                for it in &i.items {
                    if let syn::ImplItem::Fn(f) = it {
                        if !is_test_only(&f.attrs) {
                            spans.push((
                                format!("{ty}::{}", f.sig.ident),
                                fn_span(&f.sig, &f.block),
                            ));
                        }
                    }
                }
            }
            syn::Item::Trait(t) if !is_test_only(&t.attrs) => {
                for it in &t.items {
                    if let syn::TraitItem::Fn(f) = it {
                        if let Some(block) = &f.default {
                            spans.push((
                                format!("{}::{}", t.ident, f.sig.ident),
                                fn_span(&f.sig, block),
                            ));
                        }
                    }
                }
            }
            syn::Item::Mod(m) if !is_test_only(&m.attrs) => match &m.content {
                Some((_, inner)) => items(root, file, rel, inner, found, counted)?,
                None => {
                    let f = module_file(file, &m.ident.to_string())?;
                    functions(root, &f, found, counted)?;
                }
            },
            _ => {}
        }
    }
    for (name, span) in spans {
        *counted += 1;
        let (start, end) = (span.start().line, span.end().line);
        let lines = end + 1 - start;
        if lines > FN_LINES {
            found.push(Oversize::Function {
                path: rel.to_path_buf(),
                name,
                line: start,
                lines,
            });
        }
    }
    Ok(())
}

/// From the `fn` keyword (or its qualifiers) to the closing brace.
fn fn_span(sig: &syn::Signature, block: &syn::Block) -> proc_macro2::Span {
    sig.span()
        .join(block.span())
        .unwrap_or_else(|| block.span())
}

fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) => p
            .path
            .segments
            .last()
            .map(|s| s.ident.to_string())
            .unwrap_or_default(),
        _ => "_".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crate_of(name: &str, files: &[(&str, String)]) -> PathBuf {
        let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
        crate::scratch_crate(&format!("sizes-{name}"), &files)
    }

    /// A function of `n` lines in all.
    fn function(name: &str, n: usize) -> String {
        let body: String = (0..n - 2)
            .map(|i| format!("    let _x{i} = {i};\n"))
            .collect();
        format!("pub fn {name}() {{\n{body}}}\n")
    }

    #[test]
    fn a_long_function_is_caught_and_a_test_may_be_long() {
        let lib = format!(
            "pub mod m;\n{}{}#[cfg(test)]\nmod tests {{\n{}}}\n",
            function("ok", FN_LINES),
            function("long", FN_LINES + 1),
            function("long_test", 200)
        );
        let m = format!(
            "pub struct S;\nimpl S {{\n{}}}\n",
            function("method", FN_LINES + 5)
        );
        let dir = crate_of("fns", &[("lib.rs", lib), ("m.rs", m)]);
        let (found, counted) = check(&dir).unwrap();
        assert_eq!(counted, 3, "the test module's function is not counted");
        let names: Vec<String> = found
            .iter()
            .map(|o| match o {
                Oversize::Function { name, lines, .. } => format!("{name} {lines}"),
                Oversize::File { path, .. } => path.display().to_string(),
            })
            .collect();
        assert_eq!(
            names,
            [
                format!("long {}", FN_LINES + 1),
                format!("S::method {}", FN_LINES + 5)
            ]
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_long_file_is_caught() {
        let text: String = (0..=FILE_LINES).map(|i| format!("// {i}\n")).collect();
        let dir = crate_of("file", &[("lib.rs", text)]);
        let (found, _) = check(&dir).unwrap();
        assert_eq!(
            found,
            [Oversize::File {
                path: PathBuf::from("src/lib.rs"),
                lines: FILE_LINES + 1
            }]
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The repository itself keeps its bounds (CI runs this, and `cargo xtask sizes`).
    #[test]
    fn the_repository_keeps_its_sizes() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let (found, counted) = check(root).unwrap();
        assert!(counted > 500, "measured only {counted} functions");
        let listed: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert!(listed.is_empty(), "{}", listed.join("\n"));
    }
}
