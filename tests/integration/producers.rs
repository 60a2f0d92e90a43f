//! The tool on the field's producers (issue 19): every document of `tests/data/producers` (made
//! by virt-install, by OpenStack Nova's own libvirt driver, and libvirt's stored and live forms
//! of both: `tests/producers/README.md`), under three policies, judged by real libvirt on every
//! generation that answers.
//!
//! For each libvirt generation ([`generations`]: bullseye 7.0, bookworm 9.0 on this machine,
//! trixie 11.3, forky 12.8; the four judged side by side) the tool is given that generation's own
//! facts as `tests/data/generations/NAME` holds them ([`Facts`]: `--libvirt-version`, its
//! `cpu_map`, `capabilities.xml` and `domcapabilities-*.xml`, `--qemu-version` for its QEMU).
//! Each document made for that generation (MANIFEST.tsv) is:
//!
//! 1. defined as it is (`virsh define`), and for a TCG guest (`type='qemu'`) started paused and
//!    destroyed ([`startable`] says what is left out for the start: devices and host bindings
//!    this machine lacks, never anything the tool reads or writes);
//! 2. checked with an empty policy (what the tool says about the document as it stands);
//! 3. for each policy of [`POLICIES`]: `rewrite --explain --format json` (the document and
//!    `check`'s report); an output that differs from the input is defined (and started, for TCG)
//!    the same way, and rewritten again, which must leave it as it is.
//!
//! Each (document, policy) is one of (see [`Class`]): an agreement; a **false accept** (written
//! or called conforming, refused by libvirt for a reason in the tool's scope, [`in_scope`]); a
//! **contradicted refusal** (refused by the tool for what the document already is, accepted and
//! started by libvirt); a **broken guest** (the input is accepted at define and start, the
//! rewrite is not); or not judged (libvirt refuses input and output for a reason outside the
//! tool's scope; a refusal that is about the policy's target, or only about the guest OS's own
//! floor, which libvirt has nothing to say about). The counts per generation and policy are printed with the first examples of each
//! defect; the test fails on any defect: a false accept, a contradicted refusal, a broken guest,
//! a crash, a rewrite that is not a fixed point, or `check` and `rewrite` disagreeing.
//!
//! Guests are named `vcp-prod-<pid>-…`; a guard destroys and undefines every one of them on
//! each libvirt, also when the test fails.

use crate::harness::{
    Generation, Oracle, Output, Scratch, Sweep, bin, generations, in_parallel, root, s,
};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The corpus, relative to the project root.
pub(crate) const DATA: &str = "tests/data/producers";

/// The policies: (name, TOML).
pub(crate) const POLICIES: [(&str, &str); 3] = [
    (
        "min-v2",
        "version = 1\n\n[[rule]]\nname = \"x86-64-v2\"\nmatch = { arch = \"x86_64\" }\ncpu.min_level = \"x86-64-v2\"\n",
    ),
    (
        "host-model",
        "version = 1\n\n[[rule]]\nname = \"host-model\"\ncpu.mode = \"host-model\"\n",
    ),
    (
        "vcpu-384",
        "version = 1\n\n[[rule]]\nname = \"vcpu 384\"\nvcpu.max = 384\nvcpu.topology = \"sockets\"\nvcpu.iommu = \"auto\"\n",
    ),
];

/// The default start sample per generation ([`start_budget`]): what fits the CI budget of about
/// five minutes for the whole test on 2 cores (a TCG guest of 255 vCPUs takes seconds to start).
const STARTS: usize = 40;

/// Threads per generation (`VCP_PRODUCERS_WORKERS`, default 2): libvirt and QEMU wait on each
/// other at every start, so two workers keep the CPUs busier than one.
fn workers() -> usize {
    std::env::var("VCP_PRODUCERS_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(2)
}

/// How many examples of each defect are printed.
const EXAMPLES: usize = 4;

/// The tool's error codes for rules libvirt checks when it defines a domain (README "What the
/// rewrite does", 8): a refusal for one of them is contradicted by a define alone. Every other
/// code (an unknown model or feature, a mode this virt type lacks, x86 names on another arch,
/// TCG and x2APIC, `clusters`...) is a rule libvirt or QEMU applies at start, judged only on
/// a start.
const DEFINE_TIME: &[&str] = &[
    "cpu-mode-invalid",
    "cpu-migratable-mode",
    "cpu-features-without-model",
    "cpu-vendor-without-model",
    "cpu-feature-duplicate",
    "cpu-feature-invalid",
    "vcpu-invalid",
    "vcpu-current",
    "topology-mismatch",
    "topology-invalid",
    "machine-vcpu-limit",
    "machine-unsupported",
    "x86-vcpu-q35",
    "iommu-eim",
    "iommu-intremap",
    "ioapic-split",
    "iommu-machine",
    "vcpus-invalid",
    "vcpus-order",
    "numa-vcpus",
    "numa-overlap",
    "numa-invalid",
    "memory-hotplug-numa",
];

/// The tool's error codes for what the guest's own OS needs ([`classify`]): no libvirt checks
/// them, so a refusal for them alone is not judged here.
const GUEST_OS_RULES: &[&str] = &["os-floor"];

/// Substrings of libvirt's and QEMU's error texts that put a refusal in the tool's scope: the
/// guest CPU (mode, model, features, `check`), vCPU counts and topology, guest NUMA cells,
/// IOMMU and I/O APIC, machine types. Matched case-insensitively.
const IN_SCOPE: &[&str] = &[
    "cpu",
    "topology",
    "numa",
    "iommu",
    "ioapic",
    "apic",
    "-smp",
    "irqchip",
    "machine type",
    "host-model",
    "host-passthrough",
    "hotplug",
    "sockets",
    "threads",
];

/// Substrings that put a refusal out of scope even when it says "cpu": host-side placement
/// (`<cputune>`, `<numatune>`, `<vcpu cpuset>`) is the operator's, not the guest CPU.
const OUT_OF_SCOPE: &[&str] = &["cpuset", "vcpupin", "emulatorpin", "cputune", "numatune"];

/// Whether libvirt's refusal `msg` is about something the tool decides.
fn in_scope(msg: &str) -> bool {
    let m = msg.to_lowercase();
    IN_SCOPE.iter().any(|k| m.contains(k)) && !OUT_OF_SCOPE.iter().any(|k| m.contains(k))
}

/// How many TCG documents of one generation are started (`VCP_PRODUCERS_STARTS`, a number or
/// `all`; default [`STARTS`]): the first ones in an order given by [`start_seed`]. The
/// others are judged at define only, as KVM documents are.
fn start_budget() -> usize {
    match std::env::var("VCP_PRODUCERS_STARTS").as_deref() {
        Ok("all") => usize::MAX,
        Ok(n) => n
            .parse()
            .unwrap_or_else(|_| panic!("VCP_PRODUCERS_STARTS={n}: a number or `all`")),
        Err(_) => STARTS,
    }
}

/// The seed of the start sample's order (`VCP_PRODUCERS_SEED`; default the checkout's commit,
/// `git rev-parse HEAD`, or `fixed` outside a git checkout): each commit starts another sample,
/// so that CI runs cover the whole corpus over time, and a failing run is repeated exactly with
/// the seed it prints.
pub(crate) fn start_seed() -> String {
    if let Ok(seed) = std::env::var("VCP_PRODUCERS_SEED") {
        return seed;
    }
    Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(root())
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "fixed".to_string())
}

