//! Checks of the `<cpu>` element (libvirt `src/conf/cpu_conf.c`, `src/qemu/qemu_validate.c`)
//! and of the psABI level the guest CPU reaches.

use crate::cpu::{Level, normalize_feature};
use crate::domain::{Domain, cpu_features, model_name};
use crate::domain_facts::DomainFacts;
use crate::finding::{Code, Finding};
use crate::libvirt::arch::is_x86;
use crate::libvirt::cpu_def::{CpuCheck, CpuMatch, CpuMode, Fallback, FeaturePolicy};
use crate::policy::Plan;
use crate::xml::{child, is_libvirt_element};
use roxmltree::Node;
use std::collections::BTreeSet;

/// The checks of the first `<cpu>` (`cpu`, None when there is none: only the level applies).
pub(super) fn check(
    dom: &Domain<'_>,
    cpu: Option<Node<'_, '_>>,
    plan: &Plan,
    facts: &DomainFacts<'_>,
    running: bool,
    out: &mut Vec<Finding>,
) {
    let level = |cpu, mode, out: &mut Vec<Finding>| {
        check_level(dom, cpu, mode, plan, facts, running, out);
    };
    let Some(cpu) = cpu else {
        level(None, CpuMode::Custom, out);
        super::os_floor::check(dom, None, plan, facts, out);
        return;
    };
    let mode = cpu.attribute("mode").unwrap_or(CpuMode::Custom.as_str());
    // Read once: every check below asks the mode libvirt reads, and a word it does not know
    // ends them here (libvirt refuses the domain at define).
    let Some(mode) = CpuMode::parse(mode) else {
        out.push(Finding::error(
            Code::CpuModeInvalid,
            format!("Invalid mode attribute '{mode}' (libvirt accepts custom, host-model, host-passthrough, maximum)"),
            "set <cpu mode> to one of those",
        ));
        return;
    };
    check_mode_supported(mode, facts, out);
    check_mode_attributes(cpu, mode, out);
    let model = child(cpu, "model").and_then(model_name);
    check_model_presence(cpu, mode, model.as_deref(), out);
    check_features(cpu, mode, dom.arch(), facts, out);
    if let (Some(m), CpuMode::Custom) = (&model, mode) {
        check_model_known(cpu, m, dom.arch(), facts, out);
        // libvirt's refusal at start (`cpu-incompatible`) says more than an unusable model.
        if !super::kvm::check(dom, cpu, facts, out) {
            check_model_usable(cpu, m, dom.virt_type(), facts, out);
        }
    }
    if mode == CpuMode::HostModel {
        super::kvm::check(dom, cpu, facts, out);
    }
    super::tcg::check_cpu(cpu, mode, facts, out);
    level(Some(cpu), mode, out);
    super::os_floor::check(dom, Some(cpu), plan, facts, out);
}

/// Modes libvirt refuses for the arch and virt type ("CPU mode '...' for ... domain on ... host is
/// not supported by hypervisor"), per domcapabilities or the built-in table.
fn check_mode_supported(mode: CpuMode, facts: &DomainFacts<'_>, out: &mut Vec<Finding>) {
    if facts.mode_supported(mode) != Some(false) {
        return;
    }
    let instead: Vec<String> = crate::modes::MODES
        .iter()
        .filter(|m| facts.mode_supported(**m) == Some(true))
        .map(|m| format!("mode='{m}'"))
        .collect();
    let fix = if instead.is_empty() {
        "use a CPU mode libvirt offers this guest (virsh domcapabilities lists them)".to_string()
    } else {
        format!(
            "use {} (per {})",
            instead.join(" or "),
            facts.modes_source()
        )
    };
    out.push(Finding::error(
        Code::CpuModeUnsupported,
        facts.mode_refusal(mode),
        fix,
    ));
}

