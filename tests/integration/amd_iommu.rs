//! An AMD IOMMU (`<iommu model='amd'>`) for more than 255 vCPUs on every libvirt generation of
//! the rig: the tool, given each generation's facts (its capabilities, libvirt and QEMU
//! releases, cpu_map), completes it where libvirt 12.2 and later take it and refuses it,
//! naming libvirt 12.2, where they do not; each generation's `virsh define` of what the tool
//! wrote (forky's completed document on the others) says the same. Only defined, never
//! started: a guest of 288 vCPUs does not start on the rig's two cores.

use crate::harness::{Cmd, Generation, Output, Scratch, generation_scratch, generations, s};

/// A q35 KVM guest of 8 vCPUs (made 288 by the policy) with `features` and `devices`.
fn guest(name: &str, features: &str, iommu: &str) -> String {
    format!(
        "<domain type='kvm'>\n  <name>{name}</name>\n  <memory unit='MiB'>256</memory>\n  <vcpu placement='static'>8</vcpu>\n  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n  </os>\n  <features>\n    <acpi/>\n    <apic/>{features}\n  </features>\n  <cpu mode='host-passthrough'/>\n  <devices>\n    <console type='pty'/>\n    {iommu}\n  </devices>\n</domain>\n"
    )
}

const POLICY: &str = "version = 1\n\n[[rule]]\nname = \"scalable to 288\"\nvcpu.max = 288\n";

/// The guests: the bare model, and both switches written off with the kernel's I/O APIC.
fn inputs(prefix: &str) -> [(String, String); 2] {
    let bare = format!("{prefix}bare");
    let off = format!("{prefix}off");
    [
        (bare.clone(), guest(&bare, "", "<iommu model='amd'/>")),
        (
            off.clone(),
            guest(
                &off,
                "\n    <ioapic driver='kvm'/>",
                "<iommu model='amd'>\n      <driver intremap='off' xtsup='off'/>\n    </iommu>",
            ),
        ),
    ]
}

/// The tool's facts of generation `g`: its version and cpu_map, its capabilities (machine
/// types and their limits, from its own daemon), its QEMU release, KVM's limit.
fn facts_args(g: &Generation, dir: &std::path::Path) -> Vec<String> {
    let caps = g.virsh(&["capabilities"]);
    assert!(caps.ok, "{}: capabilities: {}", g.label, caps.stderr);
    let file = dir.join("capabilities.xml");
    std::fs::write(&file, &caps.stdout).unwrap();
    let version = g.virsh(&["version"]);
    let qemu = version
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("Running hypervisor: QEMU "))
        .unwrap_or_else(|| panic!("{}: no QEMU release: {}", g.label, version.stdout))
        .trim()
        .to_string();
    let mut args = g.tool_args();
    args.extend(
        [
            "--caps",
            &s(&file),
            "--qemu-version",
            &qemu,
            "--kvm-max-vcpus",
            "1024",
            "--no-qemu-caps-cache",
        ]
        .map(String::from),
    );
    args
}

fn rewrite(args: &[String], dir: &std::path::Path, name: &str, xml: &str) -> Output {
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, POLICY).unwrap();
    let input = dir.join(format!("{name}.xml"));
    std::fs::write(&input, xml).unwrap();
    Cmd::new(&["rewrite", "--policy", &s(&policy)])
        .args(args)
        .arg(s(&input))
        .run()
}

/// libvirt's own words in a failed `virsh define` (its last `error:` line, without the error
/// class).
fn libvirt_words(stderr: &str) -> String {
    let line = stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("error: "))
        .unwrap_or_else(|| panic!("no error line: {stderr}"));
    ["XML error: ", "unsupported configuration: "]
        .iter()
        .find_map(|p| line.strip_prefix(p))
        .unwrap_or(line)
        .trim()
        .to_string()
}