/// FNV-1a of a file name: a fixed, well-mixed order for the start sample.
pub(crate) fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// One document of the manifest.
pub(crate) struct Doc {
    /// Path under [`DATA`].
    pub(crate) file: String,
    /// libvirt versions it was made for (`9.0.0`...).
    pub(crate) versions: Vec<String>,
    /// The first producer/form/source@version that gave it.
    made: String,
}

pub(crate) fn manifest() -> Vec<Doc> {
    let path = root().join(DATA).join("MANIFEST.tsv");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (tests/producers/regenerate)", path.display()));
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut f = l.split('\t');
            let file = f.next().unwrap().to_string();
            let versions = f
                .next()
                .unwrap_or_default()
                .split(',')
                .map(str::to_string)
                .collect();
            let made = f
                .next()
                .unwrap_or_default()
                .split(',')
                .next()
                .unwrap_or_default()
                .to_string();
            Doc {
                file,
                versions,
                made,
            }
        })
        .collect()
}

/// Generation `g`'s own facts as `tests/libvirt/capture-facts` took them into
/// `tests/data/generations/NAME` ([`Generation::facts`]), as the tool's arguments
/// ([`Facts::args`]).
pub(crate) struct Facts {
    /// `--no-qemu-caps-cache --libvirt-version V --cpu-map DIR [--qemu-version V] --caps
    /// capabilities.xml`: the libvirt cache of this machine is never read.
    pub(crate) base: Vec<String>,
    /// Its `domcapabilities-ARCH-MACHINE-VIRTTYPE.xml` files, by file name.
    pub(crate) domcaps: Vec<PathBuf>,
}

/// `virsh domcapabilities` of x86_64 KVM guests of machine type `machine`.
pub(crate) fn kvm_domcaps_args(machine: &str) -> [&str; 7] {
    [
        "domcapabilities",
        "--virttype",
        "kvm",
        "--arch",
        "x86_64",
        "--machine",
        machine,
    ]
}

impl Facts {
    /// Generation `g`'s facts with its live capabilities and KVM domcapabilities (`pc`, `q35`)
    /// asked of its libvirt now and written into `dir`, in place of the captured ones: the
    /// judged CPU is this machine's, whatever machine captured the stored facts. `qemu` as
    /// [`Facts::of`].
    pub(crate) fn live_kvm(g: &Generation, dir: &Path, qemu: bool) -> Facts {
        let live = |name: &str, args: &[&str]| {
            let v = g.virsh(args);
            assert!(v.ok, "{}: virsh {args:?}: {}", g.label, v.stderr);
            let p = dir.join(name);
            std::fs::write(&p, v.stdout).unwrap();
            p
        };
        let mut base = Facts::of(g, qemu).base;
        let at = base.iter().position(|a| a == "--caps").unwrap();
        base.truncate(at);
        base.extend([
            "--caps".to_string(),
            s(&live("capabilities.xml", &["capabilities"])),
        ]);
        let domcaps = ["pc", "q35"]
            .iter()
            .map(|m| {
                let file = format!("domcapabilities-x86_64-{m}-kvm.xml");
                live(&file, &kvm_domcaps_args(m))
            })
            .collect();
        Facts { base, domcaps }
    }

    /// Generation `g`'s facts; `qemu` says whether to pass `--qemu-version` (from its
    /// `version` file: [`qemu_version_option`]).
    pub(crate) fn of(g: &Generation, qemu: bool) -> Facts {
        let (libvirt, facts) = Facts::captured(&g.facts(), qemu);
        assert_eq!(
            libvirt,
            g.version,
            "{}: the daemon is not the libvirt of {}/version (tests/libvirt/capture-facts)",
            g.label,
            g.facts().display()
        );
        facts
    }

    /// The facts captured in `dir` (`tests/data/generations/NAME`), without asking its daemon,
    /// and the libvirt version they are of.
    pub(crate) fn captured(dir: &Path, qemu: bool) -> (String, Facts) {
        let version = std::fs::read_to_string(dir.join("version")).unwrap_or_else(|e| {
            panic!(
                "{}/version: {e} (tests/libvirt/capture-facts)",
                dir.display()
            )
        });
        let field = |key: &str| {
            version
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .map(str::trim)
                .unwrap_or_else(|| panic!("{}/version: no `{key}` line", dir.display()))
                .to_string()
        };
        let libvirt = field("libvirt ");
        let mut base = vec![
            "--no-qemu-caps-cache".to_string(),
            "--libvirt-version".into(),
            libvirt.clone(),
            "--cpu-map".into(),
            s(&dir.join("cpu_map")),
        ];
        if qemu {
            base.extend(["--qemu-version".to_string(), field("qemu ")]);
        }
        base.extend(["--caps".to_string(), s(&dir.join("capabilities.xml"))]);
        let mut domcaps: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let n = p.file_name().unwrap().to_string_lossy();
                n.starts_with("domcapabilities-") && n.ends_with(".xml")
            })
            .collect();
        domcaps.sort();
        (libvirt, Facts { base, domcaps })
    }

    /// The arguments for `doc`: the base, and as `--caps` the domcapabilities of the document's
    /// own arch (`<os><type arch>`, default x86_64), machine family (x86_64: `q35` when its
    /// machine type names it, else `pc`, libvirt's default; aarch64: `virt`) and virt type
    /// (`<domain type>`), which is the one the tool picks from a host's full set; all of them
    /// when the generation has none for that triple. One file instead of six keeps a debug
    /// build's run at about 20 ms instead of 70 (parsing forky's 190 KiB kvm domcapabilities).
    pub(crate) fn args(&self, doc: &str) -> Vec<String> {
        let mut args = self.base.clone();
        let wanted = roxmltree::Document::parse(doc).ok().map(|d| {
            let root = d.root_element();
            let ty = root.descendants().find(|n| {
                n.has_tag_name("type") && n.parent().is_some_and(|p| p.has_tag_name("os"))
            });
            let arch = ty.and_then(|t| t.attribute("arch")).unwrap_or("x86_64");
            let machine = ty.and_then(|t| t.attribute("machine")).unwrap_or("");
            let family = match arch {
                "x86_64" if machine.contains("q35") => "q35",
                "x86_64" => "pc",
                _ => "virt",
            };
            let virt = root.attribute("type").unwrap_or("kvm");
            format!("domcapabilities-{arch}-{family}-{virt}.xml")
        });
        let one: Vec<&PathBuf> = self
            .domcaps
            .iter()
            .filter(|p| wanted.as_deref() == p.file_name().and_then(|n| n.to_str()))
            .collect();
        let chosen: Vec<&PathBuf> = if one.is_empty() {
            self.domcaps.iter().collect()
        } else {
            one
        };
        for p in chosen {
            args.extend(["--caps".to_string(), s(p)]);
        }
        args
    }
}

/// Whether the binary under test has `--qemu-version` (issue 19's TCG rules, which judge a
/// generation's QEMU): [`Facts::of`] passes it when it does; the report says when it does not.
pub(crate) fn qemu_version_option(exe: &Path) -> bool {
    tool(exe, &["check".to_string(), "--help".to_string()])
        .stdout
        .contains("--qemu-version")
}

