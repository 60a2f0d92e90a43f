//! `rewrite::rewrite` on a fuzzed document under a fuzzed policy.
//!
//! Input layout: the first byte chooses the policy. `b % 8 < FIXED.len()`: one of the fixed
//! policies below, and the rest is the document. Otherwise the rest is `POLICY-TEXT \0 DOCUMENT`
//! (no NUL: all policy, empty document).
//!
//! Properties, checked whenever the rewrite returns Ok:
//! * never a panic;
//! * out of scope (not kvm/qemu) or `mode = "audit"`: the output is the input, byte for byte;
//! * enforce, no error finding: the output is well-formed XML; it has exactly one top-level
//!   `<cpu>` in libvirt's namespace when the input had one or more (at most one when it had none);
//!   `changed` is exactly `output != input`; `rewrite(output) == output` with `changed == false`
//!   and no error finding (the tool's own validator accepts its own output);
//! * the same, without a vCPU rule (which edits `<vcpu>`, `<features>`, `<devices>` too): the bytes
//!   before the first `<cpu>` and after it (later `<cpu>` elements removed with their line) are
//!   the input's, and what stands between them is one `<cpu>` element.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::ops::Range;
use virt_cpu_policy::domain::Domain;
use virt_cpu_policy::xml::decode;
use virt_cpu_policy::host::{Host, HostOptions, Sourced};
use virt_cpu_policy::policy::{Mode, Policy};
use virt_cpu_policy::rewrite::rewrite;

const FIXED: [&str; 6] = [
    // 0: the shipped default
    "version = 1\n[[rule]]\nname = \"x86-64-v2 baseline\"\nmatch = { arch = \"x86_64\" }\ncpu.min_level = \"x86-64-v2\"\n",
    // 1: a model, features both ways
    "[[rule]]\nname = \"m\"\ncpu.model = \"Haswell-noTSX\"\ncpu.fallback = \"forbid\"\ncpu.check = \"partial\"\ncpu.min_level = \"x86-64-v3\"\ncpu.require = [\"aes\", \"sse4_1\"]\ncpu.disable = [\"hle\", \"svm\"]\n",
    // 2: host-model (aarch64 KVM turns it into host-passthrough)
    "[[rule]]\nname = \"hm\"\ncpu.mode = \"host-model\"\ncpu.require = [\"x2apic\"]\n",
    // 3: host-passthrough (TCG turns it into maximum)
    "[[rule]]\nname = \"hp\"\ncpu.mode = \"host-passthrough\"\ncpu.min_level = \"x86-64-v2\"\n",
    // 4: the vCPU maximum, with topology and IOMMU
    "[[rule]]\nname = \"v\"\nmatch = { type = \"kvm\" }\ncpu.min_level = \"x86-64-v2\"\nvcpu.max = \"host\"\nvcpu.topology = \"sockets\"\nvcpu.iommu = \"auto\"\n[[rule]]\nname = \"w\"\nmatch = { machine = \"pc*\" }\nvcpu.max = \"machine\"\nvcpu.topology = \"cores\"\n",
    // 5: audit
    "mode = \"audit\"\n[[rule]]\nname = \"a\"\ncpu.mode = \"custom\"\ncpu.min_level = \"x86-64-v3\"\n",
];

thread_local! {
    static HOST: Host = Host::discover(&HostOptions {
        caps: Vec::new(),
        cpu_map: None,
        cpus: Some(Sourced { value: 384, source: "fuzz".into() }),
        qemu_cache: Some(std::path::PathBuf::new()),
        kvm_max_vcpus: Some(Sourced { value: 1024, source: "fuzz".into() }),
        ..HostOptions::default()
    })
    .expect("host facts");
}

/// Byte ranges of the top-level libvirt `<cpu>` elements.
fn top_cpus(doc: &roxmltree::Document<'_>) -> Vec<Range<usize>> {
    doc.root_element()
        .children()
        .filter(|n| {
            n.is_element() && n.tag_name().name() == "cpu" && n.tag_name().namespace().is_none()
        })
        .map(|n| n.range())
        .collect()
}

