//! Property tests on generated `<cpu>` shapes, calling the library directly (fast in debug
//! builds): for every generated domain and every test policy that `rewrite` accepts without an
//! error finding,
//!
//! 1. the result is a fixed point: `rewrite(output) == output`, and `changed` is false the second
//!    time;
//! 2. it has exactly one top-level `<cpu>` when the input had at least one, zero or one otherwise;
//! 3. untouched bytes are preserved: the output is the input with the first `<cpu>` replaced by
//!    one element and every later `<cpu>` deleted together with its line (the whitespace and
//!    newline before it), nothing else; `<metadata>` and the foreign `<cpu>` in it come out
//!    byte-identical;
//! 4. the output parses as XML and as a libvirt domain;
//!
//! and domains of a type the tool does not handle (xen) come out byte-identical.
//!
//! Each test counts how many cases it actually judged and fails if too few did, so a generator
//! that only produces refused domains cannot pass vacuously.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::fmt::Write as _;
use virt_cpu_policy::host::{Host, HostOptions};
use virt_cpu_policy::policy::Policy;
use virt_cpu_policy::rewrite::{Outcome, rewrite};

const CASES: u32 = 256;

// ---------------------------------------------------------------------------------------------
// Policies
// ---------------------------------------------------------------------------------------------

const V3: &str = "version = 1
[[rule]]
name = \"v3\"
match = { arch = \"x86_64\" }
cpu.min_level = \"x86-64-v3\"
";

const HOST_MODEL: &str = "version = 1
[[rule]]
name = \"host-model everywhere\"
cpu.mode = \"host-model\"
";

const MODEL_REQUIRE_DISABLE: &str = "version = 1
[[rule]]
name = \"skylake\"
match = { arch = \"x86_64\" }
cpu.model = \"Skylake-Client\"
cpu.fallback = \"forbid\"
cpu.require = [\"aes\", \"x2apic\"]
cpu.disable = [\"hle\", \"svm\"]
";

fn policies() -> Vec<(&'static str, Policy)> {
    vec![
        ("builtin", Policy::builtin()),
        ("v3", Policy::parse(V3, "v3").expect("v3 policy")),
        (
            "host-model",
            Policy::parse(HOST_MODEL, "host-model").expect("host-model policy"),
        ),
        (
            "model+require+disable",
            Policy::parse(MODEL_REQUIRE_DISABLE, "mrd").expect("model policy"),
        ),
    ]
}

fn host() -> Host {
    Host::discover(&HostOptions::default()).expect("host facts")
}

// ---------------------------------------------------------------------------------------------
// Generated shapes
// ---------------------------------------------------------------------------------------------

const MODES: [Option<&str>; 5] = [
    None,
    Some("custom"),
    Some("host-model"),
    Some("host-passthrough"),
    Some("maximum"),
];
const MATCHES: [Option<&str>; 4] = [None, Some("minimum"), Some("exact"), Some("strict")];
const CHECKS: [Option<&str>; 4] = [None, Some("none"), Some("partial"), Some("full")];
const MIGRATABLE: [Option<&str>; 3] = [None, Some("on"), Some("off")];
const MODELS: [&str; 9] = [
    "qemu64",
    "kvm64",
    "Nehalem",
    "Westmere",
    "Haswell",
    "Skylake-Client",
    "EPYC",
    "cortex-a57",
    "max",
];
const FALLBACKS: [Option<&str>; 3] = [None, Some("allow"), Some("forbid")];
const FEATURES: [&str; 9] = [
    "pni", "popcnt", "sse4.1", "svm", "x2apic", "lahf_lm", "ssse3", "aes", "hle",
];
const POLICIES: [Option<&str>; 6] = [
    None,
    Some("require"),
    Some("force"),
    Some("optional"),
    Some("disable"),
    Some("forbid"),
];

#[derive(Debug, Clone)]
struct Feature {
    name: &'static str,
    policy: Option<&'static str>,
    name_first: bool,
}

#[derive(Debug, Clone)]
struct CpuSpec {
    mode: Option<&'static str>,
    match_: Option<&'static str>,
    check: Option<&'static str>,
    migratable: Option<&'static str>,
    model: Option<(&'static str, Option<&'static str>)>,
    topology: Option<(u8, u8, u8)>,
    features: Vec<Feature>,
    numa: bool,
    comment_inside: bool,
    /// With no children: `<cpu/>` rather than `<cpu></cpu>`.
    self_closing: bool,
    /// A child element in another namespace.
    foreign_child: bool,
}

#[derive(Debug, Clone)]
struct DomSpec {
    vtype: &'static str,
    arch: &'static str,
    cpus: Vec<CpuSpec>,
    /// `'` or `"`.
    quote: char,
    /// One level of indentation, or None: everything on one line.
    indent: Option<&'static str>,
    /// Line ending (when not on one line).
    eol: &'static str,
    /// Spaces around `=` in attributes.
    eq_space: bool,
    /// A space before the `>` / `/>` that closes start tags.
    tag_space: bool,
    /// An XML declaration and a comment before `<domain>`.
    prolog: bool,
    /// `xmlns:qemu` on `<domain>` and a `<qemu:commandline>`.
    qemu_ns: bool,
    name: bool,
    memory: bool,
    devices: bool,
    /// 0 none, 1 before the `<cpu>` elements, 2 after the first `<cpu>`, 3 after `<devices>`.
    metadata: u8,
    comment_before: bool,
    comment_between: bool,
    comment_after: bool,
    /// The second and later `<numa>` differ from the first (a conflict).
    numa_differs: bool,
}

fn feature() -> impl Strategy<Value = Feature> {
    (
        prop::sample::select(&FEATURES[..]),
        prop::sample::select(&POLICIES[..]),
        any::<bool>(),
    )
        .prop_map(|(name, policy, name_first)| Feature {
            name,
            policy,
            name_first,
        })
}

fn cpu_spec() -> impl Strategy<Value = CpuSpec> {
    (
        (
            prop::sample::select(&MODES[..]),
            prop::sample::select(&MATCHES[..]),
            prop::sample::select(&CHECKS[..]),
            prop::sample::select(&MIGRATABLE[..]),
        ),
        prop::option::of((
            prop::sample::select(&MODELS[..]),
            prop::sample::select(&FALLBACKS[..]),
        )),
        prop::option::weighted(0.4, (Just(1u8), 1u8..=4, 1u8..=2)),
        prop::collection::vec(feature(), 0..=5),
        prop::bool::weighted(0.25),
        prop::bool::weighted(0.2),
        any::<bool>(),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(
                (mode, match_, check, migratable),
                model,
                topology,
                features,
                numa,
                comment_inside,
                self_closing,
                foreign_child,
            )| {
                CpuSpec {
                    mode,
                    match_,
                    check,
                    migratable,
                    model,
                    topology,
                    features,
                    numa,
                    comment_inside,
                    self_closing,
                    foreign_child,
                }
            },
        )
}

fn dom_spec(types: &'static [&'static str]) -> impl Strategy<Value = DomSpec> {
    (
        (
            prop::sample::select(types),
            prop::sample::select(&["x86_64", "x86_64", "aarch64", "i686"][..]),
            prop::collection::vec(cpu_spec(), 0..=3),
            prop::sample::select(&['\'', '"'][..]),
            prop::sample::select(&[Some(""), Some("  "), Some("    "), Some("\t"), None][..]),
        ),
        (
            prop::sample::select(&["\n", "\n", "\r\n"][..]),
            prop::bool::weighted(0.1),
            prop::bool::weighted(0.15),
            prop::bool::weighted(0.3),
            prop::bool::weighted(0.2),
        ),
        (
            prop::bool::weighted(0.8),
            prop::bool::weighted(0.7),
            prop::bool::weighted(0.7),
            0u8..=3,
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            prop::bool::weighted(0.1),
        ),
    )
        .prop_map(
            |(
                (vtype, arch, cpus, quote, indent),
                (eol, eq_space, tag_space, prolog, qemu_ns),
                (
                    name,
                    memory,
                    devices,
                    metadata,
                    comment_before,
                    comment_between,
                    comment_after,
                    numa_differs,
                ),
            )| DomSpec {
                vtype,
                arch,
                cpus,
                quote,
                indent,
                name,
                memory,
                devices,
                metadata,
                comment_before,
                comment_between,
                comment_after,
                numa_differs,
                eol,
                eq_space,
                tag_space,
                prolog,
                qemu_ns,
            },
        )
}

/// A rendered domain.
#[derive(Debug)]
struct Doc {
    text: String,
    /// The exact `<metadata>…</metadata>` bytes, when there is one.
    metadata: Option<String>,
}

impl DomSpec {
    fn nl(&self) -> &'static str {
        if self.indent.is_some() { self.eol } else { "" }
    }

    fn ind(&self, level: usize) -> String {
        self.indent.unwrap_or("").repeat(level)
    }

    fn attr(&self, name: &str, value: &str) -> String {
        let q = self.quote;
        let eq = if self.eq_space { " = " } else { "=" };
        format!(" {name}{eq}{q}{value}{q}")
    }

    /// What closes a start tag: `>` or `/>`, with the optional space before.
    fn close(&self, empty: bool) -> &'static str {
        match (self.tag_space, empty) {
            (false, false) => ">",
            (false, true) => "/>",
            (true, false) => " >",
            (true, true) => " />",
        }
    }

    fn metadata_text(&self) -> String {
        let (q, nl) = (self.quote, self.nl());
        format!(
            "<metadata>{nl}{i2}<m:cpu xmlns:m={q}urn:x-test:cpu{q} mode={q}host-passthrough{q}>{nl}{i3}<m:model>Nehalem</m:model>{nl}{i3}<m:feature policy={q}disable{q} name={q}lahf_lm{q}/>{nl}{i2}</m:cpu>{nl}{i2}<cpu xmlns={q}urn:x-other{q}><model>qemu64</model></cpu>{nl}{i1}</metadata>",
            i1 = self.ind(1),
            i2 = self.ind(2),
            i3 = self.ind(3),
        )
    }

    fn cpu_text(&self, c: &CpuSpec, numa_variant: usize) -> String {
        let nl = self.nl();
        let (i1, i2, i3) = (self.ind(1), self.ind(2), self.ind(3));
        let mut s = String::from("<cpu");
        for (n, v) in [
            ("mode", c.mode),
            ("match", c.match_),
            ("check", c.check),
            ("migratable", c.migratable),
        ] {
            if let Some(v) = v {
                s.push_str(&self.attr(n, v));
            }
        }
        let mut children: Vec<String> = Vec::new();
        if c.comment_inside {
            children.push("<!-- inside: <feature name='fake'/> -->".into());
        }
        if let Some((m, fb)) = c.model {
            let fb = fb.map(|f| self.attr("fallback", f)).unwrap_or_default();
            children.push(format!("<model{fb}>{m}</model>"));
        }
        if let Some((so, co, th)) = c.topology {
            children.push(format!(
                "<topology{}{}{}/>",
                self.attr("sockets", &so.to_string()),
                self.attr("cores", &co.to_string()),
                self.attr("threads", &th.to_string())
            ));
        }
        for f in &c.features {
            let name = self.attr("name", f.name);
            let pol = f.policy.map(|p| self.attr("policy", p)).unwrap_or_default();
            let end = self.close(true);
            if f.name_first {
                children.push(format!("<feature{name}{pol}{end}"));
            } else {
                children.push(format!("<feature{pol}{name}{end}"));
            }
        }
        if c.numa {
            let cpus = if numa_variant == 0 { "0-1" } else { "0" };
            children.push(format!(
                "<numa>{nl}{i3}<cell{}{}{}{}/>{nl}{i2}</numa>",
                self.attr("id", "0"),
                self.attr("cpus", cpus),
                self.attr("memory", "1048576"),
                self.attr("unit", "KiB")
            ));
        }
        if c.foreign_child {
            children.push(format!(
                "<x:hint xmlns:x={q}urn:x-hint{q} level={q}2{q}/>",
                q = self.quote
            ));
        }
        if children.is_empty() {
            if c.self_closing {
                s.push_str(self.close(true));
            } else {
                s.push_str(self.close(false));
                s.push_str("</cpu>");
            }
            return s;
        }
        s.push_str(self.close(false));
        for ch in children {
            let _ = write!(s, "{nl}{i2}{ch}");
        }
        let _ = write!(s, "{nl}{i1}</cpu>");
        s
    }

    fn render(&self) -> Doc {
        let nl = self.nl();
        let (i1, i2) = (self.ind(1), self.ind(2));
        let mut s = String::new();
        let line = |s: &mut String, text: &str| {
            let _ = write!(s, "{i1}{text}{nl}");
        };
        if self.prolog {
            let q = self.quote;
            let _ = write!(
                s,
                "<?xml version={q}1.0{q} encoding={q}UTF-8{q}?>{nl}<!-- generated; <cpu/> -->{nl}"
            );
        }
        let ns = if self.qemu_ns {
            self.attr("xmlns:qemu", "http://libvirt.org/schemas/domain/qemu/1.0")
        } else {
            String::new()
        };
        let _ = write!(s, "<domain{}{ns}>{nl}", self.attr("type", self.vtype));
        if self.name {
            line(&mut s, "<name>guest</name>");
            line(
                &mut s,
                "<description>not a &lt;cpu&gt;: <![CDATA[<cpu mode='host-model'/>]]> &amp; more</description>",
            );
        }
        let md = (self.metadata > 0).then(|| self.metadata_text());
        let mut md_written = false;
        if self.metadata == 1 {
            line(&mut s, md.as_deref().unwrap());
            md_written = true;
        }
        if self.memory {
            line(
                &mut s,
                &format!("<memory{}>1048576</memory>", self.attr("unit", "KiB")),
            );
            line(
                &mut s,
                &format!("<vcpu{}>2</vcpu>", self.attr("placement", "static")),
            );
        }
        let machine = if self.arch == "aarch64" { "virt" } else { "pc" };
        line(&mut s, "<os>");
        let _ = write!(
            s,
            "{i2}<type{}{}>hvm</type>{nl}",
            self.attr("arch", self.arch),
            self.attr("machine", machine)
        );
        line(&mut s, "</os>");
        if self.comment_before {
            line(&mut s, "<!-- before: <cpu mode='host-passthrough'/> -->");
        }
        let mut numa_seen = 0usize;
        for (i, c) in self.cpus.iter().enumerate() {
            if i > 0 && self.comment_between {
                line(&mut s, "<!-- between -->");
            }
            let variant = if c.numa && numa_seen > 0 && self.numa_differs {
                1
            } else {
                0
            };
            numa_seen += usize::from(c.numa);
            line(&mut s, &self.cpu_text(c, variant));
            if i == 0 && self.metadata == 2 {
                line(&mut s, md.as_deref().unwrap());
                md_written = true;
            }
        }
        if self.comment_after {
            line(&mut s, "<!-- after: </cpu> -->");
        }
        if self.devices {
            let emu = if self.arch == "aarch64" {
                "qemu-system-aarch64"
            } else {
                "qemu-system-x86_64"
            };
            line(&mut s, "<devices>");
            let _ = write!(s, "{i2}<emulator>/usr/bin/{emu}</emulator>{nl}");
            line(&mut s, "</devices>");
        }
        if md.is_some() && !md_written {
            line(&mut s, md.as_deref().unwrap());
        }
        if self.qemu_ns {
            let q = self.quote;
            line(
                &mut s,
                &format!(
                    "<qemu:commandline><qemu:arg value={q}-cpu{q}/><qemu:arg value={q}host{q}/></qemu:commandline>"
                ),
            );
        }
        let _ = write!(s, "</domain>{nl}");
        Doc {
            text: s,
            metadata: md,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

/// Byte ranges of the top-level libvirt `<cpu>` elements of a domain document.
fn top_cpus(text: &str) -> Vec<std::ops::Range<usize>> {
    let doc = roxmltree::Document::parse(text).expect("parses");
    doc.root_element()
        .children()
        .filter(|n| {
            n.is_element() && n.tag_name().name() == "cpu" && n.tag_name().namespace().is_none()
        })
        .map(|n| n.range())
        .collect()
}

/// The range deleted with a later `<cpu>` at `r`: the element, and when only spaces/tabs stand
/// between the start of its line and the element, those and the newline before them.
fn with_line(text: &str, r: std::ops::Range<usize>) -> std::ops::Range<usize> {
    let line_start = text[..r.start].rfind('\n').map_or(0, |i| i + 1);
    let before = &text[line_start..r.start];
    if line_start > 0 && before.chars().all(|c| c == ' ' || c == '\t') {
        let mut start = line_start - 1;
        if start > 0 && text.as_bytes()[start - 1] == b'\r' {
            start -= 1;
        }
        start..r.end
    } else {
        r
    }
}

/// Whether `s` is exactly one `<cpu>` element in libvirt's namespace.
fn is_one_cpu_element(s: &str) -> bool {
    (s.starts_with("<cpu>") || s.starts_with("<cpu ") || s.starts_with("<cpu/"))
        && roxmltree::Document::parse(s).is_ok_and(|d| d.root_element().tag_name().name() == "cpu")
}

fn fail(msg: String, input: &str, output: &str) -> TestCaseError {
    TestCaseError::fail(format!(
        "{msg}\n--- input ---\n{input}\n--- output ---\n{output}\n---"
    ))
}

/// Run every policy on `doc`; call `judge` for each (policy name, outcome) that has no error
/// finding. Returns how many were judged. A generated document is always well-formed, so
/// `rewrite` returning `Err` is itself a failure.
fn each_ok(
    doc: &Doc,
    pols: &[(&'static str, Policy)],
    host: &Host,
    mut judge: impl FnMut(&str, &Outcome) -> Result<(), TestCaseError>,
) -> Result<usize, TestCaseError> {
    let mut judged = 0;
    for (pname, p) in pols {
        let o = rewrite(&doc.text, "t", p, host).map_err(|e| {
            fail(
                format!("policy {pname}: rewrite failed: {e}"),
                &doc.text,
                "",
            )
        })?;
        if o.has_errors() {
            continue;
        }
        judge(pname, &o)?;
        judged += 1;
    }
    Ok(judged)
}

/// Run `cases` generated in-scope domains through `check`; fail if fewer than `min_percent` of
/// (case, policy) pairs were judged.
fn run_property(
    name: &str,
    types: &'static [&'static str],
    min_percent: usize,
    check: impl Fn(&Doc, &str, &Outcome, &Policy, &Host) -> Result<(), TestCaseError>,
) {
    let pols = policies();
    let host = host();
    let judged = std::cell::Cell::new(0usize);
    let total = std::cell::Cell::new(0usize);
    let mut runner = TestRunner::new(Config {
        failure_persistence: None,
        ..Config::with_cases(CASES)
    });
    let result = runner.run(&dom_spec(types), |spec| {
        let doc = spec.render();
        total.set(total.get() + pols.len());
        let n = each_ok(&doc, &pols, &host, |pname, o| {
            let p = &pols.iter().find(|(n, _)| *n == pname).unwrap().1;
            check(&doc, pname, o, p, &host)
        })?;
        judged.set(judged.get() + n);
        Ok(())
    });
    if let Err(e) = result {
        panic!("property {name}: {e}");
    }
    let (j, t) = (judged.get(), total.get());
    eprintln!("property {name}: judged {j} of {t} (case, policy) pairs");
    assert!(
        j * 100 >= t * min_percent,
        "property {name}: only {j} of {t} (case, policy) pairs were accepted without error findings; the generator is too hostile to test anything"
    );
}

const IN_SCOPE: &[&str] = &["kvm", "qemu"];

// ---------------------------------------------------------------------------------------------
// The properties
// ---------------------------------------------------------------------------------------------

#[test]
fn prop_idempotent() {
    run_property("idempotent", IN_SCOPE, 20, |doc, pname, o, p, host| {
        let again = rewrite(&o.output, "t", p, host).map_err(|e| {
            fail(
                format!("policy {pname}: second rewrite failed: {e}"),
                &doc.text,
                &o.output,
            )
        })?;
        if again.output != o.output {
            return Err(fail(
                format!(
                    "policy {pname}: not idempotent; second output:\n{}\nsecond changes: {:?}",
                    again.output, again.changes
                ),
                &doc.text,
                &o.output,
            ));
        }
        if again.changed {
            return Err(fail(
                format!(
                    "policy {pname}: `changed` is true on the second run: {:?}",
                    again.changes
                ),
                &doc.text,
                &o.output,
            ));
        }
        if again.has_errors() {
            return Err(fail(
                format!(
                    "policy {pname}: the output has error findings: {:?}",
                    again.findings
                ),
                &doc.text,
                &o.output,
            ));
        }
        if o.changed != (o.output != doc.text) {
            return Err(fail(
                format!(
                    "policy {pname}: `changed` is {} but output == input is {}",
                    o.changed,
                    o.output == doc.text
                ),
                &doc.text,
                &o.output,
            ));
        }
        Ok(())
    });
}

#[test]
fn prop_exactly_one_cpu() {
    run_property("one <cpu>", IN_SCOPE, 20, |doc, pname, o, _, _| {
        let had = top_cpus(&doc.text).len();
        let has = top_cpus(&o.output).len();
        let ok = if had > 0 { has == 1 } else { has <= 1 };
        if !ok {
            return Err(fail(
                format!("policy {pname}: {had} <cpu> in, {has} out"),
                &doc.text,
                &o.output,
            ));
        }
        Ok(())
    });
}

#[test]
fn prop_untouched_bytes_preserved() {
    run_property("untouched bytes", IN_SCOPE, 20, |doc, pname, o, _, _| {
        let input = doc.text.as_str();
        let out = o.output.as_str();
        let crlf_only = |t: &str| t.contains("\r\n") && !t.replace("\r\n", "").contains('\n');
        if crlf_only(input) && out.replace("\r\n", "").contains('\n') {
            return Err(fail(
                format!(
                    "policy {pname}: the input uses CRLF line endings only, the output has bare LF"
                ),
                input,
                out,
            ));
        }
        if let Some(md) = &doc.metadata {
            if out.matches(md.as_str()).count() != 1 {
                return Err(fail(
                    format!("policy {pname}: <metadata> not byte-identical:\n{md}"),
                    input,
                    out,
                ));
            }
        }
        let cpus = top_cpus(input);
        if cpus.is_empty() {
            if out == input {
                return Ok(());
            }
            // One <cpu> inserted, with a newline and indentation on one side of it.
            let added = top_cpus(out);
            if added.len() != 1 {
                return Err(fail(
                    format!("policy {pname}: {} <cpu> added", added.len()),
                    input,
                    out,
                ));
            }
            let r = added[0].clone();
            let (before, after) = (&out[..r.start], &out[r.end..]);
            let ws = |c: char| c == ' ' || c == '\t';
            let strip_eol_end = |t: &'_ str| -> String {
                let t = t.trim_end_matches(ws);
                t.strip_suffix("\r\n")
                    .or_else(|| t.strip_suffix('\n'))
                    .unwrap_or(t)
                    .to_string()
            };
            let strip_eol_start = |t: &'_ str| -> String {
                let u = t
                    .strip_prefix("\r\n")
                    .or_else(|| t.strip_prefix('\n'))
                    .unwrap_or(t);
                u.trim_start_matches(ws).to_string()
            };
            let b_ws = before.trim_end_matches(ws);
            let candidates = [
                // "\n{ind}<cpu>" inserted after an element
                format!("{}{after}", strip_eol_end(before)),
                // "<cpu>\n{ind}" inserted before an element
                format!("{before}{}", strip_eol_start(after)),
                // "{ind}<cpu>\n" inserted before the end tag
                format!(
                    "{b_ws}{}",
                    after
                        .strip_prefix("\r\n")
                        .or_else(|| after.strip_prefix('\n'))
                        .unwrap_or(after)
                ),
            ];
            if !candidates.iter().any(|c| c == input) {
                return Err(fail(
                    format!(
                        "policy {pname}: removing the added <cpu> (and its line) does not give the input back"
                    ),
                    input,
                    out,
                ));
            }
            return Ok(());
        }
        // The expected skeleton: input up to the first <cpu>, then one <cpu> element, then the
        // input after the first <cpu> with every later <cpu> removed with its line.
        let first = cpus[0].clone();
        let prefix = &input[..first.start];
        let mut rest = String::new();
        let mut pos = first.end;
        for r in &cpus[1..] {
            let del = with_line(input, r.clone());
            rest.push_str(&input[pos..del.start]);
            pos = del.end;
        }
        rest.push_str(&input[pos..]);
        if !out.starts_with(prefix) {
            return Err(fail(
                format!("policy {pname}: the bytes before the first <cpu> changed"),
                input,
                out,
            ));
        }
        if !out.ends_with(rest.as_str()) || out.len() < prefix.len() + rest.len() {
            return Err(fail(
                format!(
                    "policy {pname}: the bytes after the first <cpu> (later <cpu> removed with their line) are not a suffix of the output; expected suffix:\n{rest}"
                ),
                input,
                out,
            ));
        }
        let middle = &out[prefix.len()..out.len() - rest.len()];
        if !is_one_cpu_element(middle) {
            return Err(fail(
                format!(
                    "policy {pname}: the first <cpu> was replaced by something other than one <cpu> element: {middle:?}"
                ),
                input,
                out,
            ));
        }
        if !o.changed && out != input {
            return Err(fail(
                format!("policy {pname}: unchanged yet different"),
                input,
                out,
            ));
        }
        Ok(())
    });
}

#[test]
fn prop_output_parses() {
    run_property("output parses", IN_SCOPE, 20, |doc, pname, o, _, _| {
        if let Err(e) = roxmltree::Document::parse(&o.output) {
            return Err(fail(
                format!("policy {pname}: output is not XML: {e}"),
                &doc.text,
                &o.output,
            ));
        }
        if let Err(e) = virt_cpu_policy::domain::Domain::parse(&o.output, "out") {
            return Err(fail(
                format!("policy {pname}: output is not a domain: {e}"),
                &doc.text,
                &o.output,
            ));
        }
        Ok(())
    });
}

#[test]
fn prop_out_of_scope_types_pass_through() {
    let pols = policies();
    let host = host();
    let mut runner = TestRunner::new(Config {
        failure_persistence: None,
        ..Config::with_cases(CASES)
    });
    let result = runner.run(&dom_spec(&["xen", "lxc", "test"]), |spec| {
        let doc = spec.render();
        for (pname, p) in &pols {
            let o = rewrite(&doc.text, "t", p, &host)
                .map_err(|e| fail(format!("policy {pname}: rewrite failed: {e}"), &doc.text, ""))?;
            if o.output != doc.text || o.changed || o.in_scope || !o.findings.is_empty() {
                return Err(fail(
                    format!(
                        "policy {pname}: out-of-scope domain not passed through (changed {}, in_scope {}, findings {:?})",
                        o.changed, o.in_scope, o.findings
                    ),
                    &doc.text,
                    &o.output,
                ));
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("out-of-scope pass-through: {e}");
    }
}

/// The generator itself: rendered documents are well-formed domains whose top-level `<cpu>`
/// count is the spec's.
#[test]
fn prop_generator_is_sound() {
    let mut runner = TestRunner::new(Config {
        failure_persistence: None,
        ..Config::with_cases(64)
    });
    runner
        .run(&dom_spec(&["kvm", "qemu", "xen"]), |spec| {
            let doc = spec.render();
            prop_assert!(
                roxmltree::Document::parse(&doc.text).is_ok(),
                "{}",
                doc.text
            );
            prop_assert_eq!(top_cpus(&doc.text).len(), spec.cpus.len(), "{}", doc.text);
            if spec.indent.is_none() {
                prop_assert!(!doc.text.contains('\n'));
            }
            Ok(())
        })
        .unwrap();
}
