//! `virt-cpu-policy fleet` and `virt-cpu-policy facts --guests`: the glue from the command line
//! to [`crate::fleet`] and the exit codes.
//!
//! Exit codes, as the other commands': 0 every guest runs where the view asks (every pair of the
//! matrix, every guest of a drained host can leave, the new host runs every guest, every guest
//! runs on the upgraded host as it is, `--guest`: another host runs it); 1 some cannot (the report still on stdout, one line on
//! stderr); 2 bad usage or input (one line on stderr, nothing on stdout). `facts --guests`: 0
//! written; 2 a definition or status file could not be read (the others are written, each
//! unread file named on stderr) or the output could not be written.

use super::{EXIT_BAD_INPUT, EXIT_OK, EXIT_REFUSED, Failure, write_stdout};
use crate::fleet::format as fmt;
use crate::fleet::guest::{CONFIG_DIR, STATE_DIR, document, gather, published_name};
use crate::fleet::views::{admit, drain, tally, upgrade};
use crate::fleet::{CpuMaps, Fleet, FleetError};
use crate::policy::Policy;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// `fleet` options.
#[derive(Debug, Args)]
pub struct FleetArgs {
    /// Drain this host: for each of its guests the hosts it can go to; exit 1 when one cannot
    /// leave.
    #[arg(long, value_name = "HOST", conflicts_with_all = ["admit", "upgrade"])]
    pub drain: Option<String>,
    /// One guest (by name, or UUID) on every host: its verdict and reasons there, the CPU it
    /// would have and the psABI level that CPU reaches; exit 1 when no host but its own runs it.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["drain", "admit", "upgrade", "pairs"])]
    pub guest: Option<String>,
    /// Admit the host of this facts file: which guests it runs, whether it runs the cluster's
    /// CPU (the baseline of the fleet's hosts, the models the policy pins) and how the baseline
    /// changes with it; exit 1 when it cannot run a guest or the cluster's CPU.
    #[arg(long, value_name = "FACTS", conflicts_with = "upgrade")]
    pub admit: Option<PathBuf>,
    /// Upgrade this host: its guests judged with the facts of `--to`, each that cannot run
    /// there with the policy's rewrite; exit 1 when one cannot run there as it is.
    #[arg(long, value_name = "HOST", requires = "to")]
    pub upgrade: Option<String>,
    /// The facts of the upgraded host (its next generation's `<hostFacts>`).
    #[arg(long, value_name = "FACTS", requires = "upgrade")]
    pub to: Option<PathBuf>,
    /// Output: text for people, one JSON object, or Prometheus series (text format 0.0.4) for
    /// node_exporter's textfile collector.
    #[arg(long, value_enum, default_value = "text")]
    pub format: FleetFormat,
    /// Every guest × host pair, each with its reasons (text, and JSON of schema version 1),
    /// instead of the summary: per host its counts, per guest the hosts that run it and, per
    /// kind of host that cannot, the reasons once.
    #[arg(long, conflicts_with_all = ["drain", "admit", "upgrade"])]
    pub pairs: bool,
    /// The policy whose rewrite `--upgrade` proposes and whose pinned models `--admit` judges
    /// (default: /etc/virt-cpu-policy/policy.toml if it exists, else the built-in policy).
    /// Guests are judged as they are, never as the policy would make them.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// libvirt's cpu_map of the hosts (DIR), or of one host (HOST=DIR); repeatable. It decides
    /// which model and feature names a host's libvirt knows, and gives the CPUID data of the CPU
    /// comparison. Default: /usr/share/libvirt/cpu_map.
    #[arg(long, value_name = "[HOST=]DIR")]
    pub cpu_map: Vec<String>,
    /// Host facts (`<hostFacts>`, capabilities or domcapabilities: one file per host) and guest
    /// facts (`<guestFacts>`, a `<domain>`, a `<domstatus>`), or directories of such `*.xml`
    /// files.
    #[arg(value_name = "FACTS", required = true)]
    pub facts: Vec<PathBuf>,
}

/// The `--format` values of `fleet`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum FleetFormat {
    /// A report for people.
    Text,
    /// One JSON object (docs/json.md).
    Json,
    /// Prometheus text format 0.0.4 (docs/metrics.md).
    Prometheus,
    /// One self-contained HTML page (docs/fleet.md, "The page"): summary, host × host matrix,
    /// hosts with their drain, guests with search and filters, the upgrade when `--upgrade` is
    /// given.
    Html,
}

