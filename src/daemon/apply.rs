//! Applying the policy to one guest's stored definition: judged as `check` judges it, rewritten,
//! the old definition backed up (mode 0600: it holds secrets), the new one defined; and
//! `virt-cpu-policyd apply`, which does that for the guests named.

use super::cli::{ApplyArgs, Cli};
use super::session::{connect, libvirt_version, stored_xml};
use super::snapshot::{publish_dir, write_snapshot};
use crate::host::{Host, HostOptions, Sourced};
use crate::libvirt::version::LibvirtVersion;
use crate::metrics::FailureReason;
use crate::policy::Policy;
use crate::rewrite::rewrite;
use crate::verdict::Verdict;
use crate::writefile::safe_file_name;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use virt::connect::Connect;
use virt::domain::Domain as VirDomain;

/// What happened to one guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// Already conforming.
    Unchanged,
    /// Rewritten (or, under `--dry-run`, would be); `running`: the change applies at its next cold
    /// boot.
    Changed {
        /// Whether the guest is running.
        running: bool,
        /// The backup of the old definition (None under `--dry-run`).
        backup: Option<PathBuf>,
        /// Unified diff of old and new definition.
        diff: String,
    },
    /// Cannot be made to conform, or libvirt refused the new definition.
    Refused(String),
    /// The definition comes back as it was after each rewrite: the daemon replaced this very
    /// content [`COMES_BACK`] times within [`COMES_BACK_WITHIN`] (libvirt does not keep the
    /// rewrite, or another client restores its own definition after each). Left alone until
    /// its content changes ([`Applied::stored`] is that content's hash), and judged again at the
    /// next full reconciliation.
    NotKept,
    /// A transient guest: it has no stored definition; left alone.
    Transient,
    /// Undefined by another client while the step judged it: nothing defined, nothing backed up.
    Undefined,
    /// Another client was defining the guest when the step was about to define (a DEFINED
    /// event of it not yet judged): nothing defined, nothing backed up;
    /// the guest is judged once its definitions are quiet. Only the daemon, which sees the
    /// events, reports it.
    Busy,
}

/// What one guest's step found: the [`Report`], and for the metrics and the journal the stored
/// definition's verdict as `check` gives it, the rules involved and why it failed, if it did.
#[derive(Debug, Clone)]
pub struct Applied {
    /// What happened.
    pub report: Report,
    /// The verdict on the definition as read; None when it was not judged (transient, or it
    /// could not be read or parsed).
    pub verdict: Option<Verdict>,
    /// The rules involved ([`crate::audit::rules_involved`]; none for a conforming guest).
    pub rules: Vec<String>,
    /// The first error finding's code, or the error's ([`crate::Error::code`]).
    pub code: Option<&'static str>,
    /// Why the guest could not be made to conform;
    /// None when it conforms now, or merely would change (dry run, audit mode).
    pub failure: Option<FailureReason>,
    /// A hash of the stored definition last read (`DefaultHasher`): after a
    /// [`Report::NotKept`], what libvirt keeps in place of the rewrite.
    pub stored: Option<u64>,
    /// For a definition rewritten: the time from the last read of the stored definition (which
    /// found it as judged) to the return of the define, the window in which another client's
    /// define would be overwritten (libvirt has no compare-and-set).
    pub window: Option<Duration>,
}

impl Applied {
    /// A guest that was not judged: transient, or its definition could not be read or parsed.
    fn unjudged(
        report: Report,
        code: Option<&'static str>,
        failure: Option<FailureReason>,
    ) -> Applied {
        Applied {
            report,
            verdict: None,
            rules: Vec::new(),
            code,
            failure,
            stored: None,
            window: None,
        }
    }

    /// The report of a stored definition `xml` that libvirt keeps in place of the rewrite.
    fn not_kept(xml: &str) -> Applied {
        Applied {
            report: Report::NotKept,
            verdict: Some(Verdict::NeedsRewrite),
            rules: Vec::new(),
            code: Some("libvirt"),
            failure: Some(FailureReason::Define),
            stored: Some(stored_hash(xml)),
            window: None,
        }
    }

    /// The verdict of the stored definition *after* this step: a rewritten one conforms.
    #[must_use]
    pub fn verdict_after(&self) -> Option<Verdict> {
        match self.report {
            Report::Changed {
                backup: Some(_), ..
            } => Some(Verdict::Conforms),
            _ => self.verdict,
        }
    }
}