/// `match` means nothing under host-model; `migratable` and `<cache mode='passthrough'>` are
/// allowed with host-passthrough and maximum only.
fn check_mode_attributes(cpu: Node<'_, '_>, mode: CpuMode, out: &mut Vec<Finding>) {
    check_enum_attributes(cpu, mode, out);
    if mode == CpuMode::HostModel && cpu.attribute("match").is_some() {
        out.push(Finding::warning(
            Code::CpuMatchHostModel,
            "<cpu match> has no meaning with mode='host-model'",
            "remove the match attribute",
        ));
    }
    let cache = child(cpu, "cache").and_then(|c| c.attribute("mode"));
    if cache == Some("passthrough") && !mode.is_passthrough_like() {
        out.push(Finding::error(
            Code::CpuCacheMode,
            "CPU cache mode 'passthrough' can only be used with 'host-passthrough' / 'maximum' CPUs",
            "remove <cache mode='passthrough'/> (virt-cpu-policy rewrite does)",
        ));
    }
    if cpu.attribute("migratable").is_some() && !mode.is_passthrough_like() {
        out.push(Finding::error(
            Code::CpuMigratableMode,
            "Attribute migratable is only allowed for 'host-passthrough' / 'maximum' CPU mode",
            "remove the migratable attribute",
        ));
    }
}

/// `match`, `check` and the model's `fallback` take only libvirt's values: libvirt's reader
/// (`virCPUDefParseXML`, `virXMLPropEnum`) refuses the definition otherwise, in the words of
/// [`CpuDef::read_as`](crate::libvirt::cpu_def::CpuDef::read_as); `fallback` is read only outside
/// host-passthrough and maximum, as there.
fn check_enum_attributes(cpu: Node<'_, '_>, mode: CpuMode, out: &mut Vec<Finding>) {
    let fix = "use one of libvirt's values (docs/findings.md) or remove the attribute";
    let invalid = [
        (
            "match",
            cpu.attribute("match")
                .filter(|v| CpuMatch::parse(v).is_none()),
        ),
        (
            "check",
            cpu.attribute("check")
                .filter(|v| CpuCheck::parse(v).is_none()),
        ),
    ];
    for (name, v) in invalid {
        if let Some(v) = v {
            out.push(Finding::error(
                Code::CpuAttributeInvalid,
                format!("Invalid value for attribute '{name}' in element 'cpu': '{v}'"),
                fix,
            ));
        }
    }
    let fallback = child(cpu, "model").and_then(|m| m.attribute("fallback"));
    if let Some(v) = fallback.filter(|v| Fallback::parse(v).is_none()) {
        if !mode.is_passthrough_like() {
            out.push(Finding::error(
                Code::CpuAttributeInvalid,
                format!("Invalid fallback attribute ('{v}'; libvirt knows allow and forbid)"),
                fix,
            ));
        }
    }
}

/// Features in custom mode and a vendor need a model.
fn check_model_presence(
    cpu: Node<'_, '_>,
    mode: CpuMode,
    model: Option<&str>,
    out: &mut Vec<Finding>,
) {
    let has_features = cpu.children().any(|c| is_libvirt_element(c, "feature"));
    if mode == CpuMode::Custom && model.is_none() && has_features {
        out.push(Finding::error(
            Code::CpuFeaturesWithoutModel,
            "Non-empty feature list specified without CPU model",
            "add a <model> (the machine's default is qemu64 on x86_64)",
        ));
    }
    if child(cpu, "vendor").is_some() && model.is_none() {
        out.push(Finding::error(
            Code::CpuVendorWithoutModel,
            "CPU vendor specified without CPU model",
            "add a <model> or remove <vendor>",
        ));
    }
}

