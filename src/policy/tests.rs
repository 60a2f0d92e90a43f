use super::*;

#[test]
fn the_default_raises_a_guest_to_its_oss_floor_and_match_os_selects_by_os() {
    use crate::guest_os::{GuestOs, OsSource};
    fn target(os: Option<&GuestOs>) -> Target<'_> {
        Target {
            arch: "x86_64",
            virt_type: "kvm",
            os,
            ..Target::default()
        }
    }
    let os = |id: &str, source| GuestOs {
        id: id.to_string(),
        source,
    };
    let rhel10 = os("http://redhat.com/rhel/10.0", OsSource::Libosinfo);
    let win = os("Windows Server 2025 (64-bit)", OsSource::Description);
    let fedora = os("http://fedoraproject.org/fedora/40", OsSource::Libosinfo);
    let p = Policy::builtin();
    let plan = p.plan(&target(Some(&rhel10)));
    let level = plan.min_level.unwrap();
    assert_eq!(level.value, Level::V3);
    assert_eq!(level.rule, "x86-64-v2 baseline: the floor of rhel10.0");
    // Windows' floor is two features, both within x86-64-v2: the level stays, nothing added.
    let plan = p.plan(&target(Some(&win)));
    assert_eq!(plan.min_level.unwrap().value, Level::V2);
    assert!(plan.require.is_none());
    for os in [Some(&fedora), None] {
        let plan = p.plan(&target(os));
        assert_eq!(plan.min_level.unwrap().rule, "x86-64-v2 baseline");
    }
    // Off x86_64 nothing is raised.
    let plan = p.plan(&Target {
        arch: "aarch64",
        os: Some(&rhel10),
        ..Target::default()
    });
    assert!(plan.min_level.is_none());
    // Without os_floor the plan is the rules' alone (the floor is judged by validation).
    let v2 = Policy::parse(
        "version = 1\n[[rule]]\nname = \"v2\"\ncpu.min_level = \"x86-64-v2\"\n[[rule]]\nname = \"windows\"\nmatch = { os = \"windows server 2025*\" }\ncpu.require = [\"aes\"]\n[[rule]]\nname = \"rhel\"\nmatch = { os = \"rhel1*\" }\ncpu.check = \"full\"\n",
        "p",
    )
    .unwrap();
    let plan = v2.plan(&target(Some(&rhel10)));
    assert_eq!(plan.min_level.unwrap().value, Level::V2);
    assert_eq!(
        plan.matched,
        ["v2", "rhel"],
        "the short form rhel10.0 matches"
    );
    assert!(plan.os.unwrap().1.is_some());
    assert_eq!(v2.plan(&target(Some(&win))).matched, ["v2", "windows"]);
    assert_eq!(v2.plan(&target(None)).matched, ["v2"]);
    // A later rule's `cpu.os_floor = false` waives it: not raised.
    let waived = Policy::parse(
        &format!("{DEFAULT_POLICY}\n[[rule]]\nname = \"w\"\nmatch = {{ os = \"rhel10*\" }}\ncpu.os_floor = false\n"),
        "p",
    )
    .unwrap();
    let plan = waived.plan(&target(Some(&rhel10)));
    assert_eq!(plan.min_level.unwrap().value, Level::V2);
    assert!(!plan.os_floor.unwrap().value);
    let floor = rhel10.floor().unwrap();
    assert!(p.plan(&target(Some(&rhel10))).asks_floor(floor));
    assert!(!v2.plan(&target(Some(&rhel10))).asks_floor(floor));
}

#[test]
fn builtin_parses_and_targets_x86_64() {
    let p = Policy::builtin();
    let plan = p.plan(&Target {
        arch: "x86_64",
        virt_type: "kvm",
        ..Target::default()
    });
    assert_eq!(plan.min_level.unwrap().value, Level::V2);
    let plan = p.plan(&Target {
        arch: "aarch64",
        virt_type: "kvm",
        ..Target::default()
    });
    assert!(plan.min_level.is_none());
}