/// The range deleted with a later `<cpu>`: with its line when only blanks precede it.
fn with_line(text: &str, r: Range<usize>) -> Range<usize> {
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

fn parse(text: &str) -> roxmltree::Document<'_> {
    roxmltree::Document::parse_with_options(
        text,
        roxmltree::ParsingOptions {
            allow_dtd: false,
            nodes_limit: virt_cpu_policy::xml::MAX_NODES,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("the output is not well-formed XML: {e}\n--- output ---\n{text}"))
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let (policy_text, doc_bytes): (&[u8], &[u8]) = if usize::from(sel % 8) < FIXED.len() {
        (FIXED[usize::from(sel % 8)].as_bytes(), rest)
    } else {
        match rest.iter().position(|&b| b == 0) {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &[]),
        }
    };
    let Ok(policy_text) = std::str::from_utf8(policy_text) else {
        return;
    };
    let Ok(policy) = Policy::parse(policy_text, "fuzz") else {
        return;
    };
    let Ok(input) = decode(doc_bytes, "fuzz") else {
        return;
    };
    HOST.with(|host| check(input, &policy, host));
});

fn check(input: &str, policy: &Policy, host: &Host) {
    let Ok(o) = rewrite(input, "fuzz", policy, host) else {
        return;
    };
    // Ok means the input parsed as a domain.
    let dom = Domain::parse(input, "fuzz").expect("rewrite accepted it, so it parses");
    if !o.in_scope || policy.mode == Mode::Audit {
        assert!(
            o.output == input,
            "out of scope or audit, yet the output differs"
        );
        return;
    }
    if o.has_errors() {
        return;
    }
    let show = || {
        format!(
            "\n--- input ---\n{input}\n--- output ---\n{}\n---",
            o.output
        )
    };
    let out = o.output.as_str();
    assert_eq!(
        o.changed,
        out != input,
        "`changed` disagrees with the output{}",
        show()
    );
    assert!(
        !o.changed || !o.changes.is_empty(),
        "the document changed but no change is explained{}",
        show()
    );
    let in_doc = parse(input);
    let out_doc = parse(out);
    let (had, has) = (top_cpus(&in_doc), top_cpus(&out_doc));
    if had.is_empty() {
        assert!(has.len() <= 1, "{} <cpu> added{}", has.len(), show());
    } else {
        assert_eq!(
            has.len(),
            1,
            "{} <cpu> in, {} out{}",
            had.len(),
            has.len(),
            show()
        );
    }
    let again = rewrite(out, "fuzz (second pass)", policy, host)
        .unwrap_or_else(|e| panic!("the output does not rewrite: {e}{}", show()));
    assert!(
        !again.has_errors(),
        "the tool's validator refuses its own output: {:?}{}",
        again.findings,
        show()
    );
    assert!(
        again.output == out && !again.changed,
        "not idempotent: second output\n{}\nchanges {:?}{}",
        again.output,
        again.changes,
        show()
    );
    // Untouched bytes, when only <cpu> may change.
    let plan = policy.plan_for(&dom);
    // Any vcpu.* key may edit <vcpu>, <features> and <devices> (vcpu.iommu alone adds the IOMMU
    // a large guest needs).
    let vcpu_rules = plan.vcpu_max.is_some() || plan.iommu.is_some() || plan.topology.is_some();
    if vcpu_rules || had.is_empty() || !o.changed {
        return;
    }
    let first = had[0].clone();
    let prefix = &input[..first.start];
    let mut suffix = String::new();
    let mut pos = first.end;
    for r in &had[1..] {
        let del = with_line(input, r.clone());
        suffix.push_str(&input[pos..del.start]);
        pos = del.end;
    }
    suffix.push_str(&input[pos..]);
    assert!(
        out.starts_with(prefix),
        "the bytes before the first <cpu> changed{}",
        show()
    );
    assert!(
        out.len() >= prefix.len() + suffix.len() && out.ends_with(suffix.as_str()),
        "the bytes after the first <cpu> (later ones removed with their line) changed; expected suffix:\n{suffix}{}",
        show()
    );
    let middle = prefix.len()..out.len() - suffix.len();
    assert!(
        has[0] == middle,
        "the first <cpu> became something other than one <cpu> element: {:?}{}",
        &out[middle.clone()],
        show()
    );
}