/// Rewrite one guest's stored definition.
pub fn apply_one(
    conn: &Connect,
    dom: &VirDomain,
    policy: &Policy,
    host: &Host,
    backup_dir: &Path,
    dry_run: bool,
) -> Report {
    let mut replaced = Replaced::default();
    apply_judged(
        conn,
        dom,
        policy,
        host,
        backup_dir,
        dry_run,
        &mut replaced,
        &TestHold,
    )
    .report
}

/// How many times the daemon replaces one content of a guest's definition within
/// [`COMES_BACK_WITHIN`] before it leaves that content alone ([`Report::NotKept`]).
pub const COMES_BACK: usize = 3;

/// The window of [`COMES_BACK`]: a fight (libvirt dropping the rewrite, a client restoring its
/// XML on each rewrite) brings the content back within a second; an orchestrator that
/// redefines its XML now and then (Nova's hard reboots) does not, and each of its defines is
/// rewritten.
pub const COMES_BACK_WITHIN: Duration = Duration::from_secs(10);

/// The contents of one guest's definition the daemon replaced, each a hash with the time: what
/// tells a definition that keeps coming back as it was (a fight) from new definitions, however
/// many come (an orchestrator that defines often).
#[derive(Debug, Default, Clone)]
pub struct Replaced {
    /// The contents defined over, with when.
    defined: Vec<(u64, Instant)>,
    /// The content left alone ([`Report::NotKept`]) until another is stored.
    left_alone: Option<u64>,
}

impl Replaced {
    /// How often content `hash` was defined over within [`COMES_BACK_WITHIN`].
    fn times(&mut self, hash: u64) -> usize {
        self.defined
            .retain(|(_, t)| t.elapsed() < COMES_BACK_WITHIN);
        self.defined.iter().filter(|(h, _)| *h == hash).count()
    }

    /// Whether content `hash` is the one left alone; another content ends it.
    fn leaves_alone(&mut self, hash: u64) -> bool {
        if self.left_alone.is_some_and(|h| h != hash) {
            self.left_alone = None;
        }
        self.left_alone == Some(hash)
    }
}

/// [`apply_one`], with what the metrics and the journal need ([`Applied`]); `replaced` is the
/// guest's history of replaced contents, kept across steps by the daemon (a fresh one for
/// `apply`); `between` marks the places another client's define can land (the daemon's tells it
/// when a guest is being defined, [`Between::defining`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn apply_judged(
    conn: &Connect,
    dom: &VirDomain,
    policy: &Policy,
    host: &Host,
    backup_dir: &Path,
    dry_run: bool,
    replaced: &mut Replaced,
    between: &dyn Between,
) -> Applied {
    let step = Step {
        conn,
        dom,
        policy,
        host,
        backup_dir,
        dry_run,
    };
    step.run(replaced, between)
}

/// How many definitions of one guest one step judges when other clients define it meanwhile;
/// after that the step gives up, and the guest's next DEFINED event brings it back.
const ATTEMPTS: usize = 5;

/// The places another client's define can land in a step, for tests: between the read that is
/// judged and the read that is compared right before the define, and right after the define.
pub(super) trait Between {
    /// After the definition was read, judged and backed up, before it is read again.
    fn before_define(&self, _name: &str) {}
    /// After the rewrite was defined, before it is read back.
    fn after_define(&self, _name: &str) {}
    /// Right before the define, the stored definition just read again and found as judged:
    /// whether another client is defining the guest (the daemon: a DEFINED event of it not yet
    /// judged). Then nothing is defined ([`Report::Busy`]): libvirt has no compare-and-set, and
    /// a define landing between that read and this one's would be replaced unread.
    fn defining(&self, _name: &str) -> bool {
        false
    }
}

/// The daemon's [`Between`] wraps the test hold.
pub(super) fn test_hold(name: &str) {
    TestHold.before_define(name);
}

/// `VIRT_CPU_POLICYD_TEST_HOLD_MS=N`: hold N ms before the read right before the define, logged
/// (`test hold`), so that an end-to-end test can land a define in that window
/// (`tests/e2e/daemon`). For tests only; unset, nothing waits.
struct TestHold;