/// The document with `<name>` set to `name` and its UUID (`<uuid>`, and `<sysinfo>`'s
/// `<entry name='uuid'>`, which libvirt requires to match it and takes as the domain's UUID when
/// `<uuid>` is absent: Nova writes both) set to one made from `name`: test guests never clash
/// with one another or anything else on the libvirt (the tool reads neither).
pub(crate) fn renamed(text: &str, name: &str) -> String {
    let Ok(doc) = roxmltree::Document::parse(text) else {
        return text.to_string();
    };
    let uuid = uuid_for(name);
    let mut edits = Vec::new();
    for c in doc.root_element().children().filter(|n| n.is_element()) {
        match c.tag_name().name() {
            "name" => edits.push((c.range(), format!("<name>{name}</name>"))),
            "uuid" => edits.push((c.range(), format!("<uuid>{uuid}</uuid>"))),
            "sysinfo" => {
                for e in c.descendants().filter(|n| {
                    n.has_tag_name("entry")
                        && n.attribute("name") == Some("uuid")
                        && n.parent().is_some_and(|p| p.has_tag_name("system"))
                }) {
                    if let Some(t) = e.first_child().filter(roxmltree::Node::is_text) {
                        edits.push((t.range(), uuid.clone()));
                    }
                }
            }
            _ => {}
        }
    }
    splice(text, edits)
}

/// The UUID [`renamed`] gives guest `name`: a version-4 form of two hashes of the name.
fn uuid_for(name: &str) -> String {
    let (a, b) = (fnv1a(name), fnv1a(&format!("{name}/uuid")));
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        b >> 52,
        b & 0xffff_ffff_ffff
    )
}

/// `text` with each range replaced (ranges do not overlap).
pub(crate) fn splice(text: &str, mut edits: Vec<(std::ops::Range<usize>, String)>) -> String {
    edits.sort_by_key(|(r, _)| std::cmp::Reverse(r.start));
    let mut out = text.to_string();
    for (r, t) in edits {
        out.replace_range(r, &t);
    }
    out
}

/// Top-level elements left out of a start: host bindings and host identity (`<cputune>` pins to
/// host CPUs this machine may not have, `<numatune>` to its NUMA nodes, `<memoryBacking>` to its
/// huge pages, `<sysinfo>`/`<metadata>` are data), none of which the tool reads or writes.
const START_DROP_TOP: &[&str] = &[
    "metadata",
    "title",
    "description",
    "cputune",
    "numatune",
    "memoryBacking",
    "sysinfo",
    "seclabel",
    "resource",
];

/// Devices left out of a start: storage, network, consoles and displays need files, bridges,
/// networks, sockets and modules (SPICE, swtpm, firmware) this machine's libvirts may lack. The
/// guest CPU, vCPUs, NUMA cells, IOMMU and machine type do not depend on them; `<iommu>`,
/// controllers, memory devices and the rest stay.
const START_DROP_DEVICES: &[&str] = &[
    "disk",
    "filesystem",
    "interface",
    "hostdev",
    "serial",
    "parallel",
    "console",
    "channel",
    "graphics",
    "video",
    "sound",
    "audio",
    "tpm",
    "redirdev",
    "smartcard",
    "shmem",
];

/// What is started for a TCG document: the same document without [`START_DROP_TOP`],
/// [`START_DROP_DEVICES`], firmware and direct kernel boot (`<loader>`, `<nvram>`, `<kernel>`,
/// `<initrd>`, `<cmdline>`, `<smbios>`, `firmware=`: UEFI firmware is not installed here) and
/// `<vcpu cpuset>`. Input and rewrite are cut the same way; what the tool changes is never cut.
pub(crate) fn startable(text: &str) -> String {
    let Ok(doc) = roxmltree::Document::parse(text) else {
        return text.to_string();
    };
    let mut edits = Vec::new();
    let drop_attr = |n: roxmltree::Node<'_, '_>, name: &str, edits: &mut Vec<_>| {
        if let Some(a) = n.attributes().find(|a| a.name() == name) {
            edits.push((a.range(), String::new()));
        }
    };
    for c in doc.root_element().children().filter(|n| n.is_element()) {
        let tag = c.tag_name().name();
        if START_DROP_TOP.contains(&tag) {
            edits.push((c.range(), String::new()));
        } else if tag == "vcpu" {
            drop_attr(c, "cpuset", &mut edits);
        } else if tag == "os" {
            drop_attr(c, "firmware", &mut edits);
            for o in c.children().filter(|n| n.is_element()) {
                if matches!(
                    o.tag_name().name(),
                    "loader" | "nvram" | "kernel" | "initrd" | "cmdline" | "smbios" | "firmware"
                ) {
                    edits.push((o.range(), String::new()));
                }
            }
        } else if tag == "devices" {
            for d in c.children().filter(|n| n.is_element()) {
                if START_DROP_DEVICES.contains(&d.tag_name().name()) {
                    edits.push((d.range(), String::new()));
                }
            }
        }
    }
    splice(text, edits)
}

/// Whether the document is a TCG guest (`<domain type='qemu'>`).
fn is_tcg(text: &str) -> bool {
    roxmltree::Document::parse(text)
        .is_ok_and(|d| d.root_element().attribute("type") == Some("qemu"))
}

/// A libvirt or QEMU message without what changes from run to run: QEMU's timestamps
/// (`2026-12-01T16:05:27.293211Z `) and the guest's name (`(vm='vcp-prod-…')`, `'vcp-prod-…'`).
fn tidy(msg: &str) -> String {
    let mut out = String::new();
    for word in msg.split(' ') {
        let stamp = word.len() > 20
            && word.ends_with('Z')
            && word.as_bytes().get(4) == Some(&b'-')
            && word.as_bytes().get(10) == Some(&b'T');
        if stamp || word.starts_with("(vm='") {
            continue;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        if word.contains(&prefix()) {
            out.push_str("'GUEST'");
        } else {
            out.push_str(word);
        }
    }
    out
}

/// libvirt's verdict on a document.
#[derive(Clone, Debug, PartialEq)]
enum Libvirt {
    /// Defined and started (a TCG document in the start sample).
    Accepted,
    /// Defined; not started (KVM, or TCG outside the start sample).
    Defined,
    /// Refused by `virsh define`, with libvirt's message.
    Define(String),
    /// Defined, refused by `virsh start` (TCG only), with libvirt's message.
    Start(String),
}

impl Libvirt {
    fn message(&self) -> Option<&str> {
        match self {
            Libvirt::Accepted | Libvirt::Defined => None,
            Libvirt::Define(m) | Libvirt::Start(m) => Some(m),
        }
    }
    fn describe(&self) -> String {
        match self {
            Libvirt::Accepted => "accepted (defined and started)".into(),
            Libvirt::Defined => "defined (not started)".into(),
            Libvirt::Define(m) => format!("refused at define: {m}"),
            Libvirt::Start(m) => format!("refused at start: {m}"),
        }
    }
}

/// One libvirt generation's judge: defines and starts documents, each distinct start once.
struct Judge<'a> {
    oracle: &'a Oracle,
    dir: PathBuf,
    /// Start verdicts by the started document with its name blanked.
    starts: HashMap<String, Result<(), String>>,
    /// Input start verdicts by guest ([`InputVerdict::guest`]).
    guests: HashMap<String, Result<(), String>>,
    defines: usize,
    started: usize,
    /// The `virsh destroy` of each started guest, running.
    destroying: Vec<std::process::Child>,
    /// Time spent in virsh define / start.
    define_time: std::time::Duration,
    start_time: std::time::Duration,
}

