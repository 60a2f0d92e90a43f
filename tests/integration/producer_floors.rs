//! virt-install's own domains of the OS families with a CPU floor (issue 31's golden cases): the
//! RHEL 9 and RHEL 10 families of the producer corpus (`tests/data/producers`, made by
//! `tests/producers/virt_install.py`; RHEL 10 and its rebuilds with the newer osinfo-db that
//! `tests/producers/regenerate` fetches), in every form the corpus holds (virt-install's
//! `--print-xml`, libvirt's stored and live forms), each on the generations it was made for.
//!
//! * With each generation's captured facts (no libvirt needed): the tool reads the document's
//!   libosinfo id and judges its floor; `check` with the built-in policy exits as
//!   docs/exit-codes.md says (3: a rewrite reaches the floor; 1: it cannot, with `os-floor`; 0:
//!   the CPU already holds it); `rewrite` writes a CPU whose model (that generation's cpu_map)
//!   and required features hold every feature of the level, which `check` calls conforming.
//! * Against each generation's libvirt and QEMU (the oracle): a TCG guest asking for every
//!   x86-64-v3 feature shows which of them that QEMU's TCG gives (the QOM properties of its
//!   vCPU); each TCG document rewritten by the built-in policy is defined and started, and its
//!   vCPU must have every feature of the floor; where the tool refuses instead (`os-floor`), the
//!   features it says are missing must be exactly those that QEMU leaves out.
//! * Under KVM (virt-install's default for these OSes is host-passthrough, which no rewrite
//!   changes): `check` with the generation's live facts against the vCPU KVM gives.
//!
//! The levels and the floors below are the test's own statement of the specification (the
//! psABI, the vendors' release notes), not read from the tool.

use crate::harness::{
    Generation, Oracle, Output, Scratch, bin, generation_scratch, generations, in_parallel, root, s,
};
use crate::producers::{DATA, Facts, manifest, renamed, startable, tool};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// An x86-64 psABI level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    V2,
    V3,
}

/// x86-64-v2 in libvirt's feature names: CMPXCHG16B, LAHF/SAHF, POPCNT, SSE3, SSE4.1, SSE4.2,
/// SSSE3.
const V2: [&str; 7] = [
    "cx16", "lahf_lm", "popcnt", "pni", "sse4.1", "sse4.2", "ssse3",
];

/// What x86-64-v3 adds: AVX, AVX2, BMI1, BMI2, F16C, FMA, LZCNT (`abm`), MOVBE, XSAVE.
const V3_ADDS: [&str; 9] = [
    "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave",
];

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::V2 => "x86-64-v2",
            Level::V3 => "x86-64-v3",
        }
    }

    fn features(self) -> BTreeSet<&'static str> {
        let mut f: BTreeSet<&str> = V2.into_iter().collect();
        if self == Level::V3 {
            f.extend(V3_ADDS);
        }
        f
    }
}

/// The families of issue 31 with a floor, by libosinfo id (a version's id is BASE or
/// BASE.MINOR), and the level each needs: RHEL 9 x86-64-v2, RHEL 10 x86-64-v3 (Red Hat's
/// release notes, "Architectures"); the rebuilds are built from RHEL's sources.
const FAMILIES: [(&str, Level); 10] = [
    ("http://redhat.com/rhel/9", Level::V2),
    ("http://centos.org/centos-stream/9", Level::V2),
    ("http://almalinux.org/almalinux/9", Level::V2),
    ("http://rockylinux.org/rocky/9", Level::V2),
    ("http://oracle.com/ol/9", Level::V2),
    ("http://redhat.com/rhel/10", Level::V3),
    ("http://centos.org/centos-stream/10", Level::V3),
    ("http://almalinux.org/almalinux/10", Level::V3),
    ("http://rockylinux.org/rocky/10", Level::V3),
    ("http://oracle.com/ol/10", Level::V3),
];