impl Between for TestHold {
    fn before_define(&self, name: &str) {
        let Some(ms) = std::env::var("VIRT_CPU_POLICYD_TEST_HOLD_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
        else {
            return;
        };
        tracing::info!(guest = %name, "{name}: test hold, {ms} ms before the definition is read again (VIRT_CPU_POLICYD_TEST_HOLD_MS)");
        std::thread::sleep(Duration::from_millis(ms));
    }
}

/// The hash of a stored definition, to know it again (not kept across runs).
#[must_use]
pub(super) fn stored_hash(xml: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    xml.hash(&mut h);
    h.finish()
}

/// One guest's step: what [`apply_judged`] is given.
struct Step<'a> {
    conn: &'a Connect,
    dom: &'a VirDomain,
    policy: &'a Policy,
    host: &'a Host,
    backup_dir: &'a Path,
    dry_run: bool,
}

/// A definition judged ([`Step::judge`]).
enum Judged {
    /// The step ends with this report: unreadable, cannot conform, or audit mode.
    Ends(Applied),
    /// It conforms.
    Conforms(Applied),
    /// It needs this rewrite.
    Rewrite(Applied, String),
}

/// A rewrite defined: its report, and the definition read back right after.
struct Defined {
    report: Report,
    window: Duration,
    read_back: String,
}

impl Step<'_> {
    /// Judge the stored definition and define its rewrite, never over a definition this step
    /// did not judge: when another client defined the guest since it was read, that definition
    /// is judged instead; when the definition read back after the define needs a rewrite
    /// (another client's define right after, or libvirt's own of the rewrite), it is judged in
    /// turn; a content replaced [`COMES_BACK`] times already is left alone
    /// ([`Report::NotKept`]).
    fn run(&self, replaced: &mut Replaced, between: &dyn Between) -> Applied {
        let (name, mut xml) = match stored_definition(self.dom) {
            Ok(d) => d,
            Err(unjudged) => return *unjudged,
        };
        let mut judged = self.judge(&name, &xml);
        // The last rewrite this step defined, should a newer definition then conform.
        let mut last: Option<(Report, Duration)> = None;
        for _ in 0..ATTEMPTS {
            let (mut applied, new) = match judged {
                Judged::Ends(applied) => return applied,
                Judged::Conforms(mut applied) => {
                    // A newer definition, defined by another client after this step's own.
                    if let Some((report, window)) = last {
                        applied.report = report;
                        applied.window = Some(window);
                        applied.verdict = Some(Verdict::NeedsRewrite);
                    }
                    return applied;
                }
                Judged::Rewrite(applied, new) => (applied, new),
            };
            let hash = stored_hash(&xml);
            if replaced.leaves_alone(hash) || replaced.times(hash) >= COMES_BACK {
                replaced.left_alone = Some(hash);
                return Applied::not_kept(&xml);
            }
            match self.define(&name, &xml, &new, between) {
                Ok(Ok(d)) => {
                    replaced.defined.push((hash, Instant::now()));
                    judged = self.judge(&name, &d.read_back);
                    if !matches!(judged, Judged::Rewrite(..)) {
                        applied.report = d.report;
                        applied.window = Some(d.window);
                        return applied;
                    }
                    // Another client defined the guest right after this step, or libvirt did
                    // not keep the rewrite: what is stored is judged (above, once).
                    last = Some((d.report, d.window));
                    xml = d.read_back;
                }
                // Another client defined the guest since it was read: judge that instead.
                Ok(Err(now)) => {
                    judged = self.judge(&name, &now);
                    xml = now;
                }
                Err((report, failure)) => {
                    match (report, last) {
                        // This step's own define stands; the next one waits.
                        (Report::Busy, Some((report, window))) => {
                            applied.report = report;
                            applied.window = Some(window);
                        }
                        (report, _) => {
                            applied.report = report;
                            applied.failure = failure;
                        }
                    }
                    return applied;
                }
            }
        }
        Applied {
            report: Report::Refused(format!(
                "defined by another client {ATTEMPTS} times while being rewritten, nothing defined; judged again once its defines pause"
            )),
            verdict: Some(Verdict::NeedsRewrite),
            rules: Vec::new(),
            code: Some("libvirt"),
            failure: Some(FailureReason::Define),
            stored: Some(stored_hash(&xml)),
            window: None,
        }
    }

    /// Definition `xml` judged as `check` judges it: what the step reports when it ends here
    /// (unreadable, cannot conform, audit mode), conforms, or the rewrite to define.
    fn judge(&self, name: &str, xml: &str) -> Judged {
        let what = format!("the definition of '{name}'");
        let outcome = match rewrite(xml, &what, self.policy, self.host) {
            Ok(o) => o,
            Err(e) => {
                return Judged::Ends(Applied::unjudged(
                    Report::Refused(e.to_string()),
                    Some(e.code()),
                    Some(FailureReason::Unreadable),
                ));
            }
        };
        let error = outcome
            .findings
            .iter()
            .find(|f| f.severity == crate::finding::Severity::Error);
        let mut applied = Applied {
            report: Report::Unchanged,
            verdict: Some(Verdict::of(&outcome)),
            rules: crate::audit::rules_involved(&outcome, &crate::policy::Plan::default()),
            code: error.map(|f| f.code.as_str()),
            failure: None,
            stored: Some(stored_hash(xml)),
            window: None,
        };
        if let Some(f) = error {
            applied.report = Report::Refused(f.to_string());
            applied.failure = Some(FailureReason::CannotConform);
            return Judged::Ends(applied);
        }
        if !outcome.changed {
            return Judged::Conforms(applied);
        }
        if self.policy.mode == crate::policy::Mode::Audit {
            let why = "would change, but the policy's mode is audit";
            applied.report = Report::Refused(why.into());
            return Judged::Ends(applied);
        }
        Judged::Rewrite(applied, outcome.output)
    }
}
/// A persistent guest's name and stored definition (with secrets); else what [`apply_judged`]
/// reports for it (a transient guest, or one libvirt cannot give).
fn stored_definition(dom: &VirDomain) -> Result<(String, String), Box<Applied>> {
    let unreadable = |why: String| {
        let r = Report::Refused(why);
        Box::new(Applied::unjudged(
            r,
            Some("libvirt"),
            Some(FailureReason::Unreadable),
        ))
    };
    match dom.is_persistent() {
        Ok(true) => {}
        Ok(false) => return Err(Box::new(Applied::unjudged(Report::Transient, None, None))),
        Err(e) => return Err(unreadable(format!("libvirt: {e}"))),
    }
    let name = dom.name().unwrap_or_default();
    let xml =
        stored_xml(dom).map_err(|e| unreadable(format!("cannot read the definition: {e}")))?;
    Ok((name, xml))
}