/// virsh's message without the lines naming the file or domain, and without what the second
/// command of a batch says after the first failed.
pub(crate) fn reason(stderr: &str) -> String {
    stderr
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty()
                && !l.starts_with("error: Failed to define domain")
                && !l.starts_with("error: Failed to create domain")
                && !l.starts_with("error: failed to get domain")
                && !l.starts_with("error: Domain not found")
        })
        .map(|l| l.trim_start_matches("error: "))
        .collect::<Vec<_>>()
        .join(" / ")
}

impl Judge<'_> {
    /// `virsh define` of each text (all named `name`), each undefined again: one virsh for all
    /// of them (`define A; undefine NAME; define B; ...`), each define's result read back by its
    /// file name.
    fn define_all(&mut self, texts: &[&str], name: &str) -> Vec<Result<(), String>> {
        let t = Instant::now();
        let files: Vec<String> = texts
            .iter()
            .enumerate()
            .map(|(k, text)| {
                let f = self.dir.join(format!("{name}-{k}.xml"));
                std::fs::write(&f, text).unwrap();
                s(&f)
            })
            .collect();
        let batch: Vec<String> = files
            .iter()
            .map(|f| format!("define {f}; undefine {name}"))
            .collect();
        self.defines += texts.len();
        let d = self.oracle.virsh(&[&batch.join("; ")]);
        self.define_time += t.elapsed();
        files
            .iter()
            .map(|f| {
                if d.stdout.contains(&format!("defined from {f}\n")) {
                    return Ok(());
                }
                // Its error block: the line naming the file, then libvirt's message.
                let head = format!("error: Failed to define domain from {f}\n");
                let Some(at) = d.stderr.find(&head) else {
                    panic!(
                        "{}: virsh neither defined nor refused {f}:\n{}{}",
                        self.oracle.label, d.stdout, d.stderr
                    );
                };
                let rest = &d.stderr[at + head.len()..];
                let end = rest
                    .find("error: failed to get domain")
                    .unwrap_or(rest.len());
                Err(reason(&rest[..end]))
            })
            .collect()
    }

    /// The [`startable`] form of `text` created paused as a transient guest (`virsh create
    /// --paused`) and destroyed: the checks libvirt and QEMU make at start, without running the
    /// guest. Each distinct start form is started once.
    fn start(&mut self, text: &str, name: &str) -> Result<(), String> {
        // Keyed without the guest's name and UUID: the same start form of two documents is one.
        let key = startable(text)
            .replace(&format!("<name>{name}</name>"), "<name/>")
            .replace(&uuid_for(name), "<uuid/>");
        if let Some(r) = self.starts.get(&key) {
            return r.clone();
        }
        let t = Instant::now();
        // A name of its own: the guest before it may still be going away.
        self.started += 1;
        let guest = format!("{name}-s{}", self.started);
        let file = self.dir.join(format!("{guest}.xml"));
        std::fs::write(
            &file,
            key.replace("<name/>", &format!("<name>{guest}</name>"))
                .replace("<uuid/>", &uuid_for(&guest)),
        )
        .unwrap();
        let c = self.oracle.virsh(&["create", "--paused", &s(&file)]);
        let r = if c.ok {
            if self.destroying.len() >= 8 {
                self.reap();
            }
            // libvirt takes over a second to see a destroyed QEMU gone (this machine, 9.0 and
            // 11.3 alike); nothing here waits for it: [`Judge::reap`] does, at the end.
            self.destroying.push(
                Command::new("virsh")
                    .args(["-c", &self.oracle.uri, "destroy", &guest])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("run virsh destroy"),
            );
            Ok(())
        } else {
            Err(reason(&c.stderr))
        };
        self.start_time += t.elapsed();
        self.starts.insert(key, r.clone());
        r
    }

    /// Wait for every `virsh destroy` started so far; each must have succeeded.
    fn reap(&mut self) {
        for child in self.destroying.drain(..) {
            let out = child.wait_with_output().expect("wait for virsh destroy");
            assert!(
                out.status.success(),
                "{}: virsh destroy: {}",
                self.oracle.label,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// libvirt's verdict on a document `define_all` gave `define`: that refusal, or with
    /// `start` (a TCG document in the start sample) its start.
    fn verdict(
        &mut self,
        define: &Result<(), String>,
        text: &str,
        name: &str,
        start: bool,
    ) -> Libvirt {
        match define {
            Err(e) => Libvirt::Define(e.clone()),
            Ok(()) if !start => Libvirt::Defined,
            Ok(()) => self
                .start(text, name)
                .map_or_else(Libvirt::Start, |()| Libvirt::Accepted),
        }
    }
}

/// The input's verdict: its define at once, its start (TCG, in the start sample) only when a
/// classification needs it.
struct InputVerdict {
    define: Result<(), String>,
    /// Whether it is started: a TCG document in the start sample.
    tcg: bool,
    /// The guest it describes: producer and source (`virt-install/cpu-epyc-tcg`). A producer's
    /// document, its stored form and its live form are one guest: libvirt starts the stored form
    /// of what was defined, so the three starts are one ([`Judge::guests`]).
    guest: String,
    start: Option<Result<(), String>>,
}

impl InputVerdict {
    fn get(&mut self, judge: &mut Judge<'_>, text: &str, name: &str) -> Libvirt {
        if self.define.is_err() || !self.tcg {
            return judge.verdict(&self.define, text, name, false);
        }
        if self.start.is_none() {
            let r = match judge.guests.get(&self.guest) {
                Some(r) => r.clone(),
                None => {
                    let r = judge.start(text, name);
                    judge.guests.insert(self.guest.clone(), r.clone());
                    r
                }
            };
            self.start = Some(r);
        }
        self.start
            .clone()
            .unwrap()
            .map_or_else(Libvirt::Start, |()| Libvirt::Accepted)
    }
}

/// The guest a manifest entry describes ([`InputVerdict::guest`]): `virt-install/stored/x@9.0.0`
/// → `virt-install/x`.
fn guest_of(made: &str) -> String {
    let mut parts = made.split('/');
    let producer = parts.next().unwrap_or_default();
    let source = parts.nth(1).unwrap_or_default();
    let source = source.split_once('@').map_or(source, |(s, _)| s);
    format!("{producer}/{source}")
}

/// The name prefix of this run's guests.
fn prefix() -> String {
    format!("vcp-prod-{}-", std::process::id())
}

/// Run the copy of the binary under test.
pub(crate) fn tool(exe: &Path, args: &[String]) -> Output {
    Output::from(
        Command::new(exe)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run virt-cpu-policy"),
    )
}

/// What `check --format json` said: the verdict and the error codes.
struct Verdict {
    code: i32,
    verdict: String,
    errors: Vec<String>,
    findings: String,
}

impl Verdict {
    /// The verdict in a JSON report of the tool (`check --format json` on stdout, `rewrite
    /// --explain --format json` on stderr); `code` is the report's `exit` (`check`'s code).
    fn from_report(json: &str) -> Verdict {
        let v: serde_json::Value = serde_json::from_str(json.trim()).unwrap_or_default();
        let mut errors = Vec::new();
        let mut findings = String::new();
        for f in v["findings"].as_array().into_iter().flatten() {
            let sev = f["severity"].as_str().unwrap_or("");
            let code = f["code"].as_str().unwrap_or("");
            if sev == "error" {
                errors.push(code.to_string());
            }
            write!(
                findings,
                "\n        {sev}[{code}]: {}",
                f["message"].as_str().unwrap_or("")
            )
            .unwrap();
        }
        Verdict {
            code: v["exit"]
                .as_i64()
                .and_then(|c| i32::try_from(c).ok())
                .unwrap_or(-1),
            verdict: v["verdict"].as_str().unwrap_or("").to_string(),
            errors,
            findings: if v.is_null() {
                format!(" (no JSON report) {}", json.trim())
            } else {
                findings
            },
        }
    }
}

/// The tool's arguments before the facts: `COMMAND --format json [--explain] --policy FILE`.
pub(crate) fn tool_args(command: &str, policy: &Path) -> Vec<String> {
    let mut args = vec![command.to_string(), "--format".into(), "json".into()];
    if command == "rewrite" {
        args.push("--explain".into());
    }
    args.extend(["--policy".to_string(), s(policy)]);
    args
}

/// `check --format json` of `file`.
fn check(exe: &Path, facts: &[String], policy: &Path, file: &Path) -> Verdict {
    let mut args = tool_args("check", policy);
    args.extend(facts.iter().cloned());
    args.push(s(file));
    let out = tool(exe, &args);
    let mut v = Verdict::from_report(&out.stdout);
    if v.code != out.code {
        v.verdict = format!(
            "{} (exit {} but the report says {})",
            v.verdict, out.code, v.code
        );
        v.code = -1;
    }
    v
}

/// The tool's verdict on the document as it stands (`check` with an empty policy), asked only
/// when a policy's refusal needs it.
struct Empty<'a> {
    policy: &'a Path,
    verdict: Option<Verdict>,
}

impl Empty<'_> {
    fn get(&mut self, exe: &Path, facts: &[String], file: &Path) -> &Verdict {
        self.verdict
            .get_or_insert_with(|| check(exe, facts, self.policy, file))
    }
}

