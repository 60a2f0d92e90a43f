//! A small builder around the real binary, in the style of just's test harness:
//! `Cmd::new(&["rewrite", ...]).stdin(...).run()` then assertions on status, stdout and stderr.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Path of the binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_virt-cpu-policy")
}

/// The project root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `../shared/corpus`, when present.
pub fn corpus() -> Option<PathBuf> {
    let p = root().join("../shared/corpus");
    p.is_dir().then_some(p)
}

/// `../shared/corpus`, for a test marked
/// `#[cfg_attr(not(vcp_shared_corpus), ignore = "needs ../shared/corpus beside the checkout")]`
/// (`build.rs` sets the cfg when the corpus is there): panics when it is absent, which happens
/// only when such a test is run anyway (`--include-ignored`, as CI does: there a missing corpus
/// is a failure).
#[track_caller]
pub fn shared_corpus() -> PathBuf {
    corpus().unwrap_or_else(|| {
        panic!(
            "needs ../shared/corpus beside the checkout ({}), and it is absent",
            root().join("../shared/corpus").display()
        )
    })
}

/// What a finished run gave.
#[derive(Debug)]
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Path of the daemon's binary (`--features daemon`).
#[cfg(feature = "daemon")]
pub fn daemon_bin() -> &'static str {
    env!("CARGO_BIN_EXE_virt-cpu-policyd")
}

/// A command to run.
pub struct Cmd {
    program: &'static str,
    args: Vec<String>,
    stdin: Option<Vec<u8>>,
    dir: Option<PathBuf>,
}

impl Cmd {
    pub fn new<S: AsRef<str>>(args: &[S]) -> Self {
        Cmd {
            program: bin(),
            args: args.iter().map(|a| a.as_ref().to_string()).collect(),
            stdin: None,
            dir: None,
        }
    }

    /// Run `program` instead of `virt-cpu-policy`.
    pub fn program(mut self, program: &'static str) -> Self {
        self.program = program;
        self
    }

    pub fn arg(mut self, a: impl AsRef<str>) -> Self {
        self.args.push(a.as_ref().to_string());
        self
    }

    pub fn args<S: AsRef<str>>(mut self, a: &[S]) -> Self {
        self.args.extend(a.iter().map(|x| x.as_ref().to_string()));
        self
    }

    pub fn stdin(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(data.into());
        self
    }

    pub fn dir(mut self, d: &Path) -> Self {
        self.dir = Some(d.to_path_buf());
        self
    }

    pub fn run(self) -> Output {
        self.keeps_the_machines_state();
        let mut c = Command::new(self.program);
        c.args(&self.args)
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(d) = &self.dir {
            c.current_dir(d);
        }
        let mut child = c.spawn().expect("spawn the binary under test");
        if let Some(data) = self.stdin {
            let mut w = child.stdin.take().unwrap();
            // The tool may refuse early and close stdin; a write error then is expected.
            std::thread::spawn(move || {
                let _ = w.write_all(&data);
            });
        }
        Output::from(child.wait_with_output().expect("wait for virt-cpu-policy"))
    }
}

impl Cmd {
    /// A hook run that judges a guest counts its decision in its state directory
    /// (`--snapshot-dir`, default /var/lib/virt-cpu-policy): a test must name one of its own, so
    /// that the machine running the tests is never changed.
    #[track_caller]
    fn keeps_the_machines_state(&self) {
        let judged = self.args.first().is_some_and(|a| a == "hook")
            && self
                .args
                .windows(2)
                .any(|w| virt_cpu_policy::hook::Phase::of(&w[0], &w[1]).is_some());
        let named = self
            .args
            .iter()
            .any(|a| a == "--snapshot-dir" || a.starts_with("--snapshot-dir="));
        assert!(
            !judged || named,
            "a hook run in a test must name its --snapshot-dir: {:?}",
            self.args
        );
    }
}