impl Step<'_> {
    /// Back the guest's `old` definition up and define the `new` one, unless the stored
    /// definition is no longer `old` right before the define: then `Ok(Err(now))`, nothing
    /// defined and the backup removed. Under `dry_run`, neither: `Err` of the report. `Err`:
    /// the report and the failure reason when the backup, the define or a read failed.
    fn define(
        &self,
        name: &str,
        old: &str,
        new: &str,
        between: &dyn Between,
    ) -> Result<Result<Defined, String>, Failed> {
        let running = self.dom.is_active().unwrap_or(false);
        let diff = similar::TextDiff::from_lines(old, new)
            .unified_diff()
            .header(&format!("{name} (stored)"), &format!("{name} (conforming)"))
            .to_string();
        if self.dry_run {
            let changed = Report::Changed {
                running,
                backup: None,
                diff,
            };
            return Err((changed, None));
        }
        let uuid = self.dom.uuid_string().unwrap_or_default();
        let backup = write_backup(self.backup_dir, name, &uuid, old).map_err(|e| {
            let why = format!("cannot write the backup, nothing defined: {e}");
            (Report::Refused(why), Some(FailureReason::Backup))
        })?;
        between.before_define(name);
        let now = stored_xml(self.dom).map_err(|e| {
            // Nothing replaced: no backup.
            let _ = std::fs::remove_file(&backup);
            if matches!(
                e.code(),
                virt::enumutil::Enum::Known(virt::error::ErrorNumber::NoDomain)
            ) {
                // Undefined meanwhile: no stored definition to keep conforming.
                return (Report::Undefined, None);
            }
            let why = format!("cannot read the definition again before the define: {e}");
            (Report::Refused(why), Some(FailureReason::Unreadable))
        })?;
        let read = Instant::now();
        if now != old {
            // Not a definition this step replaced: no backup of it.
            let _ = std::fs::remove_file(&backup);
            return Ok(Err(now));
        }
        if between.defining(name) {
            // Its next definition may land inside this define's window: left to the step that
            // follows its DEFINED events, once they are quiet.
            let _ = std::fs::remove_file(&backup);
            return Err((Report::Busy, None));
        }
        if let Err(e) = self.conn.define_domain_xml(new) {
            let why = format!(
                "libvirt refused the rewritten definition (old one kept, backup {}): {e}",
                backup.display()
            );
            return Err((Report::Refused(why), Some(FailureReason::Define)));
        }
        let window = read.elapsed();
        between.after_define(name);
        let read_back = stored_xml(self.dom).map_err(|e| {
            let why = format!(
                "defined (backup {}), but cannot read it back: {e}",
                backup.display()
            );
            (Report::Refused(why), Some(FailureReason::Unreadable))
        })?;
        Ok(Ok(Defined {
            report: Report::Changed {
                running,
                backup: Some(backup),
                diff,
            },
            window,
            read_back,
        }))
    }
}