/// Every `<feature>`: a name, known to libvirt, listed once, with a valid policy.
fn check_features(
    cpu: Node<'_, '_>,
    mode: CpuMode,
    arch: &str,
    facts: &DomainFacts<'_>,
    out: &mut Vec<Finding>,
) {
    let mut seen = BTreeSet::new();
    for f in cpu.children().filter(|c| is_libvirt_element(*c, "feature")) {
        // libvirt's virCPUDefParseXML refuses a missing and an empty name alike, at define
        // (seen on 7.0, 9.0, 11.3 and 12.8: "XML error: Invalid CPU feature name").
        let Some(name) = f.attribute("name").filter(|n| !n.is_empty()) else {
            out.push(Finding::error(
                Code::CpuFeatureInvalid,
                "Invalid CPU feature name (a <feature> without a name, or with an empty one)",
                "give every <feature> libvirt's name of the feature",
            ));
            continue;
        };
        let key = normalize_feature(name).unwrap_or_else(|| name.to_string());
        if is_x86(arch) && !facts.feature_known(&key) {
            out.push(unknown_name(
                facts,
                Code::CpuFeatureUnknown,
                format!("CPU feature '{name}' is not one libvirt knows (x86_features.xml of {}): libvirt refuses to start the guest (\"unknown CPU feature: {name}\")", facts.cpu_map_source),
                "use libvirt's feature names (`virsh domcapabilities` lists them)",
            ));
        } else if let Some(key) = is_x86(arch)
            .then(|| crate::cpu::libvirt_spelling_of(name))
            .flatten()
        {
            out.push(unknown_name(
                facts,
                Code::CpuFeatureUnknown,
                format!("CPU feature '{name}' is not libvirt's name of it, '{key}' (x86_features.xml of {}): libvirt refuses to start the guest (\"unknown CPU feature: {name}\")", facts.cpu_map_source),
                &format!("write it name='{key}', libvirt's spelling"),
            ));
        }
        if !seen.insert(name) {
            out.push(Finding::error(
                Code::CpuFeatureDuplicate,
                format!("CPU feature '{name}' specified more than once"),
                "keep one <feature> per name",
            ));
        }
        if let Some(p) = f.attribute("policy") {
            if FeaturePolicy::parse(p).is_none() && !mode.is_passthrough_like() {
                out.push(Finding::error(
                    Code::CpuFeatureInvalid,
                    format!("Invalid CPU feature policy '{p}' for feature '{name}'"),
                    "use force, require, optional, disable or forbid",
                ));
            }
        }
    }
}

/// A finding about a name libvirt's cpu_map does not define: an error when the cpu_map is this
/// host's own (libvirt will refuse the guest), a warning when only the built-in copy of libvirt
/// 9.0's answered (the guest's libvirt may know the name).
fn unknown_name(facts: &DomainFacts<'_>, code: Code, what: String, fix: &str) -> Finding {
    if facts.cpu_map_is_builtin() {
        Finding::warning(
            code,
            format!(
                "{what} (no libvirt cpu_map on this machine: the built-in copy of libvirt 9.0's answered; a newer libvirt may know it)"
            ),
            fix,
        )
    } else {
        Finding::error(code, what, fix)
    }
}

/// A custom model libvirt's cpu_map does not define: libvirt defines the domain and refuses to
/// start it ("Unknown CPU model X", libvirt 9.0). On ARM, libvirt's CPU driver has no models of
/// its own to translate a name through (`virCPUTranslate` without a driver `translate`): a model
/// the emulator does not offer (domcapabilities' custom models of the guest's arch and virt type)
/// is refused at start: "this function is not supported by the connection driver: cannot
/// translate CPU model maximum to a supported model" (virt-install 4.1's `--cpu maximum` on
/// aarch64, seen on libvirt 7.0, 9.0, 11.3 and 12.8); with `fallback='forbid'` libvirt stops
/// before translating: "CPU model maximum is not supported by hypervisor".
fn check_model_known(
    cpu: Node<'_, '_>,
    model: &str,
    arch: &str,
    facts: &DomainFacts<'_>,
    out: &mut Vec<Finding>,
) {
    if crate::libvirt::arch::Arch::of(arch).is_arm() {
        check_arm_model_offered(cpu, model, arch, facts, out);
        return;
    }
    if is_x86(arch) && facts.model_features(model).is_none() {
        out.push(unknown_name(
            facts,
            Code::CpuModelUnknown,
            format!("CPU model '{model}' is not in libvirt's cpu_map ({}): libvirt refuses to start the guest (\"Unknown CPU model {model}\")", facts.cpu_map_source),
            "use a model libvirt knows (`virsh cpu-models x86_64`), written without spaces around it",
        ));
        return;
    }
    if is_x86(arch) {
        check_x86_model_offered(cpu, model, facts, out);
    }
}

