//! Reading the policy text: every mistake of a policy at once, each with its key, line and
//! column.
//!
//! The text is parsed into `toml`'s spanned tables (`toml::de::DeTable`), then walked key by key:
//! an unknown key, a value of the wrong type and a bad value are each recorded and the walk goes
//! on, so a policy with three mistakes is reported with three lines (a TOML syntax error stops
//! the parser: it is the one error then). Leaf values are deserialised with serde, one at a time,
//! so the messages are serde's and `toml`'s own ("unknown variant `enforc`, expected `enforce`
//! or `audit`").

use super::{
    BASELINE_MODEL, CpuRule, HookSettings, HostSettings, IommuStrategy, Match, Mode, OnError,
    OnViolation, Policy, Rule, TopologyStrategy, VcpuMax, VcpuRule,
};
use crate::change::reserved_rule_name;
use crate::cpu::{Level, normalize_feature};
use crate::error::{Error, Result};
use crate::libvirt::cpu_def::{CpuCheck, CpuMode, Fallback};
use serde::Deserialize;
use serde::de::IntoDeserializer;
use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

type Value<'t> = Spanned<DeValue<'t>>;

/// Parse a policy; see [`Policy::parse`].
pub(super) fn parse(text: &str, source: &str) -> Result<Policy> {
    let table = DeTable::parse(text).map_err(|e| Error::Policy {
        path: source.to_string(),
        errors: vec![toml_message(text, &e)],
    })?;
    let mut r = Reader {
        text,
        errors: Vec::new(),
        baseline_models: Vec::new(),
        rule_names: HashMap::new(),
    };
    let policy = r.policy(table.get_ref(), source);
    if r.errors.is_empty() {
        return Ok(policy);
    }
    r.errors.sort_by_key(|(at, _)| *at);
    Err(Error::Policy {
        path: source.to_string(),
        errors: r.errors.into_iter().map(|(_, m)| m).collect(),
    })
}

/// 1-based line and column of byte `offset` in `text`.
pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rfind('\n').map_or(offset, |i| offset - i - 1) + 1;
    (line, col)
}

/// The walk over the policy's tables, collecting every error with its byte offset.
struct Reader<'t> {
    text: &'t str,
    errors: Vec<(usize, String)>,
    /// Where `cpu.model = "baseline"` is written: it needs `[host] cluster`, which may come
    /// after the rules.
    baseline_models: Vec<Range<usize>>,
    /// Each rule name read so far and the line it is on: a plan names the rule behind each
    /// value, so two rules of one name would make the logs ambiguous.
    rule_names: HashMap<String, usize>,
}

/// The keys of `[[rule]]` and its sub-tables, as serde would list them.
const TOP_KEYS: &[&str] = &["version", "mode", "hook", "host", "rule"];
const HOOK_KEYS: &[&str] = &["on_violation", "on_error"];
const HOST_KEYS: &[&str] = &["cpu_map", "capabilities", "cpus", "publish", "cluster"];
const RULE_KEYS: &[&str] = &["name", "match", "cpu", "vcpu"];
const MATCH_KEYS: &[&str] = &["name", "arch", "machine", "type", "os"];
const CPU_KEYS: &[&str] = &[
    "mode",
    "model",
    "fallback",
    "check",
    "min_level",
    "require",
    "disable",
    "os_floor",
];
const VCPU_KEYS: &[&str] = &["max", "topology", "iommu"];

impl<'t> Reader<'t> {
    fn error(&mut self, span: Range<usize>, key: &str, msg: &str) {
        let (line, col) = line_col(self.text, span.start);
        // Messages quote the policy's values, and one mistake must stay one line.
        let msg = escape_controls(msg);
        self.errors.push((
            span.start,
            format!("line {line}, column {col}: key `{key}`: {msg}"),
        ));
    }

    /// `value` deserialised as `T`, or None with the error recorded under `key`.
    fn value<'v, T: Deserialize<'v>>(&mut self, value: &Value<'v>, key: &str) -> Option<T> {
        match T::deserialize(value.clone().into_deserializer()) {
            Ok(v) => Some(v),
            Err(e) => {
                let msg = e
                    .message()
                    .trim()
                    .replace("wanted string or table", "wrong type: expected a string");
                self.error(e.span().unwrap_or_else(|| value.span()), key, &msg);
                None
            }
        }
    }