#[test]
fn misspelled_key_names_key_line_and_column() {
    let e = Policy::parse(
        "version = 1\n[[rule]]\nname = \"a\"\ncpu.modle = \"custom\"\n",
        "p",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("line 4"), "{e}");
    assert!(e.contains("modle"), "{e}");
}

#[test]
fn bad_values_are_errors_with_position() {
    for (text, needle) in [
        ("version = 2\n", "version"),
        (
            "[[rule]]\nname = \"a\"\ncpu.min_level = \"x86-64-v9\"\n",
            "line 3",
        ),
        ("[[rule]]\nname = \"a\"\ncpu.mode = \"host\"\n", "line 3"),
        (
            "[[rule]]\nname = \"a\"\ncpu.require = [\"aes\"]\ncpu.disable = [\"AES\"]\n",
            "also in",
        ),
        (
            "[[rule]]\nname = \"a\"\ncpu.min_level = \"x86-64-v2\"\ncpu.disable = [\"sse4_2\"]\n",
            "sse4.2",
        ),
        ("[[rule]]\nname = \"a\"\nvcpu.max = 0\n", "vcpu.max"),
        ("[[rule]]\nname = \"a\"\nvcpu.max = \"lots\"\n", "vcpu.max"),
        (
            "[[rule]]\nname = \"a\"\ncpu.mode = \"maximum\"\ncpu.model = \"Nehalem\"\n",
            "implies",
        ),
        ("[[rule]]\ncpu.mode = \"maximum\"\n", "name"),
        ("mode = \"audit \"\n", "line 1"),
        ("[hook]\non_violation = 1\n", "line 2"),
        ("[hook]\non_error = true\n", "key `hook.on_error`"),
        (
            "[[rule]]\nname = \"a\"\ncpu.check = 3\n",
            "key `rule.cpu.check`",
        ),
        (
            "[[rule]]\nname = \"a\"\nmatch = { arch = 5 }\n",
            "key `rule.match.arch`",
        ),
        ("mode = \"enforc\"\n", "key `mode`"),
        (
            "[[rule]]\nname = \"a\"\nmatch = { arch = \"x86_64\", system = \"linux\" }\n",
            "key `rule.match.system`",
        ),
        (
            "[[rule]]\nname = \"a\"\ncpu.modle = \"x\"\n",
            "key `rule.cpu.modle`",
        ),
        (
            "[[rule]]\nname = \"a\"\nmatch = { type = \"xen\" }\n",
            "matches neither",
        ),
        (
            "[[rule]]\nname = \"a\"\ncpu.min_level = \"v9\"\n",
            "key `rule.cpu.min_level`",
        ),
        ("[host]\ncpus = 0\n", "host.cpus"),
        (
            "[[rule]]\nname = \"a\"\ncpu.model = \"baseline\"\n",
            "line 3, column 13: key `rule.cpu.model`: \"baseline\" is the CPU every host of `[host] cluster` can run, and this policy names no cluster",
        ),
        (
            "[host]\ncluster = []\n[[rule]]\nname = \"a\"\ncpu.model = \"baseline\"\n",
            "line 5, column 13: key `rule.cpu.model`",
        ),
        (
            "[host]\ncluster = \"/srv/facts\"\n",
            "line 2, column 11: key `host.cluster`",
        ),
        (
            "[host]\ncluster = [\"a\", 3]\n",
            "line 2, column 17: key `host.cluster`",
        ),
        (
            "[host]\ncluster = [\"\"]\n",
            "key `host.cluster`: must not be empty",
        ),
        (
            "[host]\npublish = \"\"\n",
            "key `host.publish`: must not be empty",
        ),
        (
            "[host]\npublish = [\"/srv\"]\n",
            "line 2, column 11: key `host.publish`",
        ),
        ("[host]\npublsh = \"/srv\"\n", "unknown field `publsh`"),
    ] {
        let e = Policy::parse(text, "p").unwrap_err().to_string();
        assert!(e.contains(needle), "{text:?}: {e}");
    }
}

