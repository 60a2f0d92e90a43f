//! The races of [`Step::run`], on libvirt's in-process test driver (`test:///default`, one
//! driver per process: each test its own guest name), another client's define played at the
//! two places [`Between`] marks.

use super::tests::TEST_URI;
use super::*;
use std::cell::Cell;

/// A TCG guest on `qemu64` (below the built-in policy's x86-64-v2), its `<description>`
/// standing for the orchestrator's content.
fn guest(name: &str, description: &str) -> String {
    // One UUID per name, as an orchestrator defines a guest again.
    let uuid = format!("5c30255f-c30e-4221-aa96-{:012x}", stored_hash(name) >> 16);
    format!(
        "<domain type='qemu'><name>{name}</name><uuid>{uuid}</uuid>\
         <description>{description}</description>\
         <memory>65536</memory><vcpu>1</vcpu>\
         <os><type arch='x86_64' machine='pc'>hvm</type></os>\
         <cpu><model>qemu64</model></cpu></domain>"
    )
}

/// Another client's define at one place of the step, once.
struct Orchestrator<'a> {
    conn: &'a Connect,
    xml: String,
    before: bool,
    /// How many more times it defines.
    left: Cell<usize>,
}

impl<'a> Orchestrator<'a> {
    /// Another client defining `xml` `times` times, before the daemon's define or after it.
    fn new(conn: &'a Connect, xml: String, before: bool, times: usize) -> Orchestrator<'a> {
        Orchestrator {
            conn,
            xml,
            before,
            left: Cell::new(times),
        }
    }

    fn define(&self) {
        if self.left.get() > 0 {
            self.left.set(self.left.get() - 1);
            self.conn.define_domain_xml(&self.xml).unwrap();
        }
    }
}

impl Between for Orchestrator<'_> {
    fn before_define(&self, _: &str) {
        if self.before {
            self.define();
        }
    }
    fn after_define(&self, _: &str) {
        if !self.before {
            self.define();
        }
    }
}

struct Fixture {
    conn: Connect,
    dom: VirDomain,
    policy: Policy,
    host: Host,
    backups: PathBuf,
}

impl Fixture {
    fn new(name: &str) -> Fixture {
        let conn = connect(TEST_URI).unwrap();
        let dom = conn.define_domain_xml(&guest(name, "first")).unwrap();
        let facts = crate::testdata::generation("bookworm", "capabilities.xml");
        let host = Host::discover(&HostOptions::of_facts(
            vec![facts],
            Some(crate::testdata::cpu_map()),
            None,
        ))
        .unwrap();
        let backups = std::env::temp_dir().join(format!("vcp-{name}-{}", std::process::id()));
        Fixture {
            conn,
            dom,
            policy: Policy::load(None).unwrap(),
            host,
            backups,
        }
    }

    fn step(&self) -> Step<'_> {
        Step {
            conn: &self.conn,
            dom: &self.dom,
            policy: &self.policy,
            host: &self.host,
            backup_dir: &self.backups,
            dry_run: false,
        }
    }

    fn run(&self, between: &dyn Between) -> Applied {
        self.step().run(&mut Replaced::default(), between)
    }

    fn stored(&self) -> String {
        stored_xml(&self.dom).unwrap()
    }

    /// The backups' contents, oldest first.
    fn backups(&self) -> Vec<String> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.backups)
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default();
        files.sort();
        files
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap())
            .collect()
    }

    fn conforms(&self) -> bool {
        let o = rewrite(&self.stored(), "stored", &self.policy, &self.host).unwrap();
        !o.changed
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.dom.undefine();
        let _ = std::fs::remove_dir_all(&self.backups);
    }
}

#[test]
fn a_define_between_the_read_and_the_define_is_judged_not_overwritten() {
    let f = Fixture::new("vcp-race-before");
    let other = Orchestrator::new(&f.conn, guest("vcp-race-before", "second"), true, 1);
    let a = f.run(&other);
    assert!(matches!(a.report, Report::Changed { .. }), "{a:?}");
    let stored = f.stored();
    assert!(
        stored.contains("second"),
        "the orchestrator's define lost:\n{stored}"
    );
    assert!(f.conforms(), "{stored}");
    // The one definition the daemon replaced is the orchestrator's; the first was replaced
    // by the orchestrator, not backed up.
    let b = f.backups();
    assert_eq!(b.len(), 1, "{b:#?}");
    assert!(b[0].contains("second") && b[0].contains("qemu64"), "{b:#?}");
    assert!(a.window.is_some());
}

#[test]
fn a_define_right_after_the_daemons_own_is_judged_in_turn() {
    let f = Fixture::new("vcp-race-after");
    let other = Orchestrator::new(&f.conn, guest("vcp-race-after", "third"), false, 1);
    let a = f.run(&other);
    assert!(matches!(a.report, Report::Changed { .. }), "{a:?}");
    let stored = f.stored();
    assert!(stored.contains("third"), "{stored}");
    assert!(f.conforms(), "{stored}");
    // Both replaced definitions are kept: the first, and the orchestrator's.
    let b = f.backups();
    assert_eq!(b.len(), 2, "{b:#?}");
    assert!(b[0].contains("first") && b[1].contains("third"), "{b:#?}");
}

