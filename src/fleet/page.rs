//! `fleet --format html`: the fleet as one self-contained page — a summary, a host × host matrix
//! of the guests of one host that run on the other, the hosts with their drain answers, a guest
//! table with search and filters and, per guest, every host with its verdict, reasons, the CPU
//! it would have there and its level; what an upgrade breaks when `--upgrade` is given.
//!
//! The page is one HTML file with its style and script inline and its data as one JSON object
//! (`<script type="application/json">`): no network, no external script, font or image (its
//! Content-Security-Policy forbids them), so it opens from a file on a laptop offline. The data
//! is counted by host class, as [`super::views::tally`] counts (a class's hosts have the same
//! facts): a guest carries one verdict, one list of reasons and one CPU per class, and the page
//! spreads them over the class's hosts, which keeps a page of 1,000 hosts × 10,000 guests to a
//! few megabytes. Every figure it shows is the JSON views' (`tests/html/run` checks them in a
//! headless Chromium against `fleet --format json` and `--pairs` of the same inputs).

use super::guest_view::{CpuThere, cpu_there};
use super::views::{Tally, class_members};
use super::{Fleet, Reason};
use crate::domain::Domain;
use crate::guest_os::GuestOs;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::Write;

/// The page's shell: its style, its script and the marker the data replaces.
const TEMPLATE: &str = include_str!("page/page.html");
const STYLE: &str = include_str!("page/page.css");
const SCRIPT: &str = include_str!("page/page.js");

/// What the page says it was made from: the command's inputs, and when.
#[derive(Debug, Clone)]
pub struct Made {
    /// When, as RFC 3339 UTC (`SOURCE_DATE_EPOCH` when set, for a reproducible page).
    pub at: String,
    /// The facts files and directories given, and each `--cpu-map`, as given.
    pub inputs: Vec<String>,
}

impl Made {
    /// `inputs` made now (or at `SOURCE_DATE_EPOCH`, the reproducible-builds convention).
    #[must_use]
    pub fn now(inputs: Vec<String>) -> Made {
        let secs = std::env::var("SOURCE_DATE_EPOCH")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs())
            });
        Made {
            at: rfc3339(secs),
            inputs,
        }
    }
}

/// Seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (the proleptic Gregorian calendar,
/// Howard Hinnant's `civil_from_days`).
fn rfc3339(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Strings kept once, each referred to by its index.
#[derive(Default)]
struct Table {
    list: Vec<Value>,
    index: HashMap<String, usize>,
}

impl Table {
    fn id(&mut self, key: String, value: impl FnOnce() -> Value) -> usize {
        let next = self.list.len();
        *self.index.entry(key).or_insert_with(|| {
            self.list.push(value());
            next
        })
    }
}

/// The verdict letter of a pair: `r` runs, `n` not compared, `c` cannot.
fn letter(runs: bool, not_compared: bool) -> char {
    if runs {
        'r'
    } else if not_compared {
        'n'
    } else {
        'c'
    }
}

/// The page's data (see the module docs): `{"made", "hosts": [{"name", "libvirt", "qemu", "kind",
/// "level", "facts", "guests_known"}], "kinds": [[HOST]], "pairs": {"runs", "cannot",
/// "not_compared"}, "reasons": [[CODE, MESSAGE]], "cpus": [[MODE, MODEL, LEVEL, BASIS]],
/// "guests": [{"n", "h", "hn", "s", "os", "v", "o", "w", "r", "c"}], "incomplete", "upgrade"}`
/// (`incomplete` as the JSON views'): per guest `h` its host's index (null when its host has no
/// facts), `hn` the host its facts name, `v` one verdict letter per class, `o` the letter at its
/// own host and `w` the indexes of its reasons there, `r` per class the indexes of its reasons
/// (of a host of the class other than its own), `c` per class the index of its CPU.
#[must_use]
pub fn data(fleet: &Fleet, t: &Tally, made: &Made) -> Value {
    let members = class_members(fleet);
    let levels: Vec<Option<&'static str>> = members
        .iter()
        .map(|m| m.first().and_then(|h| fleet.host_level(*h)))
        .collect();
    let hosts: Vec<Value> = (0..fleet.hosts.len())
        .map(|h| {
            let host = &fleet.hosts[h];
            json!({
                "name": host.name,
                "libvirt": host.libvirt.map(|v| v.to_string()),
                "qemu": host.qemu.map(|v| v.to_string()),
                "kind": fleet.class_of(h),
                "level": levels[fleet.class_of(h)],
                "facts": host.path.display().to_string(),
                "guests_known": fleet.guests_known(h),
            })
        })
        .collect();
    let (mut reasons, mut cpus) = (Table::default(), Table::default());
    let guests = guests_data(fleet, &members, &mut reasons, &mut cpus);
    let total = fleet.guests.len() * fleet.hosts.len();
    json!({
        "made": {"at": made.at, "inputs": made.inputs, "tool": concat!("virt-cpu-policy ", env!("CARGO_PKG_VERSION"))},
        "hosts": hosts,
        "kinds": members,
        "pairs": {"runs": total - t.cannot - t.not_compared_pairs, "cannot": t.cannot, "not_compared": t.not_compared_pairs},
        "reasons": reasons.list,
        "cpus": cpus.list,
        "guests": guests,
        "incomplete": fleet.gaps.json(),
        "upgrade": null,
    })
}

/// The page's `guests` ([`data`]), their reasons and CPUs kept once in `reasons` and `cpus`.
fn guests_data(
    fleet: &Fleet,
    members: &[Vec<usize>],
    reasons: &mut Table,
    cpus: &mut Table,
) -> Vec<Value> {
    let mut cpu_of: HashMap<(usize, usize), usize> = HashMap::new();
    (0..fleet.guests.len())
        .map(|g| {
            let guest = &fleet.guests[g];
            let src = fleet.source(g);
            let verdicts: String = (0..members.len())
                .map(|c| letter(fleet.runs_in(g, c), fleet.not_compared_in(g, c)))
                .collect();
            let own = src.map(|h| letter(fleet.runs(g, h), fleet.not_compared(g, h)).to_string());
            let why: Vec<Vec<usize>> = members
                .iter()
                .enumerate()
                .map(|(c, m)| {
                    // The reasons of a host of the class other than the guest's own.
                    let Some(h) = m.iter().copied().find(|h| Some(*h) != src) else {
                        return Vec::new();
                    };
                    if verdicts.as_bytes()[c] == b'r' {
                        return Vec::new();
                    }
                    host_reasons(fleet, g, h, reasons)
                })
                .collect();
            let own_why = src
                .filter(|_| own.as_deref() != Some("r"))
                .map(|h| host_reasons(fleet, g, h, reasons));
            let cpu: Vec<usize> = members
                .iter()
                .enumerate()
                .map(|(c, m)| {
                    *cpu_of.entry((guest.shape, c)).or_insert_with(|| {
                        let there = cpu_there(fleet, g, m[0]);
                        cpu_id(cpus, &there)
                    })
                })
                .collect();
            json!({
                "n": guest.facts.name,
                "h": src,
                "hn": guest.facts.host,
                "w": own_why,
                "s": guest.facts.state.as_str(),
                "os": os_of(&guest.facts.domain),
                "v": verdicts,
                "o": own,
                "r": why,
                "c": cpu,
            })
        })
        .collect()
}

/// The indexes of the reasons guest `g` has on host `h`, each in words that fit every host of
/// `h`'s class: `h`'s facts file and (in a `passthrough-group` reason) its name are written as
/// [`FACTS`] and [`HOST`], which the page puts back for each host.
fn host_reasons(fleet: &Fleet, g: usize, h: usize, table: &mut Table) -> Vec<usize> {
    let path = fleet.hosts[h].path.display().to_string();
    // The group reason as kept, the destination's name still its marker.
    let source = fleet.guests[g].facts.host.clone().unwrap_or_default();
    let group = fleet.group(g, h, |r| {
        r.message
            .replace(super::SOURCE, &source)
            .replace(super::DEST, HOST)
    });
    fleet
        .reasons(g, h)
        .iter()
        .map(|r| {
            let message = match (&group, r.code) {
                (Some(m), crate::finding::Code::PassthroughGroup) => m.clone(),
                _ => r.message.replace(&path, FACTS),
            };
            reason_id(
                table,
                &Reason {
                    code: r.code,
                    message,
                },
            )
        })
        .collect()
}

/// Stands for a host's facts file in a reason of the page's data (the page puts it back).
const FACTS: &str = "\u{1}facts\u{1}";

/// Stands for a host's name likewise.
const HOST: &str = "\u{1}host\u{1}";

fn reason_id(table: &mut Table, r: &Reason) -> usize {
    let key = format!("{}\u{0}{}", r.code.as_str(), r.message);
    table.id(key, || json!([r.code.as_str(), r.message]))
}

fn cpu_id(table: &mut Table, c: &CpuThere) -> usize {
    let v = json!([
        c.mode.map(crate::libvirt::cpu_def::CpuMode::as_str),
        c.model,
        c.level.level.map(crate::cpu::Level::as_str),
        c.level.basis,
    ]);
    table.id(v.to_string(), || v)
}

/// The guest's OS as its facts name it ([`GuestOs::short`]), when they do.
fn os_of(domain: &str) -> Option<String> {
    let dom = Domain::parse(domain, "guest facts").ok()?;
    GuestOs::of(dom.root()).map(|os| os.short())
}

/// Writes the page of `data` ([`data`], its `upgrade` set to what `fleet --upgrade --format
/// json` says when that was asked).
///
/// # Errors
/// The writer's.
pub fn write(data: &Value, out: &mut dyn Write) -> std::io::Result<()> {
    // Inside <script> only "</" could end the element early: JSON's "\u003c" is the same
    // string to JSON.parse.
    let data = data.to_string().replace('<', "\\u003c");
    let page = TEMPLATE
        .replacen("/*STYLE*/", STYLE, 1)
        .replacen("/*SCRIPT*/", SCRIPT, 1);
    // The template has the marker (a unit test says so).
    let (head, tail) = page.split_once("/*DATA*/").unwrap_or((&page, ""));
    out.write_all(head.as_bytes())?;
    out.write_all(data.as_bytes())?;
    out.write_all(tail.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_has_each_marker_once() {
        for marker in ["/*STYLE*/", "/*SCRIPT*/", "/*DATA*/"] {
            assert_eq!(TEMPLATE.matches(marker).count(), 1, "{marker}");
        }
        for part in [STYLE, SCRIPT] {
            assert!(!part.contains("/*DATA*/") && !part.contains("</script"));
        }
    }

    #[test]
    fn dates_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_670_245), "2026-12-07T19:04:05Z");
    }
}
