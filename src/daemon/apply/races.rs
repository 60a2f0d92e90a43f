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
    done: Cell<bool>,
}

impl Orchestrator<'_> {
    fn define(&self) {
        if !self.done.replace(true) {
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

    fn run(&self, between: &dyn Between) -> Applied {
        let step = Step {
            conn: &self.conn,
            dom: &self.dom,
            policy: &self.policy,
            host: &self.host,
            backup_dir: &self.backups,
            dry_run: false,
        };
        step.run(None, between)
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
    let other = Orchestrator {
        conn: &f.conn,
        xml: guest("vcp-race-before", "second"),
        before: true,
        done: Cell::new(false),
    };
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
    let other = Orchestrator {
        conn: &f.conn,
        xml: guest("vcp-race-after", "third"),
        before: false,
        done: Cell::new(false),
    };
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
fn a_rewrite_stored_back_as_it_was_is_not_kept_and_known_again() {
    let f = Fixture::new("vcp-race-notkept");
    // libvirt "keeping" the old definition: the same content defined again right after.
    let old = f.stored();
    let other = Orchestrator {
        conn: &f.conn,
        xml: old.clone(),
        before: false,
        done: Cell::new(false),
    };
    let a = f.run(&other);
    assert_eq!(a.report, Report::NotKept, "{a:?}");
    assert_eq!(a.stored, Some(stored_hash(&old)));
    assert_eq!(a.failure, Some(FailureReason::Define));
    // Known again: nothing defined, nothing backed up.
    let before = f.backups().len();
    let step = Step {
        conn: &f.conn,
        dom: &f.dom,
        policy: &f.policy,
        host: &f.host,
        backup_dir: &f.backups,
        dry_run: false,
    };
    let again = step.run(a.stored, &TestHold);
    assert_eq!(again.report, Report::NotKept);
    assert_eq!(f.backups().len(), before);
    assert_eq!(f.stored(), old);
    // A new definition from someone else is judged and rewritten.
    f.conn
        .define_domain_xml(&guest("vcp-race-notkept", "fourth"))
        .unwrap();
    let next = step.run(a.stored, &TestHold);
    assert!(matches!(next.report, Report::Changed { .. }), "{next:?}");
    assert!(f.conforms() && f.stored().contains("fourth"));
}
