//! Every document of `../shared/corpus/virt-manager/domains/` through the real binary with the shipped
//! default policy (`packaging/policy.toml`).
//!
//! Per document: the tool must not crash (exit 0 or 1; 2 only when the input itself is not
//! well-formed XML, not a `<domain>`, or carries a DTD the tool refuses by design). On exit 0 the
//! output is well-formed, has at most one top-level `<cpu>` (exactly one when the input had one, and
//! exactly one for x86_64 KVM/TCG guests, which the default policy gives a CPU level), a domain that
//! is not KVM/TCG comes out byte-identical, a second `rewrite` is byte-identical, and
//! `virt-xml-validate OUTPUT domain` passes whenever it passed on the input. On exit 1 stdout is
//! empty and the finding codes on stderr are counted.
//!
//! The test prints its figures and fails when the corpus is present but nothing ran. Without the
//! corpus it is ignored (cfg `vcp_shared_corpus`); the comparison with `virt-xml-validate` is a
//! test of its own, ignored unless asked for (`--include-ignored`, as CI does), and then failing
//! without the validator or the corpus.

use crate::harness::{Cmd, Output, Scratch, root, shared_corpus};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Whether `virt-xml-validate` can be run at all.
fn have_validator() -> bool {
    Command::new("virt-xml-validate")
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// `virt-xml-validate FILE domain`: Ok on success, Err(its output) on failure.
fn validate(file: &Path) -> Result<(), String> {
    let out = Command::new("virt-xml-validate")
        .arg(file)
        .arg("domain")
        .stdin(Stdio::null())
        .output()
        .expect("run virt-xml-validate");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// What the input is, before the tool sees it.
#[derive(Debug)]
enum Input {
    /// Not well-formed XML (roxmltree's reason).
    Malformed(String),
    /// Well-formed but carries a DTD: the tool refuses those by design (exit 2).
    Dtd,
    /// Well-formed, root is not `<domain>`.
    NotDomain(String),
    Domain(DomainFacts),
}

#[derive(Debug)]
struct DomainFacts {
    /// `<domain type=...>`.
    virt_type: String,
    /// `<os><type arch=...>`, empty when absent.
    arch: String,
    /// Top-level `<cpu>` elements in libvirt's (empty) namespace.
    cpus: usize,
}

fn top_level_cpus(doc: &roxmltree::Document) -> usize {
    doc.root_element()
        .children()
        .filter(|n| {
            n.is_element() && n.tag_name().name() == "cpu" && n.tag_name().namespace().is_none()
        })
        .count()
}

fn classify(text: &str) -> Input {
    let strict = roxmltree::Document::parse(text);
    let doc = match strict {
        Ok(d) => d,
        Err(e) => {
            let opts = roxmltree::ParsingOptions {
                allow_dtd: true,
                ..Default::default()
            };
            return match roxmltree::Document::parse_with_options(text, opts) {
                Ok(_) => Input::Dtd,
                Err(_) => Input::Malformed(e.to_string()),
            };
        }
    };
    let root = doc.root_element();
    if root.tag_name().name() != "domain" || root.tag_name().namespace().is_some() {
        return Input::NotDomain(format!("{:?}", root.tag_name()));
    }
    let arch = root
        .children()
        .find(|n| n.has_tag_name("os"))
        .and_then(|os| os.children().find(|n| n.has_tag_name("type")))
        .and_then(|t| t.attribute("arch"))
        .unwrap_or("")
        .to_string();
    Input::Domain(DomainFacts {
        virt_type: root.attribute("type").unwrap_or("").to_string(),
        arch,
        cpus: top_level_cpus(&doc),
    })
}

/// The result of one document.
enum Verdict {
    Changed,
    Unchanged,
    /// Exit 1, with the finding codes of its `error[...]` lines.
    Refused(Vec<String>),
    /// Exit 2 on an input that is not a well-formed `<domain>`: the class, for the figures, and why.
    BadInput(&'static str, String),
}

struct DocResult {
    verdict: Verdict,
    /// Whether virt-xml-validate was compared (input valid and output written).
    validated: bool,
    /// Whether the input itself passed virt-xml-validate (None: not checked).
    input_valid: Option<bool>,
}

/// `error[code]` / `warning[code]` codes on stderr, of the given severity.
fn finding_codes(stderr: &str, severity: &str) -> Vec<String> {
    let tag = format!("{severity}[");
    let mut codes = Vec::new();
    for line in stderr.lines() {
        let mut rest = line;
        while let Some(i) = rest.find(&tag) {
            rest = &rest[i + tag.len()..];
            if let Some(j) = rest.find(']') {
                let code = &rest[..j];
                if !code.is_empty()
                    && code
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                {
                    codes.push(code.to_string());
                }
                rest = &rest[j..];
            }
        }
    }
    codes
}

fn crashed(out: &Output) -> bool {
    !(0..=3).contains(&out.code)
        || out.stderr.contains("panicked at")
        || out.stderr.contains("RUST_BACKTRACE")
}

fn check_doc(
    file: &Path,
    policy: &Path,
    scratch: &Path,
    validator: bool,
) -> Result<DocResult, String> {
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    let input_bytes = std::fs::read(file).map_err(|e| format!("{name}: read: {e}"))?;
    let input_text = String::from_utf8_lossy(&input_bytes).into_owned();
    let input = classify(&input_text);
    let policy_s = policy.display().to_string();

    let out = Cmd::new(&["rewrite", "--policy", &policy_s])
        .arg(file.display().to_string())
        .run();
    let ctx = |what: &str, out: &Output| {
        format!(
            "{name}: {what}\n--- exit {}; stderr:\n{}\n--- stdout (first 2000 bytes):\n{}",
            out.code,
            out.stderr,
            out.stdout.chars().take(2000).collect::<String>()
        )
    };
    if crashed(&out) {
        return Err(ctx("the tool crashed", &out));
    }

    let facts = match (&input, out.code) {
        (Input::Domain(f), 0 | 1) => f,
        (Input::Domain(_), 2) => {
            return Err(ctx(
                "exit 2 on a well-formed <domain> (allowed only for malformed input)",
                &out,
            ));
        }
        (Input::Malformed(why), 2) => {
            let verdict = Verdict::BadInput("malformed XML", why.clone());
            return Ok(DocResult {
                verdict,
                validated: false,
                input_valid: None,
            });
        }
        (Input::Dtd, 2) => {
            let verdict = Verdict::BadInput("DTD (refused by design)", String::new());
            return Ok(DocResult {
                verdict,
                validated: false,
                input_valid: None,
            });
        }
        (Input::NotDomain(root), 2) => {
            let verdict = Verdict::BadInput("not a <domain>", format!("root {root}"));
            return Ok(DocResult {
                verdict,
                validated: false,
                input_valid: None,
            });
        }
        (other, code) => {
            return Err(ctx(
                &format!("exit {code} on input classified as {other:?}"),
                &out,
            ));
        }
    };

    if out.code == 1 {
        if !out.stdout.is_empty() {
            return Err(ctx("exit 1 but stdout is not empty", &out));
        }
        let codes = finding_codes(&out.stderr, "error");
        if codes.is_empty() {
            return Err(ctx(
                "exit 1 without any error[code] finding on stderr",
                &out,
            ));
        }
        return Ok(DocResult {
            verdict: Verdict::Refused(codes),
            validated: false,
            input_valid: None,
        });
    }

    // Exit 0: the whole document on stdout.
    let doc = roxmltree::Document::parse(&out.stdout)
        .map_err(|e| ctx(&format!("output is not well-formed XML: {e}"), &out))?;
    let cpus = top_level_cpus(&doc);
    if cpus > 1 {
        return Err(ctx(
            &format!("output has {cpus} top-level <cpu> elements"),
            &out,
        ));
    }
    if facts.cpus >= 1 && cpus != 1 {
        return Err(ctx(
            &format!("input had {} <cpu>, output has {cpus}", facts.cpus),
            &out,
        ));
    }
    let kvm_or_tcg = facts.virt_type == "kvm" || facts.virt_type == "qemu";
    if kvm_or_tcg && facts.arch == "x86_64" && cpus != 1 {
        return Err(ctx(
            "x86_64 KVM/TCG guest without a <cpu> after the default policy (it guarantees x86-64-v2)",
            &out,
        ));
    }
    if !kvm_or_tcg && out.stdout.as_bytes() != input_bytes.as_slice() {
        return Err(ctx(
            &format!(
                "type='{}' is out of scope but the output differs from the input",
                facts.virt_type
            ),
            &out,
        ));
    }
    let changed = out.stdout.as_bytes() != input_bytes.as_slice();

    // Idempotence: rewrite the output again, from a file as an operator would.
    let out_file = scratch.join(&name);
    std::fs::write(&out_file, &out.stdout).map_err(|e| format!("{name}: write output: {e}"))?;
    let again = Cmd::new(&["rewrite", "--policy", &policy_s])
        .arg(out_file.display().to_string())
        .run();
    if again.code != 0 || again.stdout != out.stdout {
        let diff = similar::TextDiff::from_lines(&out.stdout, &again.stdout)
            .unified_diff()
            .header("first rewrite", "second rewrite")
            .to_string();
        return Err(format!(
            "{name}: rewrite is not idempotent (second run exit {})\nstderr:\n{}\n{diff}",
            again.code, again.stderr
        ));
    }

    // virt-xml-validate: the output must pass whenever the input did.
    let mut validated = false;
    let mut input_valid = None;
    if validator {
        let iv = validate(file).is_ok();
        input_valid = Some(iv);
        if iv {
            validated = true;
            if let Err(msg) = validate(&out_file) {
                let diff = similar::TextDiff::from_lines(&input_text, &out.stdout)
                    .unified_diff()
                    .header("input", "output")
                    .to_string();
                return Err(format!(
                    "{name}: the input passes virt-xml-validate but the output does not:\n{msg}\n{diff}"
                ));
            }
        }
    }
    Ok(DocResult {
        verdict: if changed {
            Verdict::Changed
        } else {
            Verdict::Unchanged
        },
        validated,
        input_valid,
    })
}

#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn corpus_virt_manager_domains() {
    corpus_run(false);
}

#[test]
#[ignore = "needs libvirt's virt-xml-validate (libvirt-clients, libxml2-utils) and ../shared/corpus: .ci/run installs it"]
fn corpus_virt_manager_domains_validated_as_libvirt_does() {
    assert!(
        have_validator(),
        "virt-xml-validate is missing (apt-get install libvirt-clients libxml2-utils)"
    );
    corpus_run(true);
}

/// Every corpus document through the binary; with `validator`, each output also through
/// `virt-xml-validate` whenever its input passes.
fn corpus_run(validator: bool) {
    let start = Instant::now();
    let dir = shared_corpus().join("virt-manager/domains");
    assert!(dir.is_dir(), "{} is absent", dir.display());

    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("read corpus dir")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();

    let policy = root().join("packaging/policy.toml");
    let scratch = Scratch::new("corpus");
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(PathBuf, Result<DocResult, String>)>> = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(2, 8);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(f) = files.get(i) else { break };
                    let r = check_doc(f, &policy, &scratch.0, validator);
                    results.lock().unwrap().push((f.clone(), r));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by(|a, b| a.0.cmp(&b.0));

    let (mut changed, mut unchanged, mut refused, mut validated, mut input_valid) = (0, 0, 0, 0, 0);
    let mut refusal_codes: BTreeMap<String, usize> = BTreeMap::new();
    let mut refused_docs = Vec::new();
    let mut bad_input: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut bad_docs = Vec::new();
    let mut failures = Vec::new();
    for (f, r) in &results {
        match r {
            Err(e) => failures.push(e.clone()),
            Ok(d) => {
                validated += usize::from(d.validated);
                input_valid += usize::from(d.input_valid == Some(true));
                match &d.verdict {
                    Verdict::Changed => changed += 1,
                    Verdict::Unchanged => unchanged += 1,
                    Verdict::Refused(codes) => {
                        refused += 1;
                        refused_docs.push(format!(
                            "{} ({})",
                            f.file_name().unwrap().to_string_lossy(),
                            codes.join(", ")
                        ));
                        for c in codes {
                            *refusal_codes.entry(c.clone()).or_default() += 1;
                        }
                    }
                    Verdict::BadInput(class, why) => {
                        *bad_input.entry(class).or_default() += 1;
                        bad_docs.push(format!(
                            "{} ({class}; {why})",
                            f.file_name().unwrap().to_string_lossy()
                        ));
                    }
                }
            }
        }
    }

    let checked = results.len();
    eprintln!(
        "corpus: {} ({} documents, {workers} threads, {:.1?})",
        dir.display(),
        checked,
        start.elapsed()
    );
    eprintln!(
        "corpus: checked {checked}: rewritten (changed) {changed}, unchanged {unchanged}, refused (exit 1) {refused}, not a well-formed <domain> (exit 2) {}",
        bad_input.values().sum::<usize>()
    );
    if !refusal_codes.is_empty() {
        let codes: Vec<String> = refusal_codes
            .iter()
            .map(|(c, n)| format!("{c} x{n}"))
            .collect();
        eprintln!("corpus: refusal reasons: {}", codes.join(", "));
        eprintln!("corpus: refused: {}", refused_docs.join("; "));
    }
    for (class, n) in &bad_input {
        eprintln!("corpus: exit 2, {class}: {n}");
    }
    if !bad_docs.is_empty() {
        eprintln!("corpus: exit 2 documents: {}", bad_docs.join("; "));
    }
    if validator {
        eprintln!(
            "corpus: virt-xml-validate: {input_valid} inputs valid; {validated} rewritten outputs of valid inputs validated"
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} corpus document(s) failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(
        changed + unchanged + refused > 0,
        "corpus present but no document ran"
    );
    assert!(
        start.elapsed().as_secs() < 120,
        "corpus test took {:.1?} (budget 2 minutes)",
        start.elapsed()
    );
}

#[test]
fn finding_codes_are_parsed() {
    let s = "virt-cpu-policy: guest 'g': error[cpu-feature-invalid]: bad; fix: x\nwarning[level-host]: y\n";
    assert_eq!(finding_codes(s, "error"), vec!["cpu-feature-invalid"]);
    assert_eq!(finding_codes(s, "warning"), vec!["level-host"]);
}

/// libvirt refusals that concern what a host lacks, not the guest CPU: Debian 13's QEMU has
/// neither SPICE nor qxl video (`tests/libvirt/ROOT-NOTES.md`), and a file a definition names
/// may not exist here. A document refused for one of these, in and out alike, is counted apart.
const NOT_CPU: [&str; 6] = [
    "spice",
    "qxl",
    "firmware",
    "No such file or directory",
    "Cannot access storage file",
    "is not supported by this QEMU binary",
];

/// One libvirt's verdicts on the corpus.
#[derive(Default)]
struct PerLibvirt {
    rewritten: usize,
    unchanged: usize,
    refused: usize,
    validated: usize,
    defined_in: usize,
    defined_out: usize,
    fixed: Vec<String>,
    not_cpu: usize,
    /// Refused in and out with the same message, by message.
    alike: BTreeMap<String, usize>,
    failures: Vec<String>,
}

/// A libvirt refusal without the line naming the file.
fn reason(msg: &str) -> String {
    msg.lines()
        .filter(|l| !l.contains("Failed to define domain"))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// `virt-xml-validate FILE domain` of `oracle`'s libvirt (its schemas); the file is copied into
/// its root first.
fn validate_with(oracle: &crate::harness::Oracle, text: &str) -> bool {
    // A name of this process and call: another run of the test (another checkout on the same
    // machine, the same root) must not validate this file, nor this one validate its file.
    static N: AtomicUsize = AtomicUsize::new(0);
    let inside = format!(
        "/tmp/vcp-corpus-validate-{}-{}.xml",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let file = oracle.path(&inside);
    std::fs::write(&file, text).expect("write into the root");
    let valid = oracle
        .command("virt-xml-validate")
        .args([inside.as_str(), "domain"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let _ = std::fs::remove_file(file);
    valid
}

/// Define `text` as `name` on `oracle` (undefined again): Ok, or Err(libvirt's message).
fn define_on(
    oracle: &crate::harness::Oracle,
    dir: &Path,
    name: &str,
    text: &str,
) -> Result<(), String> {
    let renamed = rename_domain(text, name, !oracle.is_host());
    let file = dir.join(format!("{name}.xml"));
    std::fs::write(&file, renamed).unwrap();
    let r = oracle.virsh(&["define", &file.display().to_string()]);
    let _ = oracle.virsh(&["undefine", "--nvram", name]);
    let _ = oracle.virsh(&["undefine", name]);
    if r.ok {
        Ok(())
    } else {
        Err(r.stderr.trim().to_string())
    }
}

/// The document with its `<name>` replaced and `<uuid>` dropped, so test domains never clash
/// with anything on the host; with `no_spice`, SPICE devices dropped and qxl video made VGA
/// (Debian 13's QEMU has neither; the guest CPU does not depend on them).
fn rename_domain(text: &str, name: &str, no_spice: bool) -> String {
    let Ok(doc) = roxmltree::Document::parse(text) else {
        return text.to_string();
    };
    let mut edits: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    for c in doc
        .root_element()
        .children()
        .filter(roxmltree::Node::is_element)
    {
        match c.tag_name().name() {
            "name" => edits.push((c.range(), format!("<name>{name}</name>"))),
            "uuid" => edits.push((c.range(), String::new())),
            "devices" if no_spice => {
                for d in c.children().filter(roxmltree::Node::is_element) {
                    let spice = matches!(d.attribute("type"), Some("spice" | "spicevmc"));
                    if spice
                        && matches!(
                            d.tag_name().name(),
                            "graphics" | "channel" | "redirdev" | "audio"
                        )
                    {
                        edits.push((d.range(), String::new()));
                    }
                    if d.tag_name().name() == "video" {
                        for m in d.children().filter(|m| m.has_tag_name("model")) {
                            if m.attribute("type") == Some("qxl") {
                                edits.push((m.range(), "<model type='vga'/>".into()));
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
    edits.sort_by_key(|(r, _)| std::cmp::Reverse(r.start));
    let mut s = text.to_string();
    for (r, t) in edits {
        s.replace_range(r, &t);
    }
    s
}

fn corpus_on(oracle: &crate::harness::Oracle, files: &[PathBuf], dir: &Path) -> PerLibvirt {
    let policy = root().join("packaging/policy.toml").display().to_string();
    let mut r = PerLibvirt::default();
    for (i, f) in files.iter().enumerate() {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        let Input::Domain(facts) = classify(&text) else {
            continue;
        };
        let x86 = facts.arch == "x86_64" || facts.arch.is_empty();
        let arm_tcg =
            facts.virt_type == "qemu" && matches!(facts.arch.as_str(), "aarch64" | "armv7l");
        if !((x86 && matches!(facts.virt_type.as_str(), "kvm" | "qemu")) || arm_tcg) {
            continue;
        }
        let out = Cmd::new(&["rewrite", "--policy", &policy])
            .args(&oracle.tool_args())
            .arg(f.display().to_string())
            .run();
        let file = f.file_name().unwrap().to_string_lossy().into_owned();
        match out.code {
            1 => {
                r.refused += 1;
                continue;
            }
            0 => {}
            c => {
                r.failures
                    .push(format!("{file}: rewrite exit {c}: {}", out.stderr));
                continue;
            }
        }
        if out.stdout == text {
            r.unchanged += 1;
        } else {
            r.rewritten += 1;
        }
        if validate_with(oracle, &text) {
            if validate_with(oracle, &out.stdout) {
                r.validated += 1;
            } else {
                r.failures.push(format!(
                    "{file}: valid for {}'s virt-xml-validate, its rewrite is not",
                    oracle.label
                ));
            }
        }
        let name = format!("vcp-corpus-{}-{i}", std::process::id());
        let input = define_on(oracle, dir, &name, &text);
        let output = define_on(oracle, dir, &name, &out.stdout);
        match (&input, &output) {
            (Ok(()), Ok(())) => {
                r.defined_in += 1;
                r.defined_out += 1;
            }
            (Err(_), Ok(())) => {
                r.defined_out += 1;
                r.fixed.push(file);
            }
            // The same refusal of input and rewrite: about something else than the guest CPU
            // (a machine type this QEMU lacks, a device, an address).
            (Err(a), Err(b)) if reason(a) == reason(b) => {
                *r.alike.entry(reason(a)).or_default() += 1;
            }
            (_, Err(e)) if NOT_CPU.iter().any(|n| e.contains(n)) => r.not_cpu += 1,
            (Ok(()), Err(e)) => r.failures.push(format!(
                "{file}: {} defines the input but refuses the rewrite: {e}",
                oracle.label
            )),
            (Err(a), Err(b)) => r.failures.push(format!(
                "{file}: {} refuses the input ({a}) and the rewrite ({b}), for no reason the tool names",
                oracle.label
            )),
        }
    }
    r
}

#[test]
#[ignore = "needs the host's libvirtd and the Debian 13 root's: .ci/run starts them"]
fn corpus_per_libvirt_generation() {
    let dir = shared_corpus().join("virt-manager/domains");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let scratch = Scratch::new("corpus-libvirt");
    let mut failures = Vec::new();
    for oracle in crate::harness::oracles() {
        let t = Instant::now();
        let r = corpus_on(&oracle, &files, &scratch.0);
        eprintln!(
            "corpus: {}: x86_64 KVM/TCG and Arm TCG documents: {} rewritten, {} unchanged, {} refused (exit 1); virt-xml-validate of that libvirt: {} valid inputs, all {} rewrites valid; virsh define{}: {} inputs and {} outputs accepted ({} refused input(s) accepted once rewritten: {}), {} refused in and out for what the host lacks (SPICE, qxl, firmware, files), {} refused in and out alike [{:.1?}]",
            oracle.label,
            r.rewritten,
            r.unchanged,
            r.refused,
            r.validated,
            r.validated,
            if oracle.is_host() {
                ""
            } else {
                " (SPICE devices dropped, qxl video made VGA: this QEMU has neither)"
            },
            r.defined_in,
            r.defined_out,
            r.fixed.len(),
            r.fixed.join(", "),
            r.not_cpu,
            r.alike.values().sum::<usize>(),
            t.elapsed()
        );
        for (why, n) in &r.alike {
            eprintln!(
                "corpus: {}:   refused in and out alike: {n} × {why}",
                oracle.label
            );
        }
        failures.extend(r.failures);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