/// What one (document, policy) came to.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Class {
    /// Written or called conforming and accepted by libvirt; or refused by both.
    Agreement,
    /// Written or called conforming, refused by libvirt for a reason in the tool's scope.
    FalseAccept,
    /// Refused by the tool for what the document already is; libvirt accepts (and starts) it.
    ContradictedRefusal,
    /// The input is accepted (defined, and started for TCG); the rewrite is refused.
    Broken,
    /// Input and output refused by libvirt for a reason outside the tool's scope.
    OutOfScope,
    /// Refused by the tool for the policy's target (nothing for libvirt to judge).
    PolicyRefusal,
    /// Refused by the tool for what the document is, for rules libvirt checks at start only, and
    /// defined by libvirt without a start (KVM, or TCG outside the start sample); or only for
    /// the guest OS's floor, which libvirt never checks ([`GUEST_OS_RULES`]).
    NotJudged,
    /// The tool crashed: killed by a signal, or a Rust panic (exit 101, `panicked at`).
    Crash,
    /// The rewrite, rewritten again under the same policy, is not left as it is (a second
    /// rewrite, or a refusal).
    NonIdempotent,
    /// The tool misbehaved otherwise: an exit other than 0/1 of `rewrite`, no JSON report, or
    /// the report's verdict and what `rewrite` did disagree.
    ToolError,
}

impl Class {
    /// What the test fails on, any count above zero.
    const DEFECTS: [Class; 6] = [
        Class::FalseAccept,
        Class::ContradictedRefusal,
        Class::Broken,
        Class::Crash,
        Class::NonIdempotent,
        Class::ToolError,
    ];
    const ALL: [Class; 10] = [
        Class::Agreement,
        Class::FalseAccept,
        Class::ContradictedRefusal,
        Class::Broken,
        Class::OutOfScope,
        Class::PolicyRefusal,
        Class::NotJudged,
        Class::Crash,
        Class::NonIdempotent,
        Class::ToolError,
    ];
    fn name(self) -> &'static str {
        match self {
            Class::Agreement => "agreements",
            Class::FalseAccept => "false accepts",
            Class::ContradictedRefusal => "contradicted refusals",
            Class::Broken => "broken guests",
            Class::OutOfScope => "refused by libvirt out of scope",
            Class::PolicyRefusal => "policy refusals",
            Class::NotJudged => "refusals not judged (start-time rules, not started)",
            Class::Crash => "crashes",
            Class::NonIdempotent => "non-idempotent rewrites",
            Class::ToolError => "tool errors",
        }
    }
}

/// Counts and examples of one generation × policy.
#[derive(Default)]
struct Tally {
    counts: BTreeMap<Class, usize>,
    examples: BTreeMap<Class, Vec<String>>,
    /// libvirt's out-of-scope refusals, by message.
    out_of_scope: BTreeMap<String, usize>,
    /// The tool's error codes on policy refusals.
    policy_codes: BTreeMap<String, usize>,
    /// Every defect: its class, the document, and the reason (libvirt's message without its
    /// timestamps and guest names, or the tool's error codes).
    defects: Vec<(Class, String, String)>,
}

impl Tally {
    fn add(&mut self, class: Class, example: impl FnOnce() -> String) {
        *self.counts.entry(class).or_default() += 1;
        let ex = self.examples.entry(class).or_default();
        if class != Class::Agreement && ex.len() < EXAMPLES {
            ex.push(example());
        }
    }
    fn merge(&mut self, other: Tally) {
        for (c, n) in other.counts {
            *self.counts.entry(c).or_default() += n;
        }
        for (c, ex) in other.examples {
            let mine = self.examples.entry(c).or_default();
            mine.extend(ex);
            mine.truncate(EXAMPLES);
        }
        for (m, n) in other.out_of_scope {
            *self.out_of_scope.entry(m).or_default() += n;
        }
        for (m, n) in other.policy_codes {
            *self.policy_codes.entry(m).or_default() += n;
        }
        self.defects.extend(other.defects);
    }
    /// Records a defect of `class` on document `label` for `reason`.
    fn list(&mut self, class: Class, label: &str, reason: &str) {
        self.defects.push((class, label.to_string(), tidy(reason)));
    }
    fn count(&self, class: Class) -> usize {
        self.counts.get(&class).copied().unwrap_or(0)
    }
}

/// One document being judged: the tool's input and what is known of it.
struct Subject<'a> {
    exe: &'a Path,
    facts: &'a [String],
    /// The document as given to the tool and to libvirt (renamed).
    file: PathBuf,
    input: String,
    name: String,
    /// Its file under [`DATA`], for messages.
    label: &'a str,
    libvirt_in: InputVerdict,
    empty: Empty<'a>,
}

/// `rewrite --explain --format json` of the subject under `policy`: the document on stdout,
/// `check`'s report on stderr.
fn rewrite(subject: &Subject<'_>, policy: &Path) -> Output {
    rewrite_file(subject, policy, &subject.file)
}

/// `rewrite --explain --format json` of `file` under `policy`, with the subject's facts.
fn rewrite_file(subject: &Subject<'_>, policy: &Path, file: &Path) -> Output {
    let mut args = tool_args("rewrite", policy);
    args.extend(subject.facts.iter().cloned());
    args.push(s(file));
    tool(subject.exe, &args)
}