/// The ids the corpus must hold for these tests to say anything: RHEL 9 (Debian 12's
/// osinfo-db) and the RHEL 10 family the pinned newer osinfo-db knows (it has no rocky10 or
/// ol10 yet: `tests/producers/regenerate`).
const REQUIRED_IDS: [&str; 4] = [
    "http://redhat.com/rhel/9.0",
    "http://redhat.com/rhel/10.0",
    "http://centos.org/centos-stream/10",
    "http://almalinux.org/almalinux/10",
];

const LIBOSINFO_NS: &str = "http://libosinfo.org/xmlns/libvirt/domain/1.0";

/// One document of the corpus tagged with an OS of [`FAMILIES`].
struct Tagged {
    /// Its path under [`DATA`].
    file: String,
    /// The libvirt versions it was made for.
    versions: Vec<String>,
    text: String,
    /// Its libosinfo id.
    id: String,
    level: Level,
    /// `<domain type='qemu'>`.
    tcg: bool,
}

impl Tagged {
    fn path(&self) -> PathBuf {
        root().join(DATA).join(&self.file)
    }
}

/// The level the family of libosinfo id `id` needs, if [`FAMILIES`] has it.
fn family(id: &str) -> Option<Level> {
    FAMILIES.iter().find_map(|(base, level)| {
        let rest = id.strip_prefix(base)?;
        (rest.is_empty() || rest.starts_with('.')).then_some(*level)
    })
}

/// virt-install's documents of the corpus (every form) tagged with an OS of [`FAMILIES`].
fn tagged() -> Vec<Tagged> {
    let docs: Vec<Tagged> = manifest()
        .into_iter()
        .filter(|d| d.file.starts_with("virt-install/"))
        .filter_map(|d| {
            let text = std::fs::read_to_string(root().join(DATA).join(&d.file)).unwrap();
            let doc = roxmltree::Document::parse(&text).ok()?;
            let id = doc
                .descendants()
                .find(|n| {
                    n.tag_name().name() == "os" && n.tag_name().namespace() == Some(LIBOSINFO_NS)
                })
                .and_then(|n| n.attribute("id"))?
                .to_string();
            let level = family(&id)?;
            let tcg = doc.root_element().attribute("type") == Some("qemu");
            Some(Tagged {
                file: d.file,
                versions: d.versions,
                text: text.clone(),
                id,
                level,
                tcg,
            })
        })
        .collect();
    let ids: BTreeSet<&str> = docs.iter().map(|d| d.id.as_str()).collect();
    for want in REQUIRED_IDS {
        assert!(
            ids.contains(want),
            "{DATA} has no virt-install document tagged {want} (tests/producers/regenerate): {ids:?}"
        );
    }
    assert!(
        docs.iter().any(|d| d.tcg && d.level == Level::V2)
            && docs.iter().any(|d| d.tcg && d.level == Level::V3),
        "{DATA}: no TCG document of the RHEL 9 or of the RHEL 10 family"
    );
    docs
}

/// The built-in policy: `src/policy/mod.rs` includes `packaging/policy.toml` as it; named
/// explicitly so that a machine's `/etc/virt-cpu-policy/policy.toml` never stands in for it.
fn builtin_policy() -> String {
    s(&root().join("packaging/policy.toml"))
}

/// `COMMAND --policy BUILT-IN [EXTRA...] FACTS... FILE` for `doc`.
fn args(command: &str, extra: &[&str], facts: &Facts, doc: &str, file: &Path) -> Vec<String> {
    let mut a = vec![command.to_string(), "--policy".into(), builtin_policy()];
    a.extend(extra.iter().map(|e| e.to_string()));
    a.extend(facts.args(doc));
    a.push(s(file));
    a
}