#[test]
#[ignore = "needs the libvirt generations: .ci/run builds and starts them (tests/libvirt/generations)"]
fn an_amd_iommu_above_255_vcpus_is_completed_where_libvirt_takes_it_and_refused_where_not() {
    let gens = generations();
    let tmp = Scratch::new("amd-iommu");
    let takes = |g: &Generation| g.major_minor() >= (12, 2);
    let forky = gens.iter().find(|g| takes(g)).unwrap_or_else(|| {
        panic!("no generation with libvirt 12.2 or later answers (forky's 12.8 is this test's subject: tests/libvirt/generations start forky)")
    });
    // What the tool writes for forky, defined by forky's libvirt.
    let (forky_prefix, _forky_sweep, dir) = generation_scratch(forky, "amd", &tmp.0);
    let args = facts_args(forky, &dir);
    let prefix = forky_prefix.clone();
    let mut completed = Vec::new();
    for (name, xml) in inputs(&prefix) {
        // As written, the guest with both switches off and the kernel's I/O APIC is refused by
        // forky, and by the tool's check in libvirt's words.
        if name.ends_with("off") {
            let file = dir.join(format!("{name}-input.xml"));
            std::fs::write(&file, xml.replace(">8</vcpu>", ">288</vcpu>")).unwrap();
            let d = forky.virsh(&["define", &s(&file)]);
            let _ = forky.virsh(&["undefine", &name]);
            assert!(!d.ok, "{}: {name} as written defined", forky.label);
            let words = libvirt_words(&d.stderr);
            let none = dir.join("none.toml");
            std::fs::write(&none, "version = 1\n").unwrap();
            let c = Cmd::new(&["check", "--policy", &s(&none)])
                .args(&args)
                .arg(s(&file))
                .run();
            assert!(
                c.code != 0 && c.stdout.contains(&words),
                "{}: {name}: libvirt says `{words}`, the tool's check:\n{}{}",
                forky.label,
                c.stdout,
                c.stderr
            );
        }
        let out = rewrite(&args, &dir, &name, &xml);
        out.status(0);
        assert!(
            out.stdout.contains("<iommu model='amd'>")
                && out.stdout.contains("intremap='on' xtsup='on'")
                && out.stdout.contains(">288</vcpu>"),
            "{}: {name}: {}",
            forky.label,
            out.stdout
        );
        let file = dir.join(format!("{name}-out.xml"));
        std::fs::write(&file, &out.stdout).unwrap();
        let d = forky.virsh(&["define", &s(&file)]);
        assert!(d.ok, "{}: {name}: define: {}", forky.label, d.stderr);
        let live = forky.virsh(&["dumpxml", "--inactive", &name]);
        let _ = forky.virsh(&["undefine", &name]);
        assert!(
            live.stdout.contains("xtsup='on'") && live.stdout.contains("<ioapic driver='qemu'/>"),
            "{}: {name}: {}",
            forky.label,
            live.stdout
        );
        completed.push((name, out.stdout));
    }
    let mut rows = vec![format!(
        "{}: {} guests completed and defined",
        forky.label,
        completed.len()
    )];
    // Every generation before 12.2: the tool refuses, naming libvirt 12.2, and its libvirt
    // refuses forky's completed document, in words the tool's refusal quotes.
    for g in gens.iter().filter(|g| !takes(g)) {
        let (prefix, _sweep, dir) = generation_scratch(g, "amd", &tmp.0);
        let args = facts_args(g, &dir);
        for ((name, xml), (_, done)) in inputs(&prefix).into_iter().zip(&completed) {
            let out = rewrite(&args, &dir, &name, &xml);
            assert!(
                out.code != 0 && out.stdout.is_empty(),
                "{}: {name}: the tool took it:\n{}",
                g.label,
                out.stdout
            );
            assert!(
                out.stderr.contains("need libvirt 12.2.0 or later"),
                "{}: {name}: {}",
                g.label,
                out.stderr
            );
            let file = dir.join(format!("{name}-forky.xml"));
            std::fs::write(&file, done.replace(&forky_prefix, &prefix)).unwrap();
            let d = g.virsh(&["define", &s(&file)]);
            let _ = g.virsh(&["undefine", &name]);
            assert!(!d.ok, "{}: {name}: forky's document defined", g.label);
            let words = libvirt_words(&d.stderr);
            assert!(
                out.stderr.contains(&words),
                "{}: {name}: libvirt says `{words}`, the tool:\n{}",
                g.label,
                out.stderr
            );
        }
        rows.push(format!(
            "{}: refused by the tool and by define, in libvirt's words",
            g.label
        ));
    }
    eprintln!("amd-iommu: {}", rows.join("; "));
}
