//! A small builder around the real binary, in the style of just's test harness:
//! `Cmd::new(&["rewrite", ...]).stdin(...).run()` then assertions on status, stdout and stderr.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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

/// What a finished run gave.
#[derive(Debug)]
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// A command to run.
pub struct Cmd {
    args: Vec<String>,
    stdin: Option<Vec<u8>>,
    dir: Option<PathBuf>,
}

impl Cmd {
    pub fn new<S: AsRef<str>>(args: &[S]) -> Self {
        Cmd {
            args: args.iter().map(|a| a.as_ref().to_string()).collect(),
            stdin: None,
            dir: None,
        }
    }

    pub fn arg(mut self, a: impl AsRef<str>) -> Self {
        self.args.push(a.as_ref().to_string());
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
        let mut c = Command::new(bin());
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
        let mut child = c.spawn().expect("spawn virt-cpu-policy");
        if let Some(data) = self.stdin {
            let mut w = child.stdin.take().unwrap();
            // The tool may refuse early and close stdin; a write error then is expected.
            std::thread::spawn(move || {
                let _ = w.write_all(&data);
            });
        }
        let out = child.wait_with_output().expect("wait for virt-cpu-policy");
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