/// An x86 custom model libvirt's cpu_map knows but the emulator does not offer (absent from
/// domcapabilities' custom models of the guest's virt type and machine type: QEMU 7.1 removed
/// `Icelake-Client`, which libvirt 9.0 to 12.8 keep). libvirt's `virCPUTranslate` then refuses
/// the start under `fallback='forbid'` ("CPU model Icelake-Client is not supported by
/// hypervisor", seen on libvirt 9.0/QEMU 7.2), and otherwise starts the guest with the closest
/// model the emulator offers (`x86Decode` over the allowed models; seen on libvirt 9.0/QEMU
/// 7.2: `IvyBridge` and features for `Icelake-Client`, `check='full'`): a warning, the guest's
/// CPU is not the one named. Without domcapabilities listing custom models nothing is said.
fn check_x86_model_offered(
    cpu: Node<'_, '_>,
    model: &str,
    facts: &DomainFacts<'_>,
    out: &mut Vec<Finding>,
) {
    let Some(dc) = facts
        .domcaps
        .filter(|dc| dc.modes.contains(&CpuMode::Custom) && !dc.models.is_empty())
    else {
        return;
    };
    if dc.lists_model(model) {
        return;
    }
    let forbid = child(cpu, "model")
        .and_then(|m| m.attribute("fallback"))
        .and_then(Fallback::parse)
        == Some(Fallback::Forbid);
    let offered = format!(
        "CPU model '{model}' is not one this QEMU offers for {} guests (not among the custom models of {})",
        dc.virt_type, dc.source
    );
    out.push(if forbid {
        Finding::error(
            Code::CpuModelUnknown,
            format!("{offered}: with fallback='forbid' libvirt refuses to start the guest (\"CPU model {model} is not supported by hypervisor\")"),
            "use a model `virsh domcapabilities` lists under <mode name='custom'>, or drop fallback='forbid' to let libvirt pick the closest one",
        )
    } else {
        Finding::warning(
            Code::CpuModelUnknown,
            format!("{offered}: libvirt starts the guest with the closest model it offers instead (fallback='allow'), so the guest does not get the CPU it names"),
            "use a model `virsh domcapabilities` lists under <mode name='custom'>",
        )
    });
}

/// An Arm custom model the emulator does not offer ([`check_model_known`]): domcapabilities'
/// custom models of the guest's arch and virt type decide, else (as found) the models the
/// emulator's QEMU capability cache lists for the virt type ([`DomainFacts::arm_models`]: QEMU
/// 7.2 names `neoverse-n1`, not libvirt's `Neoverse-N1`); without either nothing is said.
fn check_arm_model_offered(
    cpu: Node<'_, '_>,
    model: &str,
    arch: &str,
    facts: &DomainFacts<'_>,
    out: &mut Vec<Finding>,
) {
    let source = match (facts.domcaps, &facts.arm_models) {
        (Some(dc), _) if dc.modes.contains(&CpuMode::Custom) && !dc.models.is_empty() => {
            if dc.lists_model(model) {
                return;
            }
            dc.source.clone()
        }
        (_, Some(cached)) => {
            if cached.value.iter().any(|m| m == model) {
                return;
            }
            cached.source.clone()
        }
        _ => return,
    };
    // libvirt's `virCPUTranslate`: `fallback='forbid'` stops before any translation.
    let fallback = child(cpu, "model")
        .and_then(|m| m.attribute("fallback"))
        .and_then(Fallback::parse);
    let said = if fallback == Some(Fallback::Forbid) {
        format!("CPU model {model} is not supported by hypervisor")
    } else {
        format!("cannot translate CPU model {model} to a supported model")
    };
    out.push(Finding::error(
        Code::CpuModelUnknown,
        format!(
            "CPU model '{model}' is not one this emulator offers for {arch} ({source}): libvirt refuses to start the guest (\"{said}\")"
        ),
        "use a model `virsh domcapabilities --arch ARCH --virttype TYPE` lists under <mode name='custom'>, or mode='host-passthrough' (KVM) / mode='maximum' (TCG)",
    ));
}