/// A step that ends without a define to read back: its report and failure reason.
type Failed = (Report, Option<FailureReason>);

/// Write `xml` to `DIR/NAME-UUID-TIMESTAMP.xml`, mode 0600 (it holds secrets), directory 0700.
fn write_backup(dir: &Path, name: &str, uuid: &str, xml: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| format!("{}.{:09}", d.as_secs(), d.subsec_nanos()))
        .unwrap_or_default();
    let safe = safe_file_name(name);
    let path = dir.join(format!("{safe}-{uuid}-{stamp}.xml"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    f.write_all(xml.as_bytes())?;
    f.sync_all()?;
    Ok(path)
}

/// This host's facts for judging guests: the snapshot just written, the policy's `[host]`
/// files, and `libvirt` (from [`libvirt_version`]) over any version those files name, so the
/// daemon judges with the libvirtd it is connected to rather than with a file that another
/// libvirt may have written.
pub(super) fn host_for(
    policy: &Policy,
    snapshot: &[PathBuf],
    libvirt: Option<&Sourced<LibvirtVersion>>,
) -> Result<Host, crate::Error> {
    Host::discover(&HostOptions {
        libvirt_version: libvirt.cloned(),
        ..HostOptions::from_policy(policy, snapshot, None, None)
    })
}

/// The libvirt version `host` judges with and where it came from, as one sentence for the log.
pub(super) fn version_used(host: &Host) -> String {
    match host.libvirt_version() {
        Some(v) => format!("judging with libvirt {} (from {})", v.value, v.source),
        None => "judging with libvirt 9.0's rules: no libvirt version known (the connection, host-facts files and libvirt's capability cache gave none)".into(),
    }
}

pub(super) fn describe(name: &str, r: &Report) -> String {
    match r {
        Report::Unchanged => format!("{name}: unchanged (conforms)"),
        Report::Changed {
            running, backup, ..
        } => {
            let when = if *running {
                "running: the change applies at its next cold boot"
            } else {
                "applies at its next start"
            };
            match backup {
                Some(b) => format!("{name}: changed ({when}); backup {}", b.display()),
                None => format!("{name}: would change ({when})"),
            }
        }
        Report::Refused(why) => format!("{name}: refused: {why}"),
        Report::NotKept => format!(
            "{name}: refused: its definition came back as it was after {COMES_BACK} rewrites within {} s (libvirt does not keep the rewrite, or another client restores its own definition after each); left alone until its definition changes",
            COMES_BACK_WITHIN.as_secs()
        ),
        Report::Transient => {
            format!("{name}: transient guest, left alone (it has no stored definition)")
        }
        Report::Undefined => format!("{name}: undefined meanwhile, nothing defined"),
        Report::Busy => format!(
            "{name}: defined by another client meanwhile, nothing defined; judged once its definitions are quiet"
        ),
    }
}

/// The guests `apply` names (`--all`: every guest libvirt lists), each with its domain, None when
/// libvirt has no guest of that name.
fn guests(conn: &Connect, a: &ApplyArgs) -> Vec<(String, Option<VirDomain>)> {
    if a.all {
        conn.list_all_domains(0)
            .unwrap_or_default()
            .into_iter()
            .map(|d| (d.name().unwrap_or_default(), Some(d)))
            .collect()
    } else {
        a.names
            .iter()
            .map(|n| (n.clone(), conn.lookup_domain_by_name(n).ok()))
            .collect()
    }
}

/// `virt-cpu-policyd apply`: exit 0 when every guest is unchanged, changed or transient; 1 when
/// any was refused; 2 when the policy or the connection fails.
pub(super) fn cmd_apply(cli: &Cli, a: &ApplyArgs) -> i32 {
    let policy = match Policy::load(cli.policy.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            crate::stdio::message_line(&format!("virt-cpu-policyd: {e}"));
            return 2;
        }
    };
    let conn = match connect(&cli.uri) {
        Ok(c) => c,
        Err(e) => {
            crate::stdio::message_line(&format!(
                "virt-cpu-policyd: cannot connect to {}: {e}",
                cli.uri
            ));
            return 2;
        }
    };
    let snapshot = if a.dry_run {
        Vec::new()
    } else {
        write_snapshot(
            &conn,
            &cli.snapshot_dir,
            publish_dir(cli, &policy),
            cli.host_name.as_deref(),
        )
    };
    let host = match host_for(&policy, &snapshot, libvirt_version(cli, &conn).as_ref()) {
        Ok(h) => h,
        Err(e) => {
            crate::stdio::message_line(&format!("virt-cpu-policyd: {e}"));
            return 2;
        }
    };
    // On stderr: stdout is the per-guest report (and the diffs), which scripts read.
    eprintln!("virt-cpu-policyd: {}", version_used(&host));
    let mut code = 0;
    let mut out = String::new();
    for (name, d) in guests(&conn, a) {
        let r = match d {
            Some(d) => apply_one(&conn, &d, &policy, &host, &cli.backup_dir, a.dry_run),
            None => Report::Refused("no such guest".into()),
        };
        if a.dry_run {
            if let Report::Changed { diff, .. } = &r {
                out.push_str(diff);
            }
        }
        if matches!(r, Report::Refused(_) | Report::NotKept) {
            code = 1;
        }
        out.push_str(&describe(&name, &r));
        out.push('\n');
    }
    let mut stdout = std::io::stdout().lock();
    if stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return 2;
    }
    code
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::daemon::SNAPSHOT_FACTS;
    use clap::Parser;

    pub(in crate::daemon) fn applied(
        report: Report,
        verdict: Option<Verdict>,
        failure: Option<FailureReason>,
    ) -> Applied {
        Applied {
            report,
            verdict,
            rules: vec!["x86-64-v2 baseline".into()],
            code: failure.map(|_| "cpu-level"),
            failure,
            stored: None,
            window: None,
        }
    }

    pub(in crate::daemon) fn changed() -> Report {
        Report::Changed {
            running: false,
            backup: Some(PathBuf::from("/b.xml")),
            diff: "-<cpu/>\n+<cpu mode='custom'/>".into(),
        }
    }

    /// libvirt's test driver runs inside this process: a connection without a libvirtd.
    pub(super) const TEST_URI: &str = "test:///default";

    #[test]
    fn the_connected_libvirt_version_wins_over_files_and_the_override_over_it() {
        let dir = std::env::temp_dir().join(format!("vcp-dmn-version-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A snapshot file that another libvirt wrote.
        let caps = "<capabilities><host><cpu><arch>x86_64</arch></cpu></host></capabilities>";
        let stale = dir.join(SNAPSHOT_FACTS);
        let doc =
            crate::libvirt::host_facts::document("n", "99.9.0".parse().unwrap(), None, caps, &[]);
        std::fs::write(&stale, doc).unwrap();
        let cli = |extra: &[&str]| {
            let mut args = vec!["virt-cpu-policyd", "--uri", TEST_URI];
            args.extend_from_slice(extra);
            args.extend(["apply", "--all"]);
            Cli::parse_from(args)
        };
        let conn = connect(TEST_URI).unwrap();
        let connected = LibvirtVersion::from_number(u64::from(conn.lib_version().unwrap()));
        let policy = Policy::load(None).unwrap();
        let used = |cli: &Cli| {
            let fact = libvirt_version(cli, &conn);
            let host = host_for(&policy, std::slice::from_ref(&stale), fact.as_ref()).unwrap();
            let v = host.libvirt_version().unwrap();
            (v.value.to_string(), v.source.clone(), version_used(&host))
        };
        let (value, source, line) = used(&cli(&[]));
        assert_eq!(value, connected.to_string());
        assert_eq!(source, format!("virConnectGetLibVersion on {TEST_URI}"));
        assert_eq!(
            line,
            format!(
                "judging with libvirt {connected} (from virConnectGetLibVersion on {TEST_URI})"
            )
        );
        let (value, source, _) = used(&cli(&["--libvirt-version", "11.3.0"]));
        assert_eq!(
            (value.as_str(), source.as_str()),
            ("11.3.0", "--libvirt-version")
        );
        // Without a version from the connection, the files decide, as for the hook.
        let host = host_for(&policy, std::slice::from_ref(&stale), None).unwrap();
        assert_eq!(host.libvirt_version().unwrap().value.to_string(), "99.9.0");
        std::fs::remove_dir_all(&dir).ok();
    }
}

#[cfg(test)]
mod races;