/// One document under one policy, classified: `rw` is the policy's rewrite, `out_define` the
/// define of its output when it differs from the input.
#[allow(clippy::too_many_lines)]
fn classify(
    subject: &mut Subject<'_>,
    judge: &mut Judge<'_>,
    policy: &Path,
    rw: &Output,
    out_define: Option<&Result<(), String>>,
    tally: &mut Tally,
) {
    let (input, name, label) = (&subject.input, &subject.name, subject.label);
    let v = Verdict::from_report(&rw.stderr);
    let example = |what: &str, lv: &str| {
        format!(
            "    {label}: {what}\n      tool: {} (check exit {}), rewrite exit {}{}\n      libvirt: {lv}",
            v.verdict, v.code, rw.code, v.findings
        )
    };
    if rw.code == -1 || rw.code == 101 || rw.stderr.contains("panicked at") {
        tally.list(Class::Crash, label, &format!("exit {}", rw.code));
        tally.add(Class::Crash, || {
            example(
                &format!("crashed (exit {}): {}", rw.code, rw.stderr.trim()),
                "-",
            )
        });
        return;
    }
    // The verdict and what rewrite did must tell the same story.

    let consistent = match (v.verdict.as_str(), rw.code) {
        ("conforms" | "out-of-scope", 0) => rw.stdout == *input,
        ("needs-rewrite", 0) => rw.stdout != *input && v.code == 3,
        ("cannot-conform", 1) => rw.stdout.is_empty() && v.code == 1,
        _ => false,
    };
    if !consistent {
        tally.list(
            Class::ToolError,
            label,
            &format!("verdict {}, rewrite exit {}", v.verdict, rw.code),
        );
        tally.add(Class::ToolError, || {
            example("the verdict and the rewrite disagree", "-")
        });
        return;
    }
    if v.verdict == "out-of-scope" {
        tally.add(Class::Agreement, String::new);
        return;
    }
    if rw.code == 0 && rw.stdout != *input {
        // The rewrite is a fixed point: rewritten again, it is left as it is.
        let file = subject.file.with_extension("rewritten.xml");
        std::fs::write(&file, &rw.stdout).unwrap();
        let again = rewrite_file(subject, policy, &file);
        if again.code != 0 || again.stdout != rw.stdout {
            tally.list(
                Class::NonIdempotent,
                label,
                &format!("second rewrite exit {}", again.code),
            );
            tally.add(Class::NonIdempotent, || {
                let v2 = Verdict::from_report(&again.stderr);
                example(
                    &format!(
                        "rewritten, and its rewrite rewritten again: exit {}, {}{}",
                        again.code, v2.verdict, v2.findings
                    ),
                    "-",
                )
            });
        }
    }
    if rw.code == 1 {
        // A refusal: about the document as it stands when the empty policy refuses it too with
        // one of the same errors; else about the policy's target.
        // Only the errors the empty policy gives too are about the document as it stands; the
        // others (a `vcpu-current` after a clamp...) are about the policy's target.
        let empty = subject.empty.get(subject.exe, subject.facts, &subject.file);
        let input_errors: Vec<String> = v
            .errors
            .iter()
            .filter(|e| empty.code == 1 && empty.errors.contains(e))
            .cloned()
            .collect();
        let about_input = !input_errors.is_empty();
        // The guest OS's own floor is no rule of libvirt's: it defines and starts a guest below
        // it, whose OS then stops at boot. No answer of libvirt's contradicts or confirms it
        // (producer_floors.rs judges it against the vCPU QEMU gives; the guest proof boots one).
        if about_input
            && input_errors
                .iter()
                .all(|e| GUEST_OS_RULES.contains(&e.as_str()))
        {
            tally.add(Class::NotJudged, String::new);
            return;
        }
        if !about_input {
            for e in &v.errors {
                *tally.policy_codes.entry(e.clone()).or_default() += 1;
            }
            tally.add(Class::PolicyRefusal, String::new);
            return;
        }
        let lv = subject.libvirt_in.get(judge, input, name);
        let define_rule = input_errors
            .iter()
            .any(|e| DEFINE_TIME.contains(&e.as_str()));
        match lv.message() {
            None if lv == Libvirt::Accepted || define_rule => {
                tally.add(Class::ContradictedRefusal, || {
                    example("refused for what it is; libvirt accepts it", &lv.describe())
                });
                tally.list(
                    Class::ContradictedRefusal,
                    label,
                    &format!(
                        "the tool's {}; libvirt: {}",
                        input_errors.join(", "),
                        lv.describe()
                    ),
                );
            }
            // Defined only, and every reason is one libvirt checks at start.
            None => tally.add(Class::NotJudged, String::new),
            Some(m) if in_scope(m) => tally.add(Class::Agreement, String::new),
            Some(m) => {
                *tally.out_of_scope.entry(m.to_string()).or_default() += 1;
                tally.add(Class::OutOfScope, String::new);
            }
        }
        return;
    }
    let libvirt_out = match out_define {
        None => subject.libvirt_in.get(judge, input, name),
        Some(d) => judge.verdict(d, &rw.stdout, name, subject.libvirt_in.tcg),
    };
    let libvirt_in = if libvirt_out.message().is_none() {
        // Not needed: an accepted output is an agreement whatever the input was.
        libvirt_out.clone()
    } else {
        subject.libvirt_in.get(judge, input, name)
    };
    let what = if out_define.is_none() {
        "called conforming"
    } else {
        "rewritten"
    };
    match (&libvirt_out, &libvirt_in) {
        (Libvirt::Accepted | Libvirt::Defined, _) => tally.add(Class::Agreement, String::new),
        (out, Libvirt::Accepted | Libvirt::Defined) => {
            tally.add(Class::Broken, || {
                example(
                    &format!("{what}; the input is accepted, the output is not"),
                    &out.describe(),
                )
            });
            tally.list(Class::Broken, label, &out.describe());
        }
        (out, _) => {
            let msg = out.message().unwrap_or_default();
            if in_scope(msg) {
                tally.add(Class::FalseAccept, || {
                    let mut e = example(what, &out.describe());
                    if out_define.is_some() {
                        write!(e, "\n      (the input: {})", libvirt_in.describe()).unwrap();
                    }
                    e
                });
                tally.list(Class::FalseAccept, label, &out.describe());
            } else {
                *tally.out_of_scope.entry(msg.to_string()).or_default() += 1;
                tally.add(Class::OutOfScope, String::new);
            }
        }
    }
}

/// What one generation's run found: its report (printed whole, not interleaved with the other
/// generations') and its failures.
struct GenerationRun {
    report: String,
    summary: Vec<String>,
    failures: Vec<String>,
}

/// What one worker found on its share of a generation's documents.
#[derive(Default)]
struct Part {
    tallies: Vec<Tally>,
    input_refused: BTreeMap<String, usize>,
    defines: usize,
    started: usize,
    define_time: std::time::Duration,
    start_time: std::time::Duration,
}

impl Part {
    fn merge(&mut self, other: Part) {
        if self.tallies.is_empty() {
            self.tallies = other.tallies;
        } else {
            for (a, b) in self.tallies.iter_mut().zip(other.tallies) {
                a.merge(b);
            }
        }
        for (k, n) in other.input_refused {
            *self.input_refused.entry(k).or_default() += n;
        }
        self.defines += other.defines;
        self.started += other.started;
        self.define_time += other.define_time;
        self.start_time += other.start_time;
    }
}

