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
    #[cfg(feature = "daemon")]
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