impl From<std::process::Output> for Output {
    fn from(out: std::process::Output) -> Output {
        Output {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Output {
    /// Assert the exit code, printing everything on mismatch.
    #[track_caller]
    pub fn status(&self, code: i32) -> &Self {
        assert_eq!(
            self.code, code,
            "exit code {} (wanted {code})\nstdout:\n{}\nstderr:\n{}",
            self.code, self.stdout, self.stderr
        );
        self
    }
}

/// A scratch directory under the system temp dir, unique per process and call, removed when
/// dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "vcp-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    pub fn write(&self, name: &str, data: impl AsRef<[u8]>) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, data).expect("write scratch file");
        p
    }

    /// File names in the directory, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The code of an `exit N` file, None when the file is absent or says something else.
pub fn exit_file(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok().and_then(|t| {
        t.trim()
            .strip_prefix("exit ")
            .and_then(|n| n.trim().parse().ok())
    })
}

/// Whether the tests run as root (some need it: mounts, files owned by another user).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A path as an argument.
pub fn s(p: &Path) -> String {
    p.display().to_string()
}

/// libvirt's connection for the tests that need a running libvirtd.
pub const URI: &str = "qemu:///system";

/// What a finished `virsh` gave.
pub struct Virsh {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Run `virsh -c qemu:///system ARGS...`.
pub fn virsh(args: &[&str]) -> Virsh {
    virsh_at(URI, args)
}

/// Run `virsh -c URI ARGS...`.
pub fn virsh_at(uri: &str, args: &[&str]) -> Virsh {
    let out = std::process::Command::new("virsh")
        .arg("-c")
        .arg(uri)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run virsh (apt-get install libvirt-clients)");
    Virsh {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Destroys and undefines every domain whose name starts with `prefix` on the libvirt at `uri`
/// when dropped (also when the test panics), saying how many it found.
pub struct Sweep {
    pub uri: String,
    pub prefix: String,
}

impl Sweep {
    /// Destroy and undefine them now; how many were undefined.
    pub fn sweep(&self) -> usize {
        let list = virsh_at(&self.uri, &["list", "--all", "--name"]);
        let mut n = 0;
        for name in list
            .stdout
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with(&self.prefix))
        {
            let _ = virsh_at(&self.uri, &["destroy", name]);
            if virsh_at(&self.uri, &["undefine", name]).ok {
                n += 1;
            }
        }
        n
    }
}

impl Drop for Sweep {
    fn drop(&mut self) {
        let n = self.sweep();
        if n > 0 {
            eprintln!(
                "cleanup: undefined {n} leftover domain(s) named {}* at {}",
                self.prefix, self.uri
            );
        }
    }
}

/// Panic with a clear message when libvirtd does not answer.
pub fn require_libvirtd() {
    let v = virsh(&["version"]);
    assert!(
        v.ok,
        "libvirtd does not answer on {URI} (run tests/libvirt/start as root):\n{}",
        v.stderr
    );
}

/// A libvirt daemon the tests judge the tool against: the host's (Debian 12: libvirt 9.0, QEMU
/// 7.2) and the Debian 13 root's (libvirt 11.3, QEMU 10.0) that `tests/libvirt/root` runs.
pub struct Oracle {
    /// `libvirt 11.3.0 (Debian 13 root)`, for messages.
    pub label: String,
    /// The connection URI.
    pub uri: String,
    /// The daemon's version, `MAJOR.MINOR.MICRO` (`virsh version --daemon`).
    pub version: String,
    /// The directory its files are under: `/` for the host's, the Debian 13 root otherwise.
    pub root: PathBuf,
}

impl Oracle {
    /// `virsh -c URI ARGS...` against this daemon.
    pub fn virsh(&self, args: &[&str]) -> Virsh {
        virsh_at(&self.uri, args)
    }

    /// A path of this libvirt's system (`/usr/share/libvirt/cpu_map`...), on this machine.
    pub fn path(&self, p: &str) -> PathBuf {
        self.root.join(p.trim_start_matches('/'))
    }

    /// Its libvirt's cpu_map directory.
    pub fn cpu_map(&self) -> PathBuf {
        self.path("/usr/share/libvirt/cpu_map")
    }

    /// Whether this is the host's own libvirt.
    pub fn is_host(&self) -> bool {
        self.root == Path::new("/")
    }

    /// The arguments that tell the tool this libvirt's version and cpu_map.
    pub fn tool_args(&self) -> Vec<String> {
        vec![
            "--libvirt-version".into(),
            self.version.clone(),
            "--cpu-map".into(),
            s(&self.cpu_map()),
        ]
    }

    /// (major, minor) of its version.
    pub fn major_minor(&self) -> (u32, u32) {
        let mut it = self.version.split('.').map(|p| p.parse().unwrap_or(0));
        (it.next().unwrap_or(0), it.next().unwrap_or(0))
    }

    /// Run `PROGRAM ARGS...` of this libvirt's system: directly for the host, through `chroot`
    /// into the root otherwise (files passed must then be inside the root).
    pub fn command(&self, program: &str) -> Command {
        if self.is_host() {
            Command::new(program)
        } else {
            let mut c = Command::new("chroot");
            c.arg(&self.root).arg(program);
            c
        }
    }
}

/// The Debian 13 root: `$VCP_ROOT`, else `target/debian13/root` of this checkout (where
/// `tests/libvirt/root` builds it).
pub fn debian13_root() -> PathBuf {
    std::env::var_os("VCP_ROOT").map_or_else(|| root().join("target/debian13/root"), PathBuf::from)
}

/// `virsh version --daemon`'s daemon version, when it answers.
fn daemon_version(uri: &str) -> Option<String> {
    let v = virsh_at(uri, &["version", "--daemon"]);
    if !v.ok {
        return None;
    }
    v.stdout
        .lines()
        .find_map(|l| l.strip_prefix("Running against daemon:"))
        .map(|v| v.trim().to_string())
}

/// Every libvirt to test against: the host's (required: panics when it does not answer), then the
/// Debian 13 root's when its socket answers. When it does not, the test fails under
/// `VCP_REQUIRE_ROOT=1` (`.ci/run` sets it after starting the root) and otherwise says on stderr
/// that only the host's libvirt was asked.
pub fn oracles() -> Vec<Oracle> {
    require_libvirtd();
    let version = daemon_version(URI).expect("the host's libvirtd answers");
    let mut out = vec![Oracle {
        label: format!("libvirt {version} (host)"),
        uri: URI.to_string(),
        version,
        root: PathBuf::from("/"),
    }];
    let dir = debian13_root();
    let uri = format!(
        "qemu+unix:///system?socket={}",
        dir.join("run/libvirt/libvirt-sock").display()
    );
    match daemon_version(&uri) {
        Some(version) => out.push(Oracle {
            label: format!("libvirt {version} (Debian 13 root)"),
            uri,
            version,
            root: dir,
        }),
        None => {
            assert!(
                std::env::var("VCP_REQUIRE_ROOT").as_deref() != Ok("1"),
                "VCP_REQUIRE_ROOT=1 but the Debian 13 root's libvirtd does not answer at {uri} (tests/libvirt/root build && tests/libvirt/root start)"
            );
            eprintln!(
                "oracles: the Debian 13 root's libvirtd does not answer at {uri}: only the host's libvirt is asked (VCP_REQUIRE_ROOT=1 makes this a failure)"
            );
        }
    }
    out
}

/// One libvirt generation of `tests/libvirt/generations.conf` that answers: the machine's own
/// libvirt (`qemu:///system`, root `/`) or a root's daemon (`tests/libvirt/generations`). It
/// dereferences to its [`Oracle`]: `uri`, `version`, `root`, `virsh()`, `cpu_map()`,
/// `tool_args()`, `command()`.
pub struct Generation {
    /// The Debian suite it is: `bullseye`, `bookworm`, `trixie`, `forky`.
    pub name: String,
    /// Debian's release number (`11`...), or the suite's name while it has none (`forky`).
    pub debian: String,
    /// The daemon: label `libvirt 7.0.0 (bullseye)`, URI, `virsh version --daemon`, root.
    pub oracle: Oracle,
}

impl std::ops::Deref for Generation {
    type Target = Oracle;

    fn deref(&self) -> &Oracle {
        &self.oracle
    }
}

impl Generation {
    /// `tests/data/generations/NAME`: its facts as `tests/libvirt/capture-facts` wrote them
    /// (`version`, `capabilities.xml`, `domcapabilities-*.xml`, `cpu_map.list`,
    /// `query-machines-*.json`; see the README there).
    pub fn facts(&self) -> PathBuf {
        generation_facts(&self.name)
    }
}

/// `tests/data/generations/NAME`, the captured facts of generation `name`.
pub fn generation_facts(name: &str) -> PathBuf {
    root().join("tests/data/generations").join(name)
}

/// libvirt 9.0's captured facts (`tests/data/generations/bookworm`: its cpu_map, capabilities
/// and KVM domcapabilities, and its libvirt release) as command-line options, so a verdict that
/// compares a KVM guest's CPU with the host's does not depend on this machine's libvirt: on a
/// fresh machine without one the comparison is `not-compared` (exit 4).
pub fn recorded_host() -> Vec<String> {
    let (_, facts) = crate::producers::Facts::captured(&generation_facts("bookworm"), false);
    let mut args = facts.base;
    for d in &facts.domcaps {
        args.extend(["--caps".to_string(), s(d)]);
    }
    args
}

/// [`recorded_host`] without its KVM domcapabilities: the host's capabilities (its own CPU,
/// which libvirt compares a KVM guest's with at start) and cpu_map, but not what KVM gives
/// (the recorded hosts' KVM gives no x86-64-v2: `cpu-level` refuses a v2 guest there). For
/// tests of a command's mechanics (exit codes, JSON, files), whose verdict must not depend on
/// this weak KVM: what KVM gives is then not known, and the level is judged as written.
pub fn recorded_host_without_kvm_domcaps() -> Vec<String> {
    let (_, facts) = crate::producers::Facts::captured(&generation_facts("bookworm"), false);
    let mut args = facts.base;
    for d in facts
        .domcaps
        .iter()
        .filter(|d| !d.to_string_lossy().ends_with("-kvm.xml"))
    {
        args.extend(["--caps".to_string(), s(d)]);
    }
    args
}

/// `run` on each of `items` at once, one thread each (each generation has its own daemon,
/// files and domain names, and the oracles wait on libvirt far more than on the CPU), the
/// answers in `items`' order; a run that panics fails the caller's test.
pub fn in_parallel<I: Sync, T: Send>(items: &[I], run: impl Fn(&I) -> T + Sync) -> Vec<T> {
    std::thread::scope(|scope| {
        let run = &run;
        let handles: Vec<_> = items.iter().map(|i| scope.spawn(move || run(i))).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a generation's run panicked"))
            .collect()
    })
}

/// One oracle's scratch on generation `g`: the prefix its guests are named with
/// (`vcp-TAG-PID-NAME-`), the [`Sweep`] that destroys and undefines them when dropped, and its
/// directory `tmp/NAME`, made.
pub fn generation_scratch(g: &Generation, tag: &str, tmp: &Path) -> (String, Sweep, PathBuf) {
    let prefix = format!("vcp-{tag}-{}-{}-", std::process::id(), g.name);
    let sweep = Sweep {
        uri: g.uri.clone(),
        prefix: prefix.clone(),
    };
    let dir = tmp.join(&g.name);
    std::fs::create_dir_all(&dir).unwrap();
    (prefix, sweep, dir)
}

/// Every generation that answers ([`generations`]) as an oracle: the tests that judge the tool
/// against "each libvirt" run on all four under `.ci/run` (`VCP_REQUIRE_GENERATIONS`), each
/// judged with its own facts ([`Oracle::tool_args`]: its version and cpu_map; its capabilities
/// from its own daemon where a test asks them).
pub fn every_generation() -> Vec<Oracle> {
    generations().into_iter().map(|g| g.oracle).collect()
}

/// A generation of the configuration that does not answer, and why.
#[derive(Debug)]
pub struct Absent {
    /// The Debian suite.
    pub name: String,
    /// Where it was asked.
    pub uri: String,
    /// Why it is left out: no root built there, a root of another suite, no answer (with
    /// virsh's last line), or this machine being another Debian release than the host generation.
    pub reason: String,
}

/// One line of `tests/libvirt/generations.conf`: name, Debian release, the root it names.
fn generation_lines() -> Vec<(String, String, String)> {
    let path = root().join("tests/libvirt/generations.conf");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert!(
                f.len() == 3,
                "{}: a line is NAME DEBIAN ROOT: {l:?}",
                path.display()
            );
            (f[0].to_string(), f[1].to_string(), f[2].to_string())
        })
        .collect()
}

/// The root of generation `name` whose configured root is `default`: `VCP_ROOT_<NAME>`, for
/// trixie `VCP_ROOT` next, else `default` (as `tests/libvirt/generations` resolves it).
fn generation_root(name: &str, default: &str) -> PathBuf {
    if default == "/" {
        return PathBuf::from("/");
    }
    let var = format!("VCP_ROOT_{}", name.to_uppercase());
    std::env::var_os(var)
        .or_else(|| {
            (name == "trixie")
                .then(|| std::env::var_os("VCP_ROOT"))
                .flatten()
        })
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(default), PathBuf::from)
}

/// Asks generation `name` (root `dir`) whether it answers: the host generation must be this
/// machine's Debian release, a root must have been built for that suite, and its daemon must
/// answer `virsh version --daemon`.
fn ask_generation(name: &str, debian: &str, dir: PathBuf) -> Result<Generation, Absent> {
    let host = dir == Path::new("/");
    let uri = if host {
        URI.to_string()
    } else {
        format!(
            "qemu+unix:///system?socket={}",
            dir.join("run/libvirt/libvirt-sock").display()
        )
    };
    let absent = |reason: String| Absent {
        name: name.to_string(),
        uri: uri.clone(),
        reason,
    };
    // The release a root was built from (tests/libvirt/root writes it), or this machine's.
    let (file, key) = if host {
        ("/etc/os-release", "VERSION_CODENAME=")
    } else {
        ("etc/virt-cpu-policy-root", "suite=")
    };
    let suite = std::fs::read_to_string(dir.join(file)).ok().and_then(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(str::to_string)
    });
    match suite {
        None if host => return Err(absent(format!("no {key} in /etc/os-release"))),
        None => {
            return Err(absent(format!(
                "no root built at {} (tests/libvirt/generations build {name})",
                dir.display()
            )));
        }
        Some(s) if s != name && host => {
            return Err(absent(format!("this machine is Debian '{s}', not {name}")));
        }
        Some(s) if s != name => {
            return Err(absent(format!(
                "{} is a {s} root, not {name}",
                dir.display()
            )));
        }
        Some(_) => {}
    }
    let v = virsh_at(&uri, &["version", "--daemon"]);
    let version = v
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("Running against daemon:"))
        .map(|v| v.trim().to_string())
        .filter(|_| v.ok);
    let Some(version) = version else {
        return Err(absent(format!(
            "its libvirtd does not answer (tests/libvirt/generations start {name}): {}",
            v.stderr.trim().lines().last().unwrap_or("no output")
        )));
    };
    Ok(Generation {
        name: name.to_string(),
        debian: debian.to_string(),
        oracle: Oracle {
            label: format!("libvirt {version} ({name})"),
            uri,
            version,
            root: dir,
        },
    })
}