/// One generation's documents to judge, each with whether it is started (in the start sample).
type Share<'d> = Vec<(&'d Doc, bool)>;

/// The documents of `share` under every policy, judged by `oracle`; guests named
/// `vcp-prod-<pid>-<version>-<worker>-<n>`.
#[allow(clippy::too_many_arguments)]
fn judge_share(
    oracle: &Oracle,
    share: &Share<'_>,
    worker: usize,
    exe: &Path,
    empty: &Path,
    policies: &[(&str, PathBuf)],
    facts: &Facts,
    dir: &Path,
) -> Part {
    let dir = dir.join(format!("w{worker}"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut judge = Judge {
        oracle,
        dir: dir.clone(),
        starts: HashMap::new(),
        guests: HashMap::new(),
        defines: 0,
        started: 0,
        destroying: Vec::new(),
        define_time: std::time::Duration::ZERO,
        start_time: std::time::Duration::ZERO,
    };
    let mut part = Part {
        tallies: policies.iter().map(|_| Tally::default()).collect(),
        ..Part::default()
    };
    for (i, (doc, start)) in share.iter().enumerate() {
        let text = std::fs::read_to_string(root().join(DATA).join(&doc.file)).unwrap();
        let name = format!("{}{}-{worker}-{i}", prefix(), oracle.version);
        let input = renamed(&text, &name);
        let file = dir.join("input.xml");
        std::fs::write(&file, &input).unwrap();
        let facts = facts.args(&input);
        let mut subject = Subject {
            exe,
            facts: &facts,
            file,
            input,
            name,
            label: &doc.file,
            libvirt_in: InputVerdict {
                define: Ok(()),
                tcg: *start,
                guest: guest_of(&doc.made),
                start: None,
            },
            empty: Empty {
                policy: empty,
                verdict: None,
            },
        };
        let runs: Vec<Output> = policies.iter().map(|(_, p)| rewrite(&subject, p)).collect();
        // The input and every distinct output, defined by one virsh.
        let mut texts: Vec<&str> = vec![&subject.input];
        for r in &runs {
            if r.code == 0 && !texts.contains(&r.stdout.as_str()) {
                texts.push(&r.stdout);
            }
        }
        let mut defines = judge.define_all(&texts, &subject.name);
        let texts: Vec<String> = texts.into_iter().map(str::to_string).collect();
        subject.libvirt_in.define = defines.remove(0);
        for (p, (r, tally)) in runs.iter().zip(part.tallies.iter_mut()).enumerate() {
            let out_define = texts[1..]
                .iter()
                .position(|t| *t == r.stdout)
                .map(|k| &defines[k]);
            classify(
                &mut subject,
                &mut judge,
                &policies[p].1,
                r,
                out_define,
                tally,
            );
        }
        let lv = &subject.libvirt_in;
        let verdict = match (&lv.define, &lv.start) {
            (Err(e), _) => Some(Libvirt::Define(e.clone())),
            (Ok(()), Some(Err(e))) => Some(Libvirt::Start(e.clone())),
            _ => None,
        };
        if let Some(v) = verdict {
            let m = v.message().unwrap_or_default();
            *part
                .input_refused
                .entry(format!(
                    "{}{}",
                    if in_scope(m) { "" } else { "(out of scope) " },
                    v.describe()
                ))
                .or_default() += 1;
        }
    }
    judge.reap();
    part.defines = judge.defines;
    part.started = judge.started;
    part.define_time = judge.define_time;
    part.start_time = judge.start_time;
    part
}

/// Every document made for `oracle`'s generation, under every policy, judged by it: the start
/// sample chosen, the documents shared out to [`workers`] threads (a guest's forms to the same
/// one), the counts printed, every defect a failure.
#[allow(clippy::too_many_lines)]
fn run_generation(
    g: &Generation,
    qemu: bool,
    docs: &[Doc],
    exe: &Path,
    empty: &Path,
    policies: &[(&str, PathBuf)],
    tmp: &Path,
) -> GenerationRun {
    let t0 = Instant::now();
    let oracle: &Oracle = g;
    let mut report = String::new();
    let mut summary = Vec::new();
    let mut failures = Vec::new();
    let _sweep = Sweep {
        uri: oracle.uri.clone(),
        prefix: prefix(),
    };
    let gdir = tmp.join(&oracle.version);
    std::fs::create_dir_all(&gdir).unwrap();
    let facts = Facts::of(g, qemu);
    // An order that mixes producers and forms (a hash of the seed and the file name): the start
    // sample is its first TCG documents, spread over the corpus, the same for a seed whatever
    // the tool answers.
    let seed = start_seed();
    let mut mine: Vec<&Doc> = docs
        .iter()
        .filter(|d| d.versions.contains(&oracle.version))
        .collect();
    mine.sort_by_key(|d| (fnv1a(&format!("{seed}/{}", d.file)), d.file.clone()));
    let budget = start_budget();
    let mut sampled = 0;
    let mut define_only = 0;
    let workers = workers();
    let mut shares: Vec<Share<'_>> = vec![Vec::new(); workers];
    for doc in mine.iter().copied() {
        let tcg = is_tcg(&std::fs::read_to_string(root().join(DATA).join(&doc.file)).unwrap());
        let start = tcg && sampled < budget;
        if start {
            sampled += 1;
        } else if tcg {
            define_only += 1;
        }
        let w = usize::try_from(fnv1a(&guest_of(&doc.made)) % workers as u64).unwrap();
        shares[w].push((doc, start));
    }
    let mut all = Part::default();
    std::thread::scope(|scope| {
        let handles: Vec<_> = shares
            .iter()
            .enumerate()
            .map(|(w, share)| {
                let (facts, gdir) = (&facts, &gdir);
                scope
                    .spawn(move || judge_share(oracle, share, w, exe, empty, policies, facts, gdir))
            })
            .collect();
        for h in handles {
            all.merge(h.join().expect("a worker panicked"));
        }
    });
    let (tallies, input_refused) = (&all.tallies, &all.input_refused);
    let label = &oracle.label;
    writeln!(
        report,
        "producers: {label}: {} documents, {sampled} TCG documents started, {define_only} more judged at define only (start sample {budget}, VCP_PRODUCERS_SEED={seed}); libvirt: {} defines [{:.1?}], {} distinct starts [{:.1?}], {workers} workers [{:.1?} in all]",
        mine.len(),
        all.defines,
        all.define_time,
        all.started,
        all.start_time,
        t0.elapsed()
    )
    .unwrap();
    for (m, n) in input_refused {
        writeln!(report, "producers: {label}:   input {n} × {m}").unwrap();
    }
    for ((pname, _), tally) in policies.iter().zip(tallies) {
        let counts: Vec<String> = Class::ALL
            .iter()
            .map(|c| format!("{} {}", tally.count(*c), c.name()))
            .collect();
        let line = format!(
            "{label}, policy {pname}: {} documents: {}",
            mine.len(),
            counts.join(", ")
        );
        writeln!(report, "producers: {line}").unwrap();
        summary.push(line);
        for (code, n) in &tally.policy_codes {
            writeln!(report, "producers:   policy refusal: {n} × {code}").unwrap();
        }
        for (m, n) in &tally.out_of_scope {
            writeln!(
                report,
                "producers:   refused by libvirt out of scope: {n} × {m}"
            )
            .unwrap();
        }
        for class in Class::DEFECTS {
            let got = tally.count(class);
            if got > 0 {
                let mut by_reason: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
                for (_, doc, reason) in tally.defects.iter().filter(|(c, _, _)| *c == class) {
                    by_reason.entry(reason).or_default().push(doc);
                }
                writeln!(report, "producers:   {} ({got}) by reason:", class.name()).unwrap();
                for (reason, docs) in &by_reason {
                    writeln!(report, "producers:     {} × {reason}", docs.len()).unwrap();
                    for d in docs {
                        writeln!(report, "producers:       {d}").unwrap();
                    }
                }
                writeln!(report, "producers:   {}, the first in full:", class.name()).unwrap();
                for e in tally.examples.get(&class).into_iter().flatten() {
                    writeln!(report, "{e}").unwrap();
                }
                failures.push(format!("{label}, policy {pname}: {got} {}", class.name()));
            }
        }
    }
    GenerationRun {
        report,
        summary,
        failures,
    }
}

#[test]
#[ignore = "needs the libvirt generations: .ci/run builds and starts them (tests/libvirt/generations)"]
fn producers_against_libvirt() {
    let started = Instant::now();
    let docs = manifest();
    assert!(!docs.is_empty(), "{DATA}/MANIFEST.tsv lists no documents");
    let tmp = Scratch::new("producers");
    let exe = tmp.0.join("virt-cpu-policy");
    std::fs::copy(bin(), &exe).expect("copy the binary under test");
    let empty = tmp.write("empty.toml", "version = 1\n");
    let policies: Vec<(&str, PathBuf)> = POLICIES
        .iter()
        .map(|(n, t)| (*n, tmp.write(&format!("{n}.toml"), t)))
        .collect();
    // The generations are separate daemons: judged side by side, one thread each.
    let gens = generations();
    assert!(!gens.is_empty(), "no libvirt generation answers");
    let qemu = qemu_version_option(&exe);
    if !qemu {
        eprintln!(
            "producers: the tool has no --qemu-version: each generation is judged without its QEMU version"
        );
    }
    let runs: Vec<GenerationRun> = in_parallel(&gens, |g| {
        run_generation(g, qemu, &docs, &exe, &empty, &policies, &tmp.0)
    });
    let mut failures = Vec::new();
    for r in &runs {
        eprint!("{}", r.report);
        failures.extend(r.failures.iter().cloned());
    }
    eprintln!(
        "producers: {} generations, {} documents [{:.1?}]",
        runs.len(),
        docs.len(),
        started.elapsed()
    );
    for l in runs.iter().flat_map(|r| &r.summary) {
        eprintln!("  {l}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn startable_leaves_what_the_tool_reads() {
    let text = "<domain type='qemu'>\n  <name>g</name>\n  <metadata><x/></metadata>\n  <vcpu cpuset='0-3' current='2'>4</vcpu>\n  <cputune><vcpupin vcpu='0' cpuset='1'/></cputune>\n  <os firmware='efi'><type arch='x86_64' machine='q35'>hvm</type><loader/><boot dev='hd'/></os>\n  <features><ioapic driver='qemu'/></features>\n  <cpu mode='host-model'><topology sockets='4' cores='1' threads='1'/></cpu>\n  <devices><disk type='file'/><iommu model='intel'/><interface type='bridge'/><memballoon model='virtio'/></devices>\n</domain>\n";
    let got = startable(text);
    assert_eq!(
        got,
        "<domain type='qemu'>\n  <name>g</name>\n  \n  <vcpu  current='2'>4</vcpu>\n  \n  <os ><type arch='x86_64' machine='q35'>hvm</type><boot dev='hd'/></os>\n  <features><ioapic driver='qemu'/></features>\n  <cpu mode='host-model'><topology sockets='4' cores='1' threads='1'/></cpu>\n  <devices><iommu model='intel'/><memballoon model='virtio'/></devices>\n</domain>\n"
    );
    assert!(in_scope(
        "internal error: qemu unexpectedly closed the monitor: current -smp configuration requires kernel irqchip and X2APIC API support"
    ));
    assert!(in_scope(
        "operation failed: guest CPU doesn't match specification: extra features: hypervisor"
    ));
    assert!(!in_scope(
        "Cannot get interface MTU on 'fake_br1': No such device"
    ));
    assert!(!in_scope(
        "Invalid value '4-5' for 'cpuset.cpus': Invalid argument"
    ));
}

#[test]
fn renamed_guests_get_their_own_uuid_and_facts_pick_their_domcapabilities() {
    let nova = std::fs::read_to_string(root().join(DATA).join("nova/to-xml/tcg-q35-64-vcpus.xml"))
        .unwrap();
    let old = "5e6a0c2e-8f3b-4a3e-9d1c-7b2f0a9c1d01";
    assert_eq!(
        nova.matches(old).count(),
        5,
        "<uuid>, sysinfo uuid and serial, disk and console log paths"
    );
    let got = renamed(&nova, "vcp-prod-1-x");
    let uuid = uuid_for("vcp-prod-1-x");
    assert_ne!(uuid, uuid_for("vcp-prod-1-y"));
    assert!(got.contains(&format!("<uuid>{uuid}</uuid>")));
    assert!(got.contains(&format!("<entry name=\"uuid\">{uuid}</entry>")));
    assert!(got.contains("<name>vcp-prod-1-x</name>"));
    // The serial, the disk path and Nova's metadata are not the UUID libvirt compares: kept.
    assert_eq!(got.matches(old).count(), 3);

    let dir = root().join("tests/data/generations/trixie");
    let facts = Facts {
        base: vec![],
        domcaps: ["pc-kvm", "q35-kvm", "pc-qemu", "q35-qemu"]
            .iter()
            .map(|m| dir.join(format!("domcapabilities-x86_64-{m}.xml")))
            .chain([dir.join("domcapabilities-aarch64-virt-qemu.xml")])
            .collect(),
    };
    let picked = |doc: &str| facts.args(doc).last().cloned().unwrap();
    assert!(picked(&nova).ends_with("domcapabilities-x86_64-q35-qemu.xml"));
    assert!(
        picked("<domain type='kvm'><os><type machine='pc-i440fx-9.0'>hvm</type></os></domain>")
            .ends_with("domcapabilities-x86_64-pc-kvm.xml")
    );
    assert!(
        picked(
            "<domain type='qemu'><os><type arch='aarch64' machine='virt'>hvm</type></os></domain>"
        )
        .ends_with("domcapabilities-aarch64-virt-qemu.xml")
    );
    // No file for the triple: every one, for the tool to choose.
    assert_eq!(
        facts
            .args("<domain type='kvm'><os><type arch='aarch64'>hvm</type></os></domain>")
            .len(),
        10
    );
    assert_eq!(
        tidy(
            "internal error: QEMU unexpectedly closed the monitor (vm='vcp-prod-1-x'): 2026-12-01T16:05:27.293211Z qemu-system-x86_64: eim=on"
        ),
        "internal error: QEMU unexpectedly closed the monitor qemu-system-x86_64: eim=on"
    );
}