#[test]
fn every_mistake_is_reported_with_its_position() {
    let text = "mode = \"enforc\"\n[hook]\non_error = true\n[[rule]]\nname = \"a\"\ncpu.modle = \"x\"\ncpu.min_level = \"v9\"\nvcpu.max = 0\n[[rule]]\nname = \"b\"\nmatch = { type = \"xen\" }\n";
    let e = Policy::parse(text, "p").unwrap_err().to_string();
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(lines[0], "policy p: 6 errors:", "{e}");
    for (i, (line, key)) in [
        ("line 1, column 8", "key `mode`"),
        ("line 3, column 12", "key `hook.on_error`"),
        ("line 6, column 5", "key `rule.cpu.modle`"),
        ("line 7, column 17", "key `rule.cpu.min_level`"),
        ("line 8, column 12", "key `rule.vcpu.max`"),
        ("line 11, column 18", "key `rule.match.type`"),
    ]
    .into_iter()
    .enumerate()
    {
        assert!(
            lines[i + 1].contains(line) && lines[i + 1].contains(key),
            "{i}: {e}"
        );
    }
}

#[test]
fn on_error_is_found_in_broken_policies() {
    assert_eq!(
        on_error_hint("[hook]\non_error = \"deny\"\n[[rule]]\nbad = 1\n"),
        Some(OnError::Deny)
    );
    assert_eq!(
        on_error_hint("[hook]\non_error = \"deny\"\nthis is = = not toml\n"),
        Some(OnError::Deny)
    );
    assert_eq!(
        on_error_hint("hook.on_error = \"deny\"\n[[[\n"),
        Some(OnError::Deny)
    );
    assert_eq!(on_error_hint("[x]\non_error = \"deny\"\n[[[\n"), None);
    assert_eq!(
        on_error_hint("oops {{\n[hook]\non_error = \"deny\"   # \"allow\" | \"deny\"\n"),
        Some(OnError::Deny)
    );
    assert_eq!(
        on_error_hint("oops {{\n[hook]\non_error = 'deny'\n"),
        Some(OnError::Deny)
    );
    assert_eq!(on_error_hint("version = 1\n"), None);
}

#[test]
fn cluster_and_publish_are_read_in_any_order() {
    let p = Policy::parse(
        "[[rule]]\nname = \"c\"\ncpu.model = \"baseline\"\n[host]\ncluster = [\"/srv/facts\", \"/srv/extra/h.xml\"]\npublish = \"/srv/facts\"\n",
        "p",
    )
    .unwrap();
    assert_eq!(
        p.host.cluster,
        vec![
            PathBuf::from("/srv/facts"),
            PathBuf::from("/srv/extra/h.xml")
        ]
    );
    assert_eq!(p.host.publish, Some(PathBuf::from("/srv/facts")));
    let plan = p.plan(&Target::default());
    assert_eq!(plan.model.unwrap().value, BASELINE_MODEL);
    assert_eq!(plan.mode.unwrap().value, CpuMode::Custom);
}

#[test]
fn later_rules_override_key_by_key() {
    let p = Policy::parse(
        "[[rule]]\nname = \"a\"\ncpu.min_level = \"x86-64-v2\"\ncpu.check = \"full\"\n\
         [[rule]]\nname = \"b\"\nmatch = { type = \"qemu\" }\ncpu.check = \"none\"\ncpu.require = [\"SSE4_1\"]\n",
        "p",
    )
    .unwrap();
    let plan = p.plan(&Target {
        virt_type: "qemu",
        ..Target::default()
    });
    assert_eq!(plan.check.as_ref().unwrap().rule, "b");
    assert_eq!(plan.min_level.as_ref().unwrap().rule, "a");
    assert_eq!(plan.require.unwrap().value, vec!["sse4.1".to_string()]);
    let plan = p.plan(&Target {
        virt_type: "kvm",
        ..Target::default()
    });
    assert_eq!(plan.check.unwrap().value, CpuCheck::Full);
}