    /// The entries of the table `value` whose keys are in `fields`; each other key is an error
    /// ("unknown field"), and a value that is not a table is one.
    fn table<'v>(
        &mut self,
        value: &'v Value<'t>,
        key: &str,
        fields: &[&str],
    ) -> Vec<(&'v str, &'v Value<'t>)> {
        let Some(table) = value.get_ref().as_table() else {
            let found = value.get_ref().type_str();
            self.error(
                value.span(),
                key,
                &format!("wrong type: expected a table, found {found}"),
            );
            return Vec::new();
        };
        self.entries(table, key, fields)
    }

    fn entries<'v>(
        &mut self,
        table: &'v DeTable<'t>,
        key: &str,
        fields: &[&str],
    ) -> Vec<(&'v str, &'v Value<'t>)> {
        let mut out = Vec::new();
        for (k, v) in table {
            let name: &str = k.get_ref();
            if fields.contains(&name) {
                out.push((name, v));
            } else {
                let expected = fields
                    .iter()
                    .map(|f| format!("`{f}`"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let full = dotted(key, name);
                self.error(
                    k.span(),
                    &full,
                    &format!("unknown field `{name}`, expected one of {expected}"),
                );
            }
        }
        out
    }

    fn policy(&mut self, table: &DeTable<'t>, source: &str) -> Policy {
        let mut p = Policy {
            source: source.to_string(),
            mode: Mode::default(),
            hook: HookSettings::default(),
            host: HostSettings::default(),
            rules: Vec::new(),
        };
        // An empty or comment-only file would be a policy of no rules, under which every guest
        // conforms: a `baseline --format toml > policy.toml` that failed leaves exactly that.
        if table.is_empty() {
            self.error(
                0..0,
                "version",
                "missing: the file is empty or only comments, which is no policy (write at least `version = 1`)",
            );
        }
        for (key, v) in self.entries(table, "", TOP_KEYS) {
            match key {
                "version" => self.version(v),
                "mode" => p.mode = self.value(v, "mode").unwrap_or_default(),
                "hook" => p.hook = self.hook(v),
                "host" => p.host = self.host(v),
                _ => p.rules = self.rules(v),
            }
        }
        if p.host.cluster.is_empty() {
            for span in std::mem::take(&mut self.baseline_models) {
                let msg = format!(
                    "\"{BASELINE_MODEL}\" is the CPU every host of `[host] cluster` can run, and this policy names no cluster: add `[host] cluster = [\"DIR or files\"]` with the hosts' facts files"
                );
                self.error(span, "rule.cpu.model", &msg);
            }
        }
        p
    }

    fn version(&mut self, v: &Value<'t>) {
        if let Some(n) = self.value::<i64>(v, "version") {
            if n != 1 {
                let msg =
                    format!("schema version {n} is not supported (this tool reads version 1)");
                self.error(v.span(), "version", &msg);
            }
        }
    }

    fn hook(&mut self, v: &Value<'t>) -> HookSettings {
        let mut h = HookSettings::default();
        for (key, v) in self.table(v, "hook", HOOK_KEYS) {
            let full = dotted("hook", key);
            match key {
                "on_violation" => {
                    h.on_violation = self.value::<OnViolation>(v, &full).unwrap_or_default();
                }
                _ => h.on_error = self.value::<OnError>(v, &full).unwrap_or_default(),
            }
        }
        h
    }

    fn host(&mut self, v: &Value<'t>) -> HostSettings {
        let mut h = HostSettings::default();
        for (key, v) in self.table(v, "host", HOST_KEYS) {
            let full = dotted("host", key);
            match key {
                "cpu_map" => h.cpu_map = self.path(v, &full),
                "capabilities" => h.capabilities = self.paths(v, &full),
                "publish" => h.publish = self.path(v, &full),
                "cluster" => h.cluster = self.paths(v, &full),
                _ => match self.value::<u32>(v, &full) {
                    Some(0) => self.error(v.span(), &full, "must be 1 or more"),
                    n => h.cpus = n,
                },
            }
        }
        h
    }

    /// A path that is not empty nor only white space: used as written, either would fail only
    /// when the file is opened, far from the policy line that caused it.
    fn path(&mut self, v: &Value<'t>, key: &str) -> Option<PathBuf> {
        let p = self.value::<PathBuf>(v, key)?;
        let written = p.to_string_lossy();
        if written.is_empty() {
            self.error(v.span(), key, "must not be empty: a path is needed");
            return None;
        }
        if written.trim().is_empty() {
            let msg =
                format!("must not be empty: `{written}` is only white space, and a path is needed");
            self.error(v.span(), key, &msg);
            return None;
        }
        Some(p)
    }

    /// A list of paths, none empty.
    fn paths(&mut self, v: &Value<'t>, key: &str) -> Vec<PathBuf> {
        let Some(list) = v.get_ref().as_array() else {
            self.value::<Vec<PathBuf>>(v, key);
            return Vec::new();
        };
        list.iter().filter_map(|p| self.path(p, key)).collect()
    }

    fn rules(&mut self, v: &Value<'t>) -> Vec<Rule> {
        let Some(list) = v.get_ref().as_array() else {
            let found = v.get_ref().type_str();
            let msg = format!("wrong type: expected an array of tables ([[rule]]), found {found}");
            self.error(v.span(), "rule", &msg);
            return Vec::new();
        };
        list.iter().filter_map(|r| self.rule(r)).collect()
    }

    /// One `[[rule]]`: every key read, every mistake recorded; None when any was wrong.
    fn rule(&mut self, v: &Value<'t>) -> Option<Rule> {
        let before = self.errors.len();
        let mut name = None;
        let mut named = false;
        let mut matches = Match::default();
        let mut cpu = CpuRule::default();
        let mut vcpu = VcpuRule::default();
        for (key, v) in self.table(v, "rule", RULE_KEYS) {
            match key {
                "name" => {
                    named = true;
                    name = self.rule_name(v);
                }
                "match" => matches = self.rule_match(v),
                "cpu" => cpu = self.rule_cpu(v),
                _ => vcpu = self.rule_vcpu(v),
            }
        }
        if !named {
            self.error(
                v.span(),
                "rule.name",
                "missing: every [[rule]] needs a name",
            );
        }
        self.check_rule(v, &cpu);
        (self.errors.len() == before).then(|| Rule {
            name: name.unwrap_or_default(),
            matches,
            cpu,
            vcpu,
        })
    }

    /// A rule's name: not empty, no control character (names go into journal fields and log
    /// lines, where a newline would forge a line), not a name the tool gives its own changes and
    /// decisions ([`reserved_rule_name`]), not the name of an earlier rule.
    fn rule_name(&mut self, v: &Value<'t>) -> Option<String> {
        let name = self.value::<String>(v, "rule.name")?;
        if let Some(c) = name.chars().find(|c| c.is_control()) {
            let msg = format!(
                "`{name}` contains the control character `{}`: rule names appear in journal fields and log lines",
                c.escape_debug()
            );
            self.error(v.span(), "rule.name", &msg);
            return None;
        }
        let name = name.trim().to_string();
        if name.is_empty() {
            self.error(v.span(), "rule.name", "must not be empty");
            return None;
        }
        if let Some(why) = reserved_rule_name(&name) {
            let msg = format!(
                "`{name}` is reserved: {why}; a rule of that name could not be told from the tool's own in explanations, JSON, logs and metrics"
            );
            self.error(v.span(), "rule.name", &msg);
            return None;
        }
        let (line, _) = line_col(self.text, v.span().start);
        if let Some(first) = self.rule_names.get(&name) {
            let msg = format!(
                "`{name}` is already the name of the [[rule]] on line {first}: every rule needs its own name"
            );
            self.error(v.span(), "rule.name", &msg);
            return None;
        }
        self.rule_names.insert(name.clone(), line);
        Some(name)
    }

    fn rule_match(&mut self, v: &Value<'t>) -> Match {
        let mut m = Match::default();
        for (key, v) in self.table(v, "rule.match", MATCH_KEYS) {
            let full = dotted("rule.match", key);
            let Some(pattern) = self.glob(v, &full) else {
                continue;
            };
            match key {
                "name" => m.name = Some(pattern),
                "arch" => m.arch = Some(pattern),
                "machine" => m.machine = Some(pattern),
                "os" => m.os = Some(pattern),
                _ => {
                    // Other domain types are never rewritten: a rule for them would silently
                    // never apply.
                    if pattern.matches("kvm") || pattern.matches("qemu") {
                        m.virt_type = Some(pattern);
                    } else {
                        let msg = format!(
                            "`{}` matches neither \"kvm\" nor \"qemu\", the only domain types the tool rewrites",
                            pattern.as_str()
                        );
                        self.error(v.span(), &full, &msg);
                    }
                }
            }
        }
        m
    }

    fn glob(&mut self, v: &Value<'t>, key: &str) -> Option<glob::Pattern> {
        let s = self.value::<String>(v, key)?;
        match glob::Pattern::new(&s) {
            Ok(p) => Some(p),
            Err(e) => {
                self.error(v.span(), key, &format!("not a valid shell glob: {e}"));
                None
            }
        }
    }

    fn rule_cpu(&mut self, v: &Value<'t>) -> CpuRule {
        let mut c = CpuRule::default();
        for (key, v) in self.table(v, "rule.cpu", CPU_KEYS) {
            let full = dotted("rule.cpu", key);
            match key {
                "mode" => c.mode = self.value::<CpuMode>(v, &full),
                "model" => {
                    c.model = self.model_name(v, &full);
                    if c.model.as_deref() == Some(BASELINE_MODEL) {
                        self.baseline_models.push(v.span());
                    }
                }
                "fallback" => c.fallback = self.value::<Fallback>(v, &full),
                "check" => c.check = self.value::<CpuCheck>(v, &full),
                "min_level" => {
                    let s = self.value::<String>(v, &full);
                    c.min_level = s.and_then(|s| match s.parse::<Level>() {
                        Ok(l) => Some(l),
                        Err(e) => {
                            self.error(v.span(), &full, &e);
                            None
                        }
                    });
                }
                "require" => c.require = self.features(v, &full),
                "os_floor" => c.os_floor = self.value::<bool>(v, &full),
                _ => c.disable = self.features(v, &full),
            }
        }
        c
    }

    fn model_name(&mut self, v: &Value<'t>, key: &str) -> Option<String> {
        let m = self.value::<String>(v, key)?;
        let ok = !m.is_empty()
            && m.chars()
                .all(|ch| ch.is_ascii_alphanumeric() || "-_.,".contains(ch));
        if !ok {
            self.error(
                v.span(),
                key,
                &format!("`{m}` is not a libvirt CPU model name"),
            );
            return None;
        }
        Some(m)
    }

    /// A list of feature names, normalised to libvirt's spelling, each once.
    fn features(&mut self, v: &Value<'t>, key: &str) -> Option<Vec<String>> {
        let Some(list) = v.get_ref().as_array() else {
            self.value::<Vec<String>>(v, key);
            return None;
        };
        let mut out: Vec<String> = Vec::new();
        for f in list {
            let Some(name) = self.value::<String>(f, key) else {
                continue;
            };
            match normalize_feature(&name) {
                Some(n) if !out.contains(&n) => out.push(n),
                Some(_) => {}
                None => self.error(
                    f.span(),
                    key,
                    &format!(
                        "`{name}` is not a CPU feature name (letters, digits, '.', '_' and '-' only)"
                    ),
                ),
            }
        }
        Some(out)
    }

    fn rule_vcpu(&mut self, v: &Value<'t>) -> VcpuRule {
        let mut r = VcpuRule::default();
        for (key, v) in self.table(v, "rule.vcpu", VCPU_KEYS) {
            let full = dotted("rule.vcpu", key);
            match key {
                "max" => r.max = self.vcpu_max(v, &full),
                "topology" => r.topology = self.value::<TopologyStrategy>(v, &full),
                _ => r.iommu = self.value::<IommuStrategy>(v, &full),
            }
        }
        r
    }

    fn vcpu_max(&mut self, v: &Value<'t>, key: &str) -> Option<VcpuMax> {
        let max = match v.get_ref() {
            // Not `self.value`: an integer out of i64's range would be a second error for the
            // one mistake reported below, and serde's message would not say the limit.
            DeValue::Integer(n) => match u32::from_str_radix(n.as_str(), n.radix()) {
                Ok(0) => None,
                Ok(n) => Some(VcpuMax::Count(n)),
                // `toml` checked the digits: only the sign or the size is wrong.
                Err(_) if n.as_str().starts_with('-') => None,
                Err(_) => {
                    let found = toml_display(self.text, v.span());
                    let msg = format!(
                        "{found} is too large: a vCPU maximum is at most {} (libvirt's <vcpu> is an unsigned 32-bit count); \"machine\" asks for the machine type's limit",
                        u32::MAX
                    );
                    self.error(v.span(), key, &msg);
                    return None;
                }
            },
            DeValue::String(s) if s == "host" => Some(VcpuMax::Host),
            DeValue::String(s) if s == "machine" => Some(VcpuMax::Machine),
            _ => None,
        };
        if max.is_none() {
            let found = toml_display(self.text, v.span());
            let msg =
                format!("expected a positive integer, \"host\" or \"machine\", found {found}");
            self.error(v.span(), key, &msg);
        }
        max
    }

    /// What a rule's keys say together: a model implies custom; no feature both required and
    /// disabled; no disabled feature the rule's level needs.
    fn check_rule(&mut self, v: &Value<'t>, c: &CpuRule) {
        let at = |key: &str| -> Range<usize> {
            lookup(v, &["cpu", key]).map_or_else(|| v.span(), Spanned::span)
        };
        if let (Some(mode), Some(_)) = (c.mode, &c.model) {
            if mode != CpuMode::Custom {
                let msg = format!(
                    "`cpu.model` implies mode \"custom\", but this rule sets \"{}\"",
                    mode.as_str()
                );
                self.error(at("mode"), "rule.cpu.mode", &msg);
            }
        }
        let disabled = c.disable.iter().flatten();
        for (i, f) in disabled.enumerate() {
            let span = lookup(v, &["cpu", "disable"])
                .and_then(|d| d.get_ref().as_array().and_then(|a| a.get(i)))
                .map_or_else(|| at("disable"), Spanned::span);
            if c.require.as_ref().is_some_and(|r| r.contains(f)) {
                let msg = format!("feature `{f}` is also in `cpu.require`");
                self.error(span.clone(), "rule.cpu.disable", &msg);
            }
            if let Some(level) = c.min_level.filter(|l| l.features().contains(&f.as_str())) {
                let msg = format!("feature `{f}` is part of `cpu.min_level` {level}");
                self.error(span, "rule.cpu.disable", &msg);
            }
        }
    }
}

/// `a.b` (or `b` at the top).
fn dotted(table: &str, key: &str) -> String {
    if table.is_empty() {
        key.to_string()
    } else {
        format!("{table}.{key}")
    }
}

/// The value at `path` inside the table `v`.
fn lookup<'v, 't>(v: &'v Value<'t>, path: &[&str]) -> Option<&'v Value<'t>> {
    path.iter()
        .try_fold(v, |v, key| v.get_ref().as_table()?.get(*key))
}

/// `s` with each control character escaped (`\n`, `\u{1b}`).
fn escape_controls(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_debug().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A value as written in the policy, for messages (`0`, `"lots"`).
fn toml_display(text: &str, span: Range<usize>) -> String {
    text.get(span).unwrap_or("").trim().to_string()
}

/// `toml`'s message for a syntax error, with the line and column up front and the dotted key it
/// concerns (the table header above it plus the key on its line).
pub(super) fn toml_message(text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim().to_string();
    let Some(span) = e.span() else {
        return msg;
    };
    let (line, col) = line_col(text, span.start);
    match key_at(text, span.start) {
        Some(key) => format!("line {line}, column {col}: key `{key}`: {msg}"),
        None => format!("line {line}, column {col}: {msg}"),
    }
}

/// Where the keys on one line stand at an offset: the inline tables still open (`a = { b = {`),
/// the key whose value has begun, and the text of the key being written.
fn line_keys(before: &str) -> (Vec<String>, Option<String>, String) {
    let mut open: Vec<String> = Vec::new();
    let mut pending: Option<String> = None;
    let mut key = String::new();
    let mut in_str: Option<char> = None;
    for ch in before.chars() {
        if let Some(q) = in_str {
            if ch == q {
                in_str = None;
            }
            continue;
        }
        match ch {
            '"' | '\'' if pending.is_some() => in_str = Some(ch),
            '=' => {
                pending = Some(key.trim().trim_matches('"').to_string());
                key.clear();
            }
            '{' => {
                if let Some(k) = pending.take() {
                    open.push(k);
                }
                key.clear();
            }
            '}' => {
                open.pop();
                pending = None;
                key.clear();
            }
            ',' => {
                pending = None;
                key.clear();
            }
            _ if pending.is_none() => key.push(ch),
            _ => {}
        }
    }
    (open, pending, key)
}

/// The dotted key whose key or value is at byte `offset`: the nearest `[table]`/`[[table]]`
/// header above, then the `a.b =` keys before `offset` on its line (inline tables included).
fn key_at(text: &str, offset: usize) -> Option<String> {
    let offset = offset.min(text.len());
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let (mut parts, pending, key) = line_keys(&text[line_start..offset]);
    match pending {
        Some(k) if !k.is_empty() => parts.push(k),
        _ => {
            // The offset is at a key (an unknown field): read it from the text.
            let name: String = text[offset..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || "_-.\"".contains(*c))
                .collect();
            let name = name.trim_matches('"');
            let prefix = key.trim();
            if !prefix.is_empty() && !prefix.starts_with('[') && !prefix.starts_with('#') {
                parts.push(prefix.trim_end_matches('.').to_string());
            }
            if !name.is_empty() {
                parts.push(name.to_string());
            }
        }
    }
    parts.retain(|p| !p.is_empty());
    let header = text[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|h| h.trim_matches(|c| c == '[' || c == ']').trim().to_string());
    if parts.is_empty() && header.is_none() {
        return None;
    }
    let mut key = header.unwrap_or_default();
    for p in parts {
        if !key.is_empty() {
            key.push('.');
        }
        key.push_str(&p);
    }
    Some(key)
}