#[test]
fn a_definition_restored_once_is_rewritten_again_one_that_keeps_coming_back_is_left_alone() {
    let f = Fixture::new("vcp-race-back");
    let old = f.stored();
    // Another client restores its definition right after the daemon's define, once: judged
    // again and rewritten, both replaced definitions kept.
    let once = Orchestrator::new(&f.conn, old.clone(), false, 1);
    let a = f.run(&once);
    assert!(matches!(a.report, Report::Changed { .. }), "{a:?}");
    assert!(f.conforms());
    assert_eq!(f.backups().len(), 2);
    // One that restores it after every define (or a libvirt that does not keep the rewrite):
    // replaced COMES_BACK times, then left alone, with the content's hash.
    f.conn.define_domain_xml(&old).unwrap();
    let always = Orchestrator::new(&f.conn, old.clone(), false, usize::MAX);
    let step = f.step();
    let mut replaced = Replaced::default();
    let b = step.run(&mut replaced, &always);
    assert_eq!(b.report, Report::NotKept, "{b:?}");
    assert_eq!(b.stored, Some(stored_hash(&old)));
    assert_eq!(b.failure, Some(FailureReason::Define));
    assert_eq!(f.backups().len(), 2 + COMES_BACK);
    // Known again: nothing defined, nothing backed up.
    let again = step.run(&mut replaced, &TestHold);
    assert_eq!(again.report, Report::NotKept);
    assert_eq!(f.backups().len(), 2 + COMES_BACK);
    assert_eq!(f.stored(), old);
    // A new definition from someone else is judged and rewritten.
    f.conn
        .define_domain_xml(&guest("vcp-race-back", "fourth"))
        .unwrap();
    let next = step.run(&mut replaced, &TestHold);
    assert!(matches!(next.report, Report::Changed { .. }), "{next:?}");
    assert!(f.conforms() && f.stored().contains("fourth"));
}

/// A guest undefined between the daemon's read and its define: nothing defined, no backup, no
/// failure.
#[test]
fn a_guest_undefined_meanwhile_is_left_alone_without_a_failure() {
    struct Undefine<'a>(&'a VirDomain);
    impl Between for Undefine<'_> {
        fn before_define(&self, _: &str) {
            self.0.undefine().unwrap();
        }
    }
    let f = Fixture::new("vcp-race-gone");
    let a = f.run(&Undefine(&f.dom));
    assert_eq!(a.report, Report::Undefined, "{a:?}");
    assert_eq!(a.failure, None);
    assert!(f.backups().is_empty(), "{:?}", f.backups());
}

/// Only a define counts towards "comes back": steps whose backup fails define nothing, and are
/// said as what they are however often they come.
#[test]
fn steps_that_define_nothing_never_make_a_content_come_back() {
    let mut f = Fixture::new("vcp-race-nobackup");
    // A file where the backup directory should be: every backup fails.
    let file = std::env::temp_dir().join(format!("vcp-race-file-{}", std::process::id()));
    std::fs::write(&file, "").unwrap();
    f.backups = file.join("backups");
    let mut replaced = Replaced::default();
    for _ in 0..=COMES_BACK {
        let step = f.step();
        let a = step.run(&mut replaced, &TestHold);
        assert_eq!(a.failure, Some(FailureReason::Backup), "{a:?}");
    }
    std::fs::remove_file(&file).ok();
}

/// Another client's DEFINED event not yet judged when the step is about to define ([`Between::
/// defining`], the daemon's events): nothing defined over it, no backup, no failure; after a
/// define of the step's own, that define is what it reports.
#[test]
fn a_guest_being_defined_is_not_defined_over() {
    /// Defining from the start, or only once the orchestrator after the step's define has.
    struct Events<'a> {
        other: Orchestrator<'a>,
        always: bool,
    }
    impl Between for Events<'_> {
        fn after_define(&self, name: &str) {
            self.other.after_define(name);
        }
        fn defining(&self, _: &str) -> bool {
            self.always || self.other.left.get() == 0
        }
    }
    let f = Fixture::new("vcp-race-busy");
    let first = f.stored();
    let busy = Events {
        other: Orchestrator::new(&f.conn, guest("vcp-race-busy", "x"), false, 0),
        always: true,
    };
    let a = f.run(&busy);
    assert_eq!(a.report, Report::Busy, "{a:?}");
    assert_eq!((a.failure, a.verdict), (None, Some(Verdict::NeedsRewrite)));
    assert_eq!(f.stored(), first);
    assert!(f.backups().is_empty(), "{:?}", f.backups());
    // The step defines; another client defines right after; its event is seen before the
    // step's second define: the step's first define reported, the other's content kept.
    let after = Events {
        other: Orchestrator::new(&f.conn, guest("vcp-race-busy", "fifth"), false, 1),
        always: false,
    };
    let b = f.run(&after);
    assert!(matches!(b.report, Report::Changed { .. }), "{b:?}");
    assert!(b.window.is_some());
    let stored = f.stored();
    assert!(
        stored.contains("fifth") && stored.contains("qemu64"),
        "{stored}"
    );
    assert_eq!(f.backups().len(), 1);
}