/// The features model `name` has in the cpu_map at `dir` (its `x86_*.xml` files), with those
/// of the models it names (`<model name='Nehalem'/>` in `Nehalem-v1`).
fn model_features(dir: &Path, name: &str) -> Option<BTreeSet<String>> {
    for entry in std::fs::read_dir(dir).ok()? {
        let path = entry.ok()?.path();
        let file = path.file_name()?.to_string_lossy().into_owned();
        if !file.starts_with("x86_") || !file.ends_with(".xml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).ok()?;
        let doc = roxmltree::Document::parse(&text).ok()?;
        let Some(model) = doc.descendants().find(|n| {
            n.has_tag_name("model")
                && n.attribute("name") == Some(name)
                && n.parent().is_some_and(|p| p.has_tag_name("cpus"))
        }) else {
            continue;
        };
        let mut out = BTreeSet::new();
        for c in model.children().filter(roxmltree::Node::is_element) {
            match c.tag_name().name() {
                "feature" => {
                    out.insert(c.attribute("name")?.to_string());
                }
                "model" => out.extend(model_features(dir, c.attribute("name")?)?),
                _ => {}
            }
        }
        return Some(out);
    }
    None
}

/// The features of `level` that `has` lacks, in the level's order.
fn lacking_of(level: Level, has: &BTreeSet<String>) -> Vec<&'static str> {
    level
        .features()
        .into_iter()
        .filter(|f| !has.contains(*f))
        .collect()
}

/// The features the custom `<cpu>` of `doc` gives the guest by libvirt's cpu_map at `cpu_map`:
/// its model's, and those it requires or forces, less those it disables or forbids. None when
/// the CPU is not a custom one with a model.
fn custom_cpu_features(cpu_map: &Path, doc: &str) -> Option<BTreeSet<String>> {
    let d = roxmltree::Document::parse(doc).ok()?;
    let cpu = d
        .root_element()
        .children()
        .find(|n| n.has_tag_name("cpu"))?;
    if cpu.attribute("mode").unwrap_or("custom") != "custom" {
        return None;
    }
    let model = cpu.children().find(|n| n.has_tag_name("model"))?.text()?;
    let mut out = model_features(cpu_map, model.trim())?;
    for f in cpu.children().filter(|n| n.has_tag_name("feature")) {
        let name = f.attribute("name")?.to_string();
        match f.attribute("policy").unwrap_or("require") {
            "require" | "force" => out.insert(name),
            _ => out.remove(&name),
        };
    }
    Some(out)
}

/// `check --format json`'s report: (exit, the report).
fn check_json(facts: &Facts, doc: &str, file: &Path) -> (Output, serde_json::Value) {
    let out = tool(
        Path::new(bin()),
        &args("check", &["--format", "json"], facts, doc, file),
    );
    let v = serde_json::from_str(out.stdout.trim()).unwrap_or_default();
    (out, v)
}

/// A JSON report (`rewrite --explain --format json` writes it on stderr).
fn json_report(json: &str) -> serde_json::Value {
    serde_json::from_str(json.trim()).unwrap_or_default()
}