/// `facts` options.
#[derive(Debug, Args)]
pub struct FactsArgs {
    /// This host's guests' facts, from libvirt's files (never from libvirt): stored
    /// definitions, and the status files of running guests (their live CPU). Host facts come
    /// from libvirt: `virt-cpu-policyd publish` writes both.
    #[arg(long, required = true)]
    pub guests: bool,
    /// The host's name, as its published host facts name it (default: this machine's host
    /// name).
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
    /// libvirt's stored definitions.
    #[arg(long, value_name = "DIR", default_value = CONFIG_DIR)]
    pub config_dir: PathBuf,
    /// libvirt's status files of running guests.
    #[arg(long, value_name = "DIR", default_value = STATE_DIR)]
    pub state_dir: PathBuf,
    /// Write `DIR/HOST.guests.xml` (atomically, only when it changed) instead of stdout.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

impl From<FleetError> for Failure {
    fn from(e: FleetError) -> Self {
        Failure {
            code: EXIT_BAD_INPUT,
            message: Some(e.to_string()),
        }
    }
}

/// `--cpu-map` values as [`CpuMaps`].
fn cpu_maps(values: &[String]) -> Result<CpuMaps, Failure> {
    let mut maps = CpuMaps::default();
    for v in values {
        match v.split_once('=') {
            Some((host, dir)) if !host.is_empty() => {
                maps.by_host.push((host.to_string(), PathBuf::from(dir)));
            }
            _ if maps.default.is_some() => {
                return Err(Failure {
                    code: EXIT_BAD_INPUT,
                    message: Some(format!(
                        "--cpu-map {v}: a second cpu_map for every host; name the host (HOST=DIR)"
                    )),
                });
            }
            _ => maps.default = Some(PathBuf::from(v)),
        }
    }
    // Each as the operator wrote it (`HOST=DIR` with its host), so the one at fault is found.
    let given = maps
        .default
        .iter()
        .map(|d| (String::new(), d))
        .chain(maps.by_host.iter().map(|(h, d)| (format!("{h}="), d)));
    for (host, dir) in given {
        if !dir.join("index.xml").is_file() {
            return Err(Failure {
                code: EXIT_BAD_INPUT,
                message: Some(format!(
                    "--cpu-map {host}{}: not a libvirt cpu_map directory (no index.xml)",
                    dir.display()
                )),
            });
        }
    }
    Ok(maps)
}

/// Writes `text`; `cannot` (when not empty) said on stderr, exit 1; else when `not_compared`
/// pairs (or drained guests) were not compared, or the answer is incomplete (`gaps`: a facts
/// file not read, guests of a host not among the facts, a drained host whose guests are not
/// known), said on stderr, exit 4 (as `check`'s `not-compared`: neither runs nor cannot);
/// else exit 0.
fn finish(
    text: &str,
    cannot: &str,
    not_compared: usize,
    gaps: &crate::fleet::gaps::Gaps,
) -> Result<i32, Failure> {
    write_stdout(text.as_bytes())?;
    if !cannot.is_empty() {
        crate::stdio::message_line(&format!("virt-cpu-policy: {cannot}"));
        return Ok(EXIT_REFUSED);
    }
    let mut code = EXIT_OK;
    if not_compared > 0 {
        crate::stdio::message_line(&format!(
            "virt-cpu-policy: {not_compared} not compared: a fact the judgement needs is missing (each not-compared reason names it)"
        ));
        code = crate::verdict::EXIT_NOT_COMPARED;
    }
    if let Some(summary) = gaps.summary() {
        crate::stdio::message_line(&format!("virt-cpu-policy: {summary}"));
        code = crate::verdict::EXIT_NOT_COMPARED;
    }
    Ok(code)
}

/// What [`finish`] is told of an upgrade's answers (`list`, the upgraded host named `name`):
/// the sentence of the guests that cannot run there as they are (empty when none), and how
/// many were not compared.
fn upgrade_outcome(list: &[crate::fleet::views::Upgraded], name: &str) -> (String, usize) {
    let nc = list
        .iter()
        .filter(|u| crate::fleet::not_compared(&u.reasons))
        .count();
    let n = list.iter().filter(|u| !u.reasons.is_empty()).count() - nc;
    let cannot = if n == 0 {
        String::new()
    } else {
        format!("{n} guest(s) cannot run on {name} as they are")
    };
    (cannot, nc)
}

/// A JSON view with the fleet's `incomplete` object ([`crate::fleet::gaps::Gaps::json`]).
fn with_gaps(mut v: serde_json::Value, fleet: &Fleet) -> serde_json::Value {
    if let serde_json::Value::Object(m) = &mut v {
        m.insert("incomplete".into(), fleet.gaps.json());
    }
    v
}

fn json_text(v: &serde_json::Value) -> String {
    format!("{v:#}\n")
}

/// Runs `fleet`.
pub(super) fn cmd_fleet(a: &FleetArgs) -> Result<i32, Failure> {
    let one_part = [
        (a.pairs, "--pairs"),
        (a.drain.is_some(), "--drain"),
        (a.guest.is_some(), "--guest"),
        (a.admit.is_some(), "--admit"),
        (a.upgrade.is_some(), "--upgrade"),
    ];
    if let (Some((_, flag)), FleetFormat::Prometheus) =
        (one_part.iter().find(|(given, _)| *given), a.format)
    {
        return Err(Failure {
            code: EXIT_BAD_INPUT,
            message: Some(format!(
                "{flag} is for the text and JSON views; --format prometheus writes the whole fleet's counts"
            )),
        });
    }
    let policy = Policy::load(a.policy.as_deref())?;
    let maps = cpu_maps(&a.cpu_map)?;
    // Reading and judging 10,000 hosts take seconds: shown on a terminal, silent elsewhere.
    let progress = crate::progress::Progress::on_terminal();
    let mut fleet = Fleet::read_showing(&a.facts, policy, &maps, progress)?;
    if a.admit.is_none() && a.upgrade.is_none() {
        warn_unused_maps(&fleet);
    }
    if let FleetFormat::Prometheus = a.format {
        let t = tally(&fleet);
        let text = fmt::prometheus(&fleet, &t);
        return finish(
            &text,
            &cannot_pairs(t.cannot),
            t.not_compared_pairs,
            &fleet.gaps,
        );
    }
    if let FleetFormat::Html = a.format {
        return html_view(&mut fleet, a);
    }
    let json = matches!(a.format, FleetFormat::Json);
    if let Some(h) = &a.drain {
        return drain_view(&mut fleet, h, json);
    }
    if let Some(name) = &a.guest {
        return guest_view(&fleet, name, json);
    }
    if let Some(file) = &a.admit {
        return admit_view(&mut fleet, &maps, file, json);
    }
    if let (Some(h), Some(to)) = (&a.upgrade, &a.to) {
        let h = fleet.asked_about(h)?;
        let name = format!("{} (upgraded)", fleet.hosts[h].name);
        let to = fleet.add_host(to, Some(&name))?;
        warn_unused_maps(&fleet);
        let list = upgrade(&fleet, h, to, &fleet.policy);
        let text = if json {
            json_text(&with_gaps(fmt::upgrade_json(&fleet, h, to, &list), &fleet))
        } else {
            fmt::upgrade_text(&fleet, h, to, &list) + &fleet.gaps.text()
        };
        let (cannot, nc) = upgrade_outcome(&list, &name);
        return finish(&text, &cannot, nc, &fleet.gaps);
    }
    matrix(&fleet, json, a.pairs)
}

/// `fleet --format html`: the page of the fleet (with the upgrade's answers when `--upgrade`
/// is given), exit as the matrix's (or the upgrade's).
fn html_view(fleet: &mut Fleet, a: &FleetArgs) -> Result<i32, Failure> {
    use crate::fleet::page;
    if a.drain.is_some() || a.admit.is_some() || a.guest.is_some() || a.pairs {
        return Err(Failure {
            code: EXIT_BAD_INPUT,
            message: Some(
                "--format html is the whole fleet (every drain and guest in it); --drain, --admit, --guest and --pairs are for the text and JSON views".into(),
            ),
        });
    }
    // Every verdict and the CPU the page shows per class, from one parse of each guest shape.
    fleet.judge_cpus(&(0..fleet.class_count()).collect::<Vec<_>>());
    let t = tally(fleet);
    let mut inputs: Vec<String> = a.cpu_map.iter().map(|m| format!("--cpu-map {m}")).collect();
    inputs.extend(a.facts.iter().map(|f| f.display().to_string()));
    let mut data = page::data(fleet, &t, &page::Made::now(inputs));
    let (mut cannot, mut nc) = (cannot_pairs(t.cannot), t.not_compared_pairs);
    if let (Some(h), Some(to)) = (&a.upgrade, &a.to) {
        let h = fleet.asked_about(h)?;
        let name = format!("{} (upgraded)", fleet.hosts[h].name);
        let to = fleet.add_host(to, Some(&name))?;
        let list = upgrade(fleet, h, to, &fleet.policy);
        data["upgrade"] = fmt::upgrade_json(fleet, h, to, &list);
        data["upgrade"]["to_facts"] = fleet.hosts[to].path.display().to_string().into();
        data["upgrade"]["to_libvirt"] = fleet.hosts[to].libvirt.map(|v| v.to_string()).into();
        (cannot, nc) = upgrade_outcome(&list, &name);
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    page::write(&data, &mut out)
        .and_then(|()| std::io::Write::flush(&mut out))
        .map_err(|e| Failure {
            code: EXIT_BAD_INPUT,
            message: Some(format!("cannot write to standard output: {e}")),
        })?;
    finish("", &cannot, nc, &fleet.gaps)
}

/// `fleet --drain HOST`: where each guest of HOST can go, the exit as [`finish`] gives it.
fn drain_view(fleet: &mut Fleet, host: &str, json: bool) -> Result<i32, Failure> {
    let h = fleet.asked_about(host)?;
    let leaving = drain(fleet, h);
    let text = if json {
        json_text(&with_gaps(fmt::drain_json(fleet, h, &leaving), fleet))
    } else {
        fmt::drain_text(fleet, h, &leaving) + &fleet.gaps.text()
    };
    let stuck: Vec<&str> = leaving
        .iter()
        .filter(|l| l.stuck())
        .map(|l| fleet.guests[l.guest].facts.name.as_str())
        .collect();
    let cannot = if stuck.is_empty() {
        String::new()
    } else {
        format!(
            "{} guest(s) cannot leave {}: {}",
            stuck.len(),
            fleet.hosts[h].name,
            stuck.join(", ")
        )
    };
    let unknown = leaving.iter().filter(|l| l.unknown()).count();
    finish(&text, &cannot, unknown, &fleet.gaps)
}

/// `fleet --guest NAME`: the guest (each guest of that name) on every host. Exit 1 when no
/// host other than its own runs it (it can go nowhere), 4 when none does for sure and some were
/// not compared, as [`finish`].
fn guest_view(fleet: &Fleet, name: &str, json: bool) -> Result<i32, Failure> {
    use crate::fleet::guest_view::{answers, find};
    let found = match find(fleet, name) {
        Ok(found) => found,
        // Not among the guests read, but some facts were not read: not known, not "no such
        // guest" (exit 4, the incomplete answer, with what was not read).
        Err(e) if fleet.gaps.summary().is_some() => {
            crate::stdio::message_line(&format!(
                "virt-cpu-policy: {e}, but the answer is incomplete: the guest may be in what was not read"
            ));
            let report = if json {
                let v = serde_json::json!({
                    "schema_version": crate::verdict::JSON_SCHEMA_VERSION,
                    "guests": [],
                });
                json_text(&with_gaps(v, fleet))
            } else {
                fleet.gaps.text()
            };
            return finish(&report, "", 0, &fleet.gaps);
        }
        Err(e) => return Err(e.into()),
    };
    let mut text = String::new();
    let mut values = Vec::new();
    let (mut nowhere, mut unknown) = (Vec::new(), 0);
    for g in found {
        let list = answers(fleet, g);
        let elsewhere = |w: &&crate::fleet::guest_view::Where| fleet.source(g) != Some(w.host);
        let others: Vec<_> = list.iter().filter(elsewhere).collect();
        let runs = others.iter().filter(|w| w.reasons.is_empty()).count();
        let nc = others
            .iter()
            .filter(|w| crate::fleet::not_compared(&w.reasons))
            .count();
        if runs == 0 && nc > 0 {
            unknown += 1;
        } else if runs == 0 && !others.is_empty() {
            let guest = &fleet.guests[g].facts;
            let on = guest.host.as_deref().unwrap_or("a host not named");
            nowhere.push(format!("{} (on {on})", guest.name));
        }
        if json {
            values.push(crate::fleet::guest_view::json(fleet, g, &list));
        } else {
            text += &crate::fleet::guest_view::text(fleet, g, &list);
        }
    }
    let text = if json {
        let v = serde_json::json!({
            "schema_version": crate::verdict::JSON_SCHEMA_VERSION,
            "guests": values,
        });
        json_text(&with_gaps(v, fleet))
    } else {
        text + &fleet.gaps.text()
    };
    let cannot = if nowhere.is_empty() {
        String::new()
    } else {
        format!("no other host runs {}", nowhere.join(", "))
    };
    finish(&text, &cannot, unknown, &fleet.gaps)
}

/// `fleet --admit FILE`: the new host's answers, the exit as [`finish`] gives it.
fn admit_view(
    fleet: &mut Fleet,
    maps: &CpuMaps,
    file: &std::path::Path,
    json: bool,
) -> Result<i32, Failure> {
    let new = fleet.add_host(file, None)?;
    warn_unused_maps(fleet);
    let cluster_map = maps.for_host(&fleet.hosts[new].name);
    let adm = admit(fleet, new, cluster_map.as_deref());
    let text = if json {
        json_text(&with_gaps(fmt::admit_json(fleet, &adm), fleet))
    } else {
        fmt::admit_text(fleet, &adm) + &fleet.gaps.text()
    };
    let nc_guests = adm.pairs.iter().filter(|p| p.not_compared()).count();
    let guests = adm.pairs.iter().filter(|p| !p.runs()).count() - nc_guests;
    let nc_models = adm
        .models
        .iter()
        .filter(|m| crate::fleet::not_compared(&m.reasons))
        .count();
    let models = adm.models.iter().filter(|m| !m.reasons.is_empty()).count() - nc_models;
    let nc = nc_guests + nc_models;
    let name = &fleet.hosts[new].name;
    let mut cannot = if guests + models == 0 {
        String::new()
    } else {
        format!("host {name} cannot run {guests} guest(s) and {models} of the cluster's CPU(s)")
    };
    // A cluster CPU that cannot be computed with the new host is no "runs the cluster's
    // CPU": exit 1, as a CPU it cannot run.
    if let Some(e) = adm.cluster.unknown() {
        let sep = if cannot.is_empty() { "" } else { "; " };
        cannot = format!("{cannot}{sep}the cluster's CPU with host {name} cannot be computed: {e}");
    }
    finish(&text, &cannot, nc, &fleet.gaps)
}

/// The matrix view: summarised, or every pair (`--pairs`), written as it is made.
fn matrix(fleet: &Fleet, json: bool, pairs: bool) -> Result<i32, Failure> {
    let t = tally(fleet);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = match (json, pairs) {
        (true, true) => fmt::matrix_json_to(fleet, &mut out),
        (true, false) => fmt::summary_json(fleet, &t, &mut out),
        (false, true) => fmt::matrix_text_to(fleet, &t, &mut out),
        (false, false) => fmt::summary_text(fleet, &t, &mut out),
    };
    let gaps = if json {
        String::new()
    } else {
        fleet.gaps.text()
    };
    written
        .and_then(|()| std::io::Write::write_all(&mut out, gaps.as_bytes()))
        .and_then(|()| std::io::Write::flush(&mut out))
        .map_err(|e| Failure {
            code: EXIT_BAD_INPUT,
            message: Some(format!("cannot write to standard output: {e}")),
        })?;
    finish(
        "",
        &cannot_pairs(t.cannot),
        t.not_compared_pairs,
        &fleet.gaps,
    )
}

/// A warning per `--cpu-map HOST=DIR` whose HOST no facts file named (a typo judges that host
/// with another cpu_map).
fn warn_unused_maps(fleet: &Fleet) {
    for h in fleet.unused_cpu_map_hosts() {
        crate::stdio::message_line(&format!(
            "virt-cpu-policy: warning: --cpu-map {h}=...: no host named '{h}' among the facts given; its cpu_map is not used"
        ));
    }
}

fn cannot_pairs(n: usize) -> String {
    if n == 0 {
        String::new()
    } else {
        format!("{n} guest × host pair(s) cannot run")
    }
}

/// Runs `facts --guests`.
pub(super) fn cmd_facts(a: &FactsArgs) -> Result<i32, Failure> {
    let host = a
        .host
        .clone()
        .or_else(crate::fleet::guest::this_host_name)
        .unwrap_or_else(|| "localhost".into());
    let (guests, unread) = gather(&a.config_dir, &a.state_dir, &host);
    let doc = document(&host, &guests);
    match &a.out {
        Some(dir) => {
            let path = dir.join(published_name(&host));
            crate::writefile::write_if_changed(&path, doc.as_bytes()).map_err(|source| {
                Failure {
                    code: EXIT_BAD_INPUT,
                    message: Some(format!("cannot write {}: {source}", path.display())),
                }
            })?;
        }
        None => write_stdout(doc.as_bytes())?,
    }
    for u in &unread {
        crate::stdio::message_line(&format!(
            "virt-cpu-policy: {}: not read: {}",
            u.path.display(),
            u.message
        ));
    }
    Ok(if unread.is_empty() {
        EXIT_OK
    } else {
        EXIT_BAD_INPUT
    })
}