/// A custom model domcapabilities lists `usable='no'` starts only without the features the host
/// lacks. Under KVM, `check='partial'` compares with the host's CPUID, not with what KVM gives
/// ([`super::kvm`]): a feature only KVM lacks passes, and QEMU drops it at start (seen with
/// libvirt 9.0, 11.3 and 12.8: `<model>Nehalem</model>` on a host whose KVM lacks `pni` and
/// `popcnt` starts with them, `ssse3`, `sse4.1` and `sse4.2` disabled in the live XML); what the
/// CPUID lacks too is `cpu-incompatible`.
fn check_model_usable(
    cpu: Node<'_, '_>,
    model: &str,
    vt: &str,
    facts: &DomainFacts<'_>,
    out: &mut Vec<Finding>,
) {
    let Some(dc) = facts.domcaps else { return };
    if dc.model_usable(model) != Some(false) {
        return;
    }
    let what = if vt == "kvm" && super::tcg::check_of(cpu, CpuMode::Custom, vt) == CpuCheck::Partial
    {
        "KVM cannot give all its features: with check='partial' libvirt compares the guest CPU with this host's own CPU, not with what KVM gives; what the host's CPU has and KVM lacks, QEMU silently drops at start (the live XML disables it), and what the host's CPU lacks too, libvirt refuses (cpu-incompatible; not-compared when the host's CPU is not known)"
    } else {
        "features the host lacks fail the start (check='partial'/'full') or are dropped silently"
    };
    out.push(Finding::warning(
        Code::CpuModelUnusable,
        format!(
            "CPU model '{model}' is usable='no' for {vt} on this host ({}): {what}",
            dc.source
        ),
        "disable the features the host lacks, or choose a usable model",
    ));
}

/// The features of `level` missing from `feats`, in the level's order.
fn missing_features(level: Level, feats: &BTreeSet<String>) -> Vec<&'static str> {
    level
        .features()
        .into_iter()
        .filter(|f| !feats.contains(*f))
        .collect()
}

/// `cpu.min_level`: for a custom CPU, the model's features (cpu_map) with the listed ones must
/// reach it (`cpu-level`); for host-model/host-passthrough/maximum under KVM the host decides, and
/// domcapabilities' host-model CPU says what it gives (`host-level`, a warning). `mode` is the
/// mode libvirt reads of `cpu` (custom without one).
fn check_level(
    dom: &Domain<'_>,
    cpu: Option<Node<'_, '_>>,
    mode: CpuMode,
    plan: &Plan,
    facts: &DomainFacts<'_>,
    running: bool,
    out: &mut Vec<Finding>,
) {
    let Some(level) = &plan.min_level else {
        return;
    };
    if dom.arch() != "x86_64" {
        return;
    }
    let explicit = cpu.map(cpu_features).unwrap_or_default();
    if mode == CpuMode::Custom {
        check_custom_cpu_level(cpu, &explicit, level, facts, running, out);
    } else {
        check_host_cpu_level(dom, mode, &explicit, level, facts, out);
    }
}

/// `cpu.min_level` of a custom CPU: libvirt gives the guest its model as the cpu_map defines it
/// (QEMU's `qemu64` when it names none), with the features it requires and without those it
/// disables; short of the level that CPU is an error (`cpu-level`), else under TCG what QEMU
/// emulates decides ([`check_tcg_level`]).
fn check_custom_cpu_level(
    cpu: Option<Node<'_, '_>>,
    explicit: &[(String, Option<FeaturePolicy>)],
    level: &crate::policy::Ruled<Level>,
    facts: &DomainFacts<'_>,
    live: bool,
    out: &mut Vec<Finding>,
) {
    let Some((model, feats)) = facts.custom_cpu_features(cpu, explicit) else {
        return;
    };
    if Level::highest(|f| feats.contains(f)) < Some(level.value) {
        let missing = missing_features(level.value, &feats);
        out.push(
            Finding::error(
                Code::CpuLevel,
                format!(
                    "the guest CPU (model {model}) does not reach {}: missing {}",
                    level.value,
                    missing.join(", ")
                ),
                "require the missing features (virt-cpu-policy rewrite does)",
            )
            .rule(&level.rule),
        );
        return;
    }
    check_tcg_level(cpu, level, facts, out);
    check_kvm_level(cpu, &feats, level, facts, live, out);
}