/// The error findings of a JSON report: (code, message).
fn errors(v: &serde_json::Value) -> Vec<(String, String)> {
    v["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["severity"] == "error")
        .map(|f| {
            (
                f["code"].as_str().unwrap_or("").to_string(),
                f["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The features an `os-floor` message says the CPU misses (`... reaches x86-64-v2: missing avx,
/// avx2: its kernel ...`).
fn said_missing(message: &str) -> BTreeSet<String> {
    message
        .split_once(": missing ")
        .map(|(_, rest)| rest.split_once(':').map_or(rest, |(m, _)| m))
        .unwrap_or("")
        .split(',')
        .map(|f| f.trim().to_string())
        .filter(|f| !f.is_empty())
        .collect()
}

/// The refusal of a CPU below its floor, from a JSON report's errors: `os-floor`, or for a
/// `check='full'` CPU under TCG (libvirt's live form) `tcg-check-full`, libvirt's own refusal
/// at start of the CPU raised to the floor (`missing features: avx,avx2 (...`): (code, message,
/// the features it says are missing).
fn floor_refusal(errs: &[(String, String)]) -> Option<(String, String, BTreeSet<String>)> {
    errs.iter().find_map(|(code, msg)| {
        let missing = match code.as_str() {
            "os-floor" => said_missing(msg),
            "tcg-check-full" => msg
                .split_once("missing features: ")
                .map(|(_, rest)| rest.split_once(" (").map_or(rest, |(m, _)| m))
                .unwrap_or("")
                .split(',')
                .map(|f| f.trim().to_string())
                .filter(|f| !f.is_empty())
                .collect(),
            _ => return None,
        };
        Some((code.clone(), msg.clone(), missing))
    })
}

/// The generations whose facts are captured: libvirt version → (name, facts dir).
fn captured_generations() -> BTreeMap<String, (String, PathBuf)> {
    let dir = root().join("tests/data/generations");
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let Ok(version) = std::fs::read_to_string(p.join("version")) else {
            continue;
        };
        if let Some(v) = version.lines().find_map(|l| l.strip_prefix("libvirt ")) {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            out.insert(v.trim().to_string(), (name, p));
        }
    }
    out
}

/// One document on one generation with its captured facts: what `check` and `rewrite` say.
/// Err with what is wrong.
fn judge_captured(d: &Tagged, generation: &str, dir: &Path, facts: &Facts) -> Result<i32, String> {
    let file = d.path();
    let (out, v) = check_json(facts, &d.text, &file);
    let os = &v["os"];
    let want = (
        Some(d.id.as_str()),
        Some("libosinfo"),
        Some(d.level.name()),
        Some("judged"),
    );
    let got = (
        os["id"].as_str(),
        os["source"].as_str(),
        os["needs"].as_str(),
        os["floor"].as_str(),
    );
    if got != want {
        return Err(format!(
            "check's os is {os} (wanted id {}, libosinfo, needs {}, judged)\n{}{}",
            d.id,
            d.level.name(),
            out.stdout,
            out.stderr
        ));
    }
    if v["exit"].as_i64() != Some(i64::from(out.code)) {
        return Err(format!(
            "exit {} but the report says {}",
            out.code, v["exit"]
        ));
    }
    let errs = errors(&v);
    let rewrite = tool(
        Path::new(bin()),
        &args("rewrite", &[], facts, &d.text, &file),
    );
    match out.code {
        // docs/exit-codes.md: conforms only after a rewrite; the rewrite reaches the floor.
        3 => {
            if !errs.is_empty() || v["verdict"] != "needs-rewrite" {
                return Err(format!("exit 3 with {errs:?}, verdict {}", v["verdict"]));
            }
            if rewrite.code != 0 {
                return Err(format!(
                    "check exits 3 but rewrite exits {}: {}",
                    rewrite.code, rewrite.stderr
                ));
            }
            let cpu_map = dir.join("cpu_map");
            let has = custom_cpu_features(&cpu_map, &rewrite.stdout).unwrap_or_default();
            let lacking = lacking_of(d.level, &has);
            if !lacking.is_empty() {
                return Err(format!(
                    "the rewrite's CPU lacks {lacking:?} of {} (by {generation}'s cpu_map):\n{}",
                    d.level.name(),
                    rewrite.stdout
                ));
            }
            let tmp = Scratch::new("floor-rewritten");
            let written = tmp.write("rewritten.xml", &rewrite.stdout);
            let (again, av) = check_json(facts, &rewrite.stdout, &written);
            if again.code != 0 || av["os"]["floor"] != "judged" {
                return Err(format!(
                    "check of the rewrite exits {} (os {}): {}",
                    again.code, av["os"], again.stdout
                ));
            }
            let twice = tool(
                Path::new(bin()),
                &args("rewrite", &[], facts, &rewrite.stdout, &written),
            );
            if twice.stdout != rewrite.stdout {
                return Err("the rewrite is not a fixed point".into());
            }
        }
        // Cannot conform: below the floor, and no rewrite gives it (TCG or the host lacks it).
        1 => {
            let Some((code, msg, said)) = floor_refusal(&errs) else {
                return Err(format!(
                    "exit 1 without os-floor or tcg-check-full: {errs:?}"
                ));
            };
            let outside: Vec<&String> = said
                .iter()
                .filter(|f| !d.level.features().contains(f.as_str()))
                .collect();
            if said.is_empty() || !outside.is_empty() {
                return Err(format!(
                    "the {code} error does not name the missing features of {}: {msg}",
                    d.level.name()
                ));
            }
            if code == "os-floor" && !msg.contains(&format!("needs {}", d.level.name())) {
                return Err(format!("the os-floor error names no level: {msg}"));
            }
            if d.tcg && !msg.contains("TCG") {
                return Err(format!("a TCG guest's {code} error names no TCG: {msg}"));
            }
            if rewrite.code != 1 || !rewrite.stderr.contains(&format!("error[{code}]")) {
                return Err(format!(
                    "check exits 1 ({code}) but rewrite exits {}: {}",
                    rewrite.code, rewrite.stderr
                ));
            }
        }
        // Conforms as it is: the CPU holds the floor (a custom one by the cpu_map; what KVM's
        // host-passthrough gives is for the KVM oracle to say).
        0 => {
            if !errs.is_empty() || rewrite.code != 0 || rewrite.stdout != d.text {
                return Err(format!(
                    "check exits 0 but rewrite exits {} with changes, or errors {errs:?}",
                    rewrite.code
                ));
            }
            if let Some(has) = custom_cpu_features(&dir.join("cpu_map"), &d.text) {
                let lacking = lacking_of(d.level, &has);
                if !lacking.is_empty() {
                    return Err(format!("check exits 0, the CPU lacks {lacking:?}"));
                }
            }
        }
        code => {
            return Err(format!(
                "check exits {code} ({errs:?}):\n{}{}",
                out.stdout, out.stderr
            ));
        }
    }
    Ok(out.code)
}

/// Every document of [`tagged`] on every generation it was made for, with that generation's
/// captured facts ([`judge_captured`]): the OS read, its floor judged, `check`'s exit, and the
/// rewrite's CPU at the floor.
#[test]
fn virt_installs_rhel_domains_are_judged_against_their_floor() {
    let t = Instant::now();
    let docs = tagged();
    let gens: Vec<(String, (String, PathBuf))> = captured_generations().into_iter().collect();
    let (mut failures, mut counts) = (Vec::new(), BTreeMap::new());
    let results: Vec<(String, String, Result<i32, String>)> =
        in_parallel(&gens, |(version, (name, dir))| {
            let (_, facts) = Facts::captured(dir, true);
            docs.iter()
                .filter(|d| d.versions.contains(version))
                .map(|d| {
                    (
                        name.clone(),
                        d.file.clone(),
                        judge_captured(d, name, dir, &facts),
                    )
                })
                .collect::<Vec<_>>()
        })
        .into_iter()
        .flatten()
        .collect();
    for (name, file, r) in &results {
        match r {
            Ok(code) => *counts.entry((name.clone(), *code)).or_insert(0) += 1,
            Err(e) => failures.push(format!("{name}: {file}: {e}")),
        }
    }
    eprintln!(
        "os-floor producers: {} documents x generations judged with captured facts, by (generation, check's exit): {counts:?} [{:.1?}]",
        results.len(),
        t.elapsed()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The QOM name of a libvirt feature (`lahf_lm` → `lahf-lm`).
fn qom_name(feature: &str) -> String {
    feature.replace('_', "-")
}

/// Whether the first vCPU of running guest `name` has each of `features` (QEMU's own answer:
/// `qom-get` of the feature's property on the vCPU `query-cpus-fast` names).
fn vcpu_features(
    o: &Oracle,
    name: &str,
    features: &BTreeSet<&str>,
) -> Result<BTreeMap<String, bool>, String> {
    let q = o.virsh(&[
        "qemu-monitor-command",
        name,
        r#"{"execute":"query-cpus-fast"}"#,
    ]);
    let v: serde_json::Value = serde_json::from_str(q.stdout.trim()).unwrap_or_default();
    let Some(path) = v["return"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["cpu-index"] == 0)
        .and_then(|c| c["qom-path"].as_str())
    else {
        return Err(format!("query-cpus-fast: {}{}", q.stdout, q.stderr));
    };
    let batch: Vec<String> = features
        .iter()
        .map(|f| {
            format!(
                r#"qemu-monitor-command {name} '{{"execute":"qom-get","arguments":{{"path":"{path}","property":"{}"}}}}'"#,
                qom_name(f)
            )
        })
        .collect();
    let b = o.virsh(&[&batch.join("; ")]);
    let answers: Vec<Option<bool>> = b
        .stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["return"].as_bool())
        .collect();
    if answers.len() != features.len() || answers.iter().any(Option::is_none) {
        return Err(format!("qom-get: {}{}", b.stdout, b.stderr));
    }
    Ok(features
        .iter()
        .zip(answers)
        .map(|(f, a)| (f.to_string(), a.unwrap_or(false)))
        .collect())
}

/// Define `text` as guest `name` on `o`, start it paused, ask its vCPU for `features`, destroy
/// and undefine it: the features it lacks, or libvirt's refusal.
fn start_and_ask(
    o: &Oracle,
    dir: &Path,
    name: &str,
    text: &str,
    features: &BTreeSet<&str>,
) -> Result<BTreeSet<String>, String> {
    let file = dir.join(format!("{name}.xml"));
    std::fs::write(&file, renamed(text, name)).unwrap();
    let d = o.virsh(&["define", &s(&file)]);
    if !d.ok {
        return Err(format!("refused at define: {}", d.stderr.trim()));
    }
    let st = o.virsh(&["start", "--paused", name]);
    let r = if st.ok {
        vcpu_features(o, name, features).map(|m| {
            m.into_iter()
                .filter(|(_, has)| !has)
                .map(|(f, _)| f)
                .collect()
        })
    } else {
        Err(format!("refused at start: {}", st.stderr.trim()))
    };
    let _ = o.virsh(&["destroy", name]);
    let _ = o.virsh(&["undefine", name]);
    r
}

/// What `g`'s QEMU gives under TCG of every x86-64-v3 feature asked for: the features a
/// diskless q35 guest with QEMU's qemu64 and every one of them required (`check='none'`: libvirt
/// passes them on and compares nothing) does not get. QEMU drops what its TCG does not emulate.
fn tcg_lacks(g: &Generation, dir: &Path, prefix: &str) -> Result<BTreeSet<String>, String> {
    let all = Level::V3.features();
    let required: String = all
        .iter()
        .map(|f| format!("<feature policy='require' name='{f}'/>"))
        .collect();
    let probe = format!(
        "<domain type='qemu'>\n  <name>probe</name>\n  <memory unit='MiB'>64</memory>\n  <vcpu>1</vcpu>\n  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n  </os>\n  <cpu mode='custom' match='exact' check='none'><model>qemu64</model>{required}</cpu>\n  <devices>\n    <memballoon model='none'/>\n  </devices>\n</domain>\n"
    );
    start_and_ask(g, dir, &format!("{prefix}probe"), &probe, &all)
}

/// One generation's TCG oracle over the TCG documents of [`tagged`] made for it: (the report's
/// lines, the failures).
fn tcg_generation(g: &Generation, docs: &[Tagged], tmp: &Path) -> (String, Vec<String>) {
    let t = Instant::now();
    let (prefix, _sweep, dir) = generation_scratch(g, "floor", tmp);
    let (mut report, mut failures) = (String::new(), Vec::new());
    let lacks = match tcg_lacks(g, &dir, &prefix) {
        Ok(l) => l,
        Err(e) => {
            failures.push(format!(
                "{}: the TCG probe (qemu64 + every x86-64-v3 feature) does not run: {e}",
                g.label
            ));
            return (report, failures);
        }
    };
    let qemu = crate::tcg::qemu_version(g);
    let facts = Facts::of(g, true);
    let (mut started, mut refused) = (BTreeMap::new(), BTreeMap::new());
    for (k, d) in docs
        .iter()
        .filter(|d| d.tcg && d.versions.contains(&g.version))
        .enumerate()
    {
        let level = d.level.features();
        let expected: BTreeSet<String> = level
            .iter()
            .filter(|f| lacks.contains(**f))
            .map(|f| f.to_string())
            .collect();
        let out = tool(
            Path::new(bin()),
            &args(
                "rewrite",
                &["--explain", "--format", "json"],
                &facts,
                &d.text,
                &d.path(),
            ),
        );
        let what = format!("{}: {} ({})", g.label, d.file, d.level.name());
        if out.code == 0 {
            let name = format!("{prefix}{k}");
            match start_and_ask(g, &dir, &name, &out.stdout, &level) {
                Ok(missing) if missing.is_empty() && expected.is_empty() => {
                    *started.entry(d.level.name()).or_insert(0) += 1;
                }
                Ok(missing) => failures.push(format!(
                    "{what}: the rewrite starts, its vCPU lacks {missing:?} (QEMU's TCG lacks {expected:?}) of the floor"
                )),
                Err(e) => failures.push(format!("{what}: the rewrite is {e}")),
            }
        } else if let Some((code, msg, said)) = (out.code == 1)
            .then(|| floor_refusal(&errors(&json_report(&out.stderr))))
            .flatten()
        {
            if said == expected && !said.is_empty() {
                *refused.entry((d.level.name(), code)).or_insert(0) += 1;
            } else {
                failures.push(format!(
                    "{what}: refused ({code}) as missing {said:?}; this QEMU's TCG lacks {expected:?} of the floor: {msg}"
                ));
            }
        } else {
            failures.push(format!(
                "{what}: rewrite exits {}: {}",
                out.code, out.stderr
            ));
        }
    }
    let lacking = if lacks.is_empty() {
        "gives every x86-64-v3 feature".to_string()
    } else {
        format!(
            "lacks {}",
            lacks.iter().cloned().collect::<Vec<_>>().join(", ")
        )
    };
    writeln!(
        report,
        "os-floor TCG: {} (QEMU {qemu}): its TCG {lacking}; rewritten, defined and started at the floor: {started:?}; refused as below the floor (agreeing with QEMU), by (level, code): {refused:?} [{:.1?}]",
        g.label,
        t.elapsed()
    )
    .unwrap();
    (report, failures)
}

/// One generation's oracle over the documents, in a scratch directory: its report line and its
/// failures.
type GenerationRun = fn(&Generation, &[Tagged], &Path) -> (String, Vec<String>);

/// `run` on each of `gens` at once (each generation its own libvirt), with the documents `docs`
/// and a scratch directory named by `tag`: each run's report printed, their failures returned.
fn on_each(gens: &[Generation], docs: &[Tagged], tag: &str, run: GenerationRun) -> Vec<String> {
    let tmp = Scratch::new(tag);
    let runs = in_parallel(gens, |g| run(g, docs, &tmp.0));
    let mut failures = Vec::new();
    for (report, f) in runs {
        eprint!("{report}");
        failures.extend(f);
    }
    failures
}

/// The TCG documents of [`tagged`] rewritten by the built-in policy with each generation's
/// captured facts, against that generation's libvirt and QEMU ([`tcg_generation`]): where its
/// TCG gives the floor, the rewrite defines, starts, and its vCPU has every feature of the
/// floor; where it does not (QEMU 5.2's TCG has no AVX), the tool refuses with `os-floor`
/// naming exactly what QEMU leaves out. The report says which generation is which.
#[test]
#[ignore = "needs the libvirt generations: .ci/run builds and starts them (tests/libvirt/generations)"]
fn virt_installs_rhel_tcg_domains_start_at_their_floor() {
    let t = Instant::now();
    let docs = tagged();
    let gens = generations();
    assert!(
        !gens.is_empty(),
        "no libvirt generation answers (tests/libvirt/start, tests/libvirt/generations start)"
    );
    let failures = on_each(&gens, &docs, "floor-tcg", tcg_generation);
    eprintln!(
        "os-floor TCG: {} generations [{:.1?}]",
        gens.len(),
        t.elapsed()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One generation's KVM oracle over the KVM documents of [`tagged`] made for it: `check` with
/// the built-in policy and this libvirt's live facts (the judged CPU is this machine's) against
/// the vCPU KVM gives the document's host-passthrough guest. The report's line, the failures.
fn kvm_generation(g: &Generation, docs: &[Tagged], tmp: &Path) -> (String, Vec<String>) {
    let t = Instant::now();
    let (prefix, _sweep, dir) = generation_scratch(g, "floorkvm", tmp);
    // Live facts: the judged CPU is this machine's, whatever machine captured the stored ones.
    let facts = Facts::live_kvm(g, &dir, true);
    let (mut failures, mut verdicts, mut msr_aborts) = (Vec::new(), BTreeMap::new(), 0);
    for (k, d) in docs
        .iter()
        .filter(|d| !d.tcg && d.versions.contains(&g.version))
        .enumerate()
    {
        let what = format!("{}: {} ({}, KVM)", g.label, d.file, d.level.name());
        let (out, v) = check_json(&facts, &d.text, &d.path());
        let said = errors(&v)
            .into_iter()
            .find(|(c, _)| c == "os-floor")
            .map(|(_, m)| said_missing(&m))
            .unwrap_or_default();
        if v["os"]["floor"] != "judged" {
            failures.push(format!("{what}: floor not judged: {}", v["os"]));
            continue;
        }
        // Started as the differential starts a document: without the devices this machine's
        // libvirts may lack (nothing the tool reads or writes is cut).
        let level = d.level.features();
        let name = format!("{prefix}{k}");
        match start_and_ask(g, &dir, &name, &startable(&d.text), &level) {
            Ok(missing) if missing == said => {
                *verdicts
                    .entry((d.level.name(), out.code, missing.is_empty()))
                    .or_insert(0) += 1;
            }
            Ok(missing) => failures.push(format!(
                "{what}: check exits {} saying missing {said:?}; the vCPU KVM gives lacks {missing:?}",
                out.code
            )),
            // QEMU before 10.1 on an AMD host aborts a host-passthrough guest on MSR 0x10a
            // (arch-capabilities) before its vCPU can be asked: the tool must have warned of it
            // (kvm-arch-capabilities, as kvm.rs judges it); that guest's floor is not asked.
            Err(e) if crate::kvm::msr_abort_of(g, &name, &e) => {
                let warned = v["findings"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|f| f["code"] == "kvm-arch-capabilities");
                if warned {
                    msr_aborts += 1;
                } else {
                    failures.push(format!(
                        "{what}: QEMU aborts on MSR 0x10a and the tool gave no kvm-arch-capabilities warning"
                    ));
                }
            }
            Err(e) => failures.push(format!("{what}: {e}")),
        }
    }
    let line = format!(
        "os-floor KVM: {}: (level, check's exit, the vCPU has the floor) -> documents: {verdicts:?}; not asked, QEMU aborting on MSR 0x10a as the tool warned (kvm-arch-capabilities): {msr_aborts} [{:.1?}]\n",
        g.label,
        t.elapsed()
    );
    (line, failures)
}

/// The KVM documents of [`tagged`] (virt-install's default for these OSes: host-passthrough,
/// which the rewrite keeps) on the generations whose KVM works here: `check`'s `os-floor` (with
/// this libvirt's live facts) must name exactly the features of the floor that the started
/// guest's vCPU lacks, and none when it has them all.
#[test]
#[ignore = "needs the libvirt generations and a usable /dev/kvm: .ci/run builds and starts them"]
fn virt_installs_rhel_kvm_domains_are_judged_by_what_kvm_gives() {
    if !crate::libvirt::kvm_or_skip("os-floor KVM") {
        return;
    }
    let t = Instant::now();
    let docs = tagged();
    let gens: Vec<Generation> = generations()
        .into_iter()
        .filter(|g| crate::kvm::KVM_GENERATIONS.contains(&g.name.as_str()))
        .collect();
    assert!(!gens.is_empty(), "no KVM generation answers");
    let failures = on_each(&gens, &docs, "floor-kvm", kvm_generation);
    eprintln!(
        "os-floor KVM: {} generations [{:.1?}]",
        gens.len(),
        t.elapsed()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