/// Every generation of `tests/libvirt/generations.conf`, oldest first, each answering or
/// [`Absent`] with the reason. Asks each daemon once (`virsh version --daemon`).
pub fn survey_generations() -> Vec<Result<Generation, Absent>> {
    generation_lines()
        .into_iter()
        .map(|(name, debian, default)| {
            let dir = generation_root(&name, &default);
            ask_generation(&name, &debian, dir)
        })
        .collect()
}

/// The generations that answer, oldest first: the tests loop over them. A generation named by
/// `VCP_REQUIRE_GENERATIONS` that does not answer is a panic with the reason; any other absent
/// one is left out and named on stderr (`generations: SKIP forky: ...`), for the caller to report
/// the test as skipped for it ([`survey_generations`] gives the reasons as values).
pub fn generations() -> Vec<Generation> {
    let survey = survey_generations();
    let required = std::env::var("VCP_REQUIRE_GENERATIONS").unwrap_or_default();
    match select_generations(survey, &required) {
        Ok((answering, absent)) => {
            for a in absent {
                eprintln!("generations: SKIP {}: {}", a.name, a.reason);
            }
            answering
        }
        Err(e) => panic!("{e}"),
    }
}

/// Splits a survey into the answering generations and the absent ones, or the error for a
/// generation `required` (comma-separated names, as `VCP_REQUIRE_GENERATIONS`) names that is
/// absent or that is no generation at all.
pub fn select_generations(
    survey: Vec<Result<Generation, Absent>>,
    required: &str,
) -> Result<(Vec<Generation>, Vec<Absent>), String> {
    let known: Vec<&str> = survey
        .iter()
        .map(|g| match g {
            Ok(g) => g.name.as_str(),
            Err(a) => a.name.as_str(),
        })
        .collect();
    let required: Vec<&str> = required
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    if let Some(n) = required.iter().find(|n| !known.contains(n)) {
        return Err(format!(
            "VCP_REQUIRE_GENERATIONS names '{n}', not a generation of tests/libvirt/generations.conf ({})",
            known.join(", ")
        ));
    }
    let (mut answering, mut absent) = (Vec::new(), Vec::new());
    for g in survey {
        match g {
            Ok(g) => answering.push(g),
            Err(a) if required.contains(&a.name.as_str()) => {
                return Err(format!(
                    "VCP_REQUIRE_GENERATIONS names {} but it does not answer at {}: {}",
                    a.name, a.uri, a.reason
                ));
            }
            Err(a) => absent.push(a),
        }
    }
    Ok((answering, absent))
}

/// `check --format json`'s verdict document of `out` and its findings as (code, severity,
/// message); panics naming `what` when stdout is not that JSON.
pub fn check_json(out: &Output, what: &str) -> (serde_json::Value, Vec<(String, String, String)>) {
    let v: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{what}: check's JSON: {e}: {}", out.stderr));
    let findings = v["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            let word = |k: &str| f[k].as_str().unwrap_or_default().to_string();
            (word("code"), word("severity"), word("message"))
        })
        .collect();
    (v, findings)
}