/// A custom CPU that reaches `cpu.min_level` as written, under KVM with libvirt's
/// `check='partial'` (its default for a custom CPU) or `none`: libvirt compares the guest CPU
/// with the host's own CPU at start (`qemuProcessUpdateGuestCPU`), not with what KVM gives, and
/// QEMU drops at start each feature KVM cannot give (the live XML lists it `policy='disable'`).
/// Recorded on both hosts of `../shared/corpus/kvm-truth/` on all four libvirt generations
/// (case `qemu64-v2`: `qemu64` with the five x86-64-v2 features required starts, and its live
/// CPU has `popcnt`, `sse4.1`, `sse4.2`, `ssse3` and `pni` disabled). What KVM gives is the
/// host-model CPU of the kvm domcapabilities, else, as found, QEMU's KVM host CPU of libvirt's
/// capability cache ([`DomainFacts::host_model_features`]); where neither is known nothing is
/// claimed here. Short of the level as KVM gives it the guest would run below what the policy
/// guarantees: an error (`cpu-level`), which no rewrite fixes on this host. Under
/// `check='full'` libvirt refuses the start itself (`kvm-check-full`); a CPU libvirt refuses at
/// start (`cpu-incompatible`) is not judged twice. A running guest's live XML (`live`: its
/// `check='full'` is libvirt's record, not a start to come) is judged as KVM gave it.
fn check_kvm_level(
    cpu: Option<Node<'_, '_>>,
    feats: &BTreeSet<String>,
    level: &crate::policy::Ruled<Level>,
    facts: &DomainFacts<'_>,
    live: bool,
    out: &mut Vec<Finding>,
) {
    if facts.virt_type != "kvm" || out.iter().any(|f| f.code == Code::CpuIncompatible) {
        return;
    }
    let check = cpu.map_or(CpuCheck::default_for(CpuMode::Custom, "kvm"), |c| {
        super::tcg::check_of(c, CpuMode::Custom, "kvm")
    });
    if check == CpuCheck::Full && !live {
        return;
    }
    let Some((gives, source)) = facts.host_model_features(&[], true) else {
        return;
    };
    let kept: BTreeSet<String> = feats.intersection(&gives).cloned().collect();
    if Level::highest(|f| kept.contains(f)) >= Some(level.value) {
        return;
    }
    let dropped = missing_features(level.value, &kept);
    let reaches = Level::highest(|f| kept.contains(f)).map_or("no x86-64 level", Level::as_str);
    let message = if live {
        format!(
            "the running guest's CPU (its live XML) reaches {reaches}, not {}: KVM on this host does not give {} (per the host-model CPU of {source})",
            level.value,
            dropped.join(", ")
        )
    } else {
        format!(
            "the guest CPU (its model and the features it requires) reaches {}, but KVM on this host does not give {} (per the host-model CPU of {source}): libvirt starts it (check='{}' compares with the host's own CPU) and QEMU drops them, so the guest runs at {reaches}",
            level.value,
            dropped.join(", "),
            check.as_str()
        )
    };
    out.push(
        Finding::error(
            Code::CpuLevel,
            message,
            "run the guest on a host whose CPU and KVM give them (virsh domcapabilities: the host-model CPU), or lower cpu.min_level for this host's guests: no rewrite makes this host's KVM give them",
        )
        .rule(&level.rule),
    );
}

/// `cpu.min_level` of a CPU the host decides (`mode` host-model, host-passthrough or maximum):
/// under KVM the host-model CPU of domcapabilities says what the host gives; under TCG
/// `maximum` emulates every psABI feature and host-model is the TCG host-model CPU of the
/// `type='qemu'` domcapabilities (QEMU 5.2's lacks avx, avx2, fma, f16c). Short of the level
/// it is a warning (`host-level`): the guest is as written, the host cannot give it more.
fn check_host_cpu_level(
    dom: &Domain<'_>,
    mode: CpuMode,
    explicit: &[(String, Option<FeaturePolicy>)],
    level: &crate::policy::Ruled<Level>,
    facts: &DomainFacts<'_>,
    out: &mut Vec<Finding>,
) {
    let tcg = dom.virt_type() == "qemu";
    if tcg && mode != CpuMode::HostModel {
        return;
    }
    let Some((feats, source)) = facts.host_model_features(explicit, false) else {
        return;
    };
    if Level::highest(|f| feats.contains(f)) < Some(level.value) {
        let missing = missing_features(level.value, &feats);
        out.push(
            Finding::warning(
                Code::HostLevel,
                format!(
                    "this host's {mode} CPU (per {source}) does not reach {}: missing {}; {} will not provide them",
                    level.value,
                    missing.join(", "),
                    if tcg { "this QEMU's TCG" } else { "KVM" }
                ),
                if tcg {
                    "run the guest under KVM on a host whose CPU has them, or on a QEMU whose TCG emulates them"
                } else {
                    "run the guest on a host whose CPU and KVM provide them, or under TCG (type='qemu')"
                },
            )
            .rule(&level.rule),
        );
    }
}

/// The x86-64-v3 features QEMU's TCG emulates from 7.2 on (its changelog: "AVX, AVX2, F16C,
/// FMA3"), which 5.2's lacks.
const TCG_SINCE_7_2: [&str; 4] = ["avx", "avx2", "f16c", "fma"];

/// A custom CPU that reaches `cpu.min_level` as written, under TCG with libvirt's `check='none'`
/// (its default for a custom CPU): QEMU drops each required feature its TCG does not emulate,
/// with a warning on its own stderr only ("TCG doesn't support requested feature"), and the
/// guest starts below the level. The TCG CPU is the host-model CPU of the `type='qemu'`
/// domcapabilities, or `<hostCPU type='tcg'>` of libvirt's QEMU capability cache
/// ([`crate::tcg_facts::TcgFacts::host_cpu`]): QEMU 5.2's lacks avx, avx2, fma and f16c (QEMU 7.2's
/// changelog: TCG emulates AVX, AVX2, F16C and FMA3 from 7.2 on). With `partial` or `full`
/// libvirt refuses the start instead (`tcg-cpu-missing`).
fn check_tcg_level(
    cpu: Option<Node<'_, '_>>,
    level: &crate::policy::Ruled<Level>,
    facts: &DomainFacts<'_>,
    out: &mut Vec<Finding>,
) {
    let Some((gives, source)) = facts.tcg.host_cpu.as_ref() else {
        return;
    };
    let check = cpu.map_or(CpuCheck::None, |c| {
        super::tcg::check_of(c, CpuMode::Custom, "qemu")
    });
    if !facts.tcg.x86_tcg || check != CpuCheck::None {
        return;
    }
    let dropped = missing_features(level.value, gives);
    if dropped.is_empty() {
        return;
    }
    out.push(
        Finding::warning(
            Code::HostLevel,
            format!(
                "this host's TCG CPU ({}per {source}) does not emulate {}: QEMU drops them at start (libvirt compares nothing under check='none'), and the guest will not reach {}",
                facts
                    .tcg
                    .version
                    .as_ref()
                    .map_or(String::new(), |v| format!("QEMU {}, ", v.value)),
                dropped.join(", "),
                level.value
            ),
            if dropped.iter().all(|f| TCG_SINCE_7_2.contains(f)) {
                "run the guest under KVM on a host whose CPU has them, or on a QEMU whose TCG emulates them (AVX, AVX2, F16C and FMA3 from QEMU 7.2)"
            } else {
                "run the guest under KVM on a host whose CPU has them, or on a QEMU whose TCG emulates them"
            },
        )
        .rule(&level.rule),
    );
}
