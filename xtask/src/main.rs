//! virt-cpu-policy's task runner: `cargo xtask TASK` (the alias is in `.cargo/config.toml`).
//!
//! One place for the commands a contributor and CI run, so that none of them hides in a test or
//! a shell history: `check` before a commit, `ci` for the whole suite as CI runs it, `bless` to
//! rewrite the golden outputs, `regen-cpu-map` to regenerate the built-in CPU model table,
//! `fuzz`, `bench`, `shellcheck`, `layers`, `sizes` and `msrv`. Each task says what it runs, runs it from the
//! repository root, and stops at the first failure with that command's exit status.

mod layers;
mod shellcheck;
mod sizes;

use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "virt-cpu-policy's tasks",
    version
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// What to run before a commit: rustfmt, clippy, rustdoc (warnings denied), shellcheck, the
    /// layering and size checks and every test that needs neither root nor a running libvirtd.
    Check,
    /// The whole suite as CI runs it (`.ci/run`: as root, installs libvirt and QEMU, starts
    /// libvirtd and the other libvirt generations, runs every test, the e2e scripts, fuzzing and
    /// benches).
    Ci,
    /// Rewrites the expected files of both golden suites (`tests/cases`, `tests/baseline-cases`)
    /// from what the binary prints now: read the diff before committing it.
    Bless,
    /// Regenerates the built-in CPU model table (`src/cpu/builtin_x86.txt`) and feature names
    /// (`src/cpu/x86_features.txt`) from a libvirt cpu_map directory.
    RegenCpuMap {
        /// libvirt's cpu_map directory.
        #[arg(long, default_value = "/usr/share/libvirt/cpu_map")]
        cpu_map: PathBuf,
        /// The libvirt build it comes from, written into the files' headers.
        #[arg(
            long,
            default_value = "libvirt 9.0.0's cpu_map (Debian 12 package libvirt-daemon 9.0.0-4+deb12u2)"
        )]
        origin: String,
        /// Where to write the two files.
        #[arg(long, default_value = "src/cpu")]
        out: PathBuf,
    },
    /// Runs each cargo-fuzz target (parse, rewrite, hook) from the seed corpus for a while; a
    /// crash leaves its input in fuzz/artifacts/TARGET/. Needs cargo-fuzz.
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = 60)]
        seconds: u32,
        /// A sanitizer (`address`), which needs a nightly toolchain; none by default (libFuzzer
        /// on the stable toolchain through RUSTC_BOOTSTRAP).
        #[arg(long)]
        sanitizer: Option<String>,
    },
    /// The criterion benchmarks (benches/*.rs); with --whole-process also the whole-process
    /// comparisons of benches/process/ (hyperfine, /usr/bin/time, virt-xml, virsh); with
    /// --fleet the fleet's size benchmark (benches/process/fleet).
    Bench {
        /// Also run benches/process/compare and benches/process/baseline.
        #[arg(long)]
        whole_process: bool,
        /// Also run the fleet's size benchmark, benches/process/fleet: 1,000 x 10,000, 2x, 4x
        /// and 10x (10,000 hosts x 100,000 guests), each of text, JSON, Prometheus and drain
        /// timed (median of 3) with its peak memory and its growth per guest; fails when 10x
        /// misses 10 s or 2 GiB. A few minutes, 2.7 GB of generated facts in target/.
        #[arg(long)]
        fleet: bool,
        /// Each benchmark once, as a test (fast: that they build and run).
        #[arg(long)]
        test: bool,
    },
    /// shellcheck over every shell script of the repository.
    Shellcheck,
    /// The layering check: no module of the library imports one src/lib.rs lists after it, and
    /// no submodules import each other in a circle (ARCHITECTURE.md; test code is not judged).
    Layers,
    /// The size check: no file of src/ over 800 lines, no non-test function of the library over
    /// 80 (one screen).
    Sizes,
    /// `cargo check` of the library and both binaries with the Rust of the package's
    /// rust-version (Debian 13's rustc, in an overlay of the Debian 13 root: `.ci/msrv`).
    Msrv,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let root = repo_root();
    if let Err(e) = std::env::set_current_dir(&root) {
        eprintln!("xtask: cannot enter {}: {e}", root.display());
        return ExitCode::from(2);
    }
    let result = match cli.task {
        Task::Check => check(),
        Task::Ci => run(Command::new(".ci/run")),
        Task::Bless => bless(),
        Task::RegenCpuMap {
            cpu_map,
            origin,
            out,
        } => {
            let mut c = cargo(&["run", "--quiet", "--example", "regen-cpu-map", "--"]);
            c.arg(&cpu_map).arg(&origin).arg(&out);
            run(c)
        }
        Task::Fuzz { seconds, sanitizer } => fuzz(seconds, sanitizer.as_deref()),
        Task::Bench {
            whole_process,
            fleet,
            test,
        } => bench(whole_process, fleet, test),
        Task::Shellcheck => shellcheck::run(Path::new(".")),
        Task::Layers => layers::run(Path::new(".")),
        Task::Sizes => sizes::run(Path::new(".")),
        Task::Msrv => run(Command::new(".ci/msrv")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(code, why)) => {
            eprintln!("xtask: {why}");
            ExitCode::from(code)
        }
    }
}

/// A task that failed: the exit status to give and why.
#[derive(Debug)]
pub struct Failure(u8, String);

impl Failure {
    /// A failure of the task's own (exit 1).
    pub fn new(why: impl Into<String>) -> Failure {
        Failure(1, why.into())
    }
}

/// The repository root: the parent of this package's directory.
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in a directory of the repository")
        .to_path_buf()
}

/// `cargo ARGS...`.
fn cargo(args: &[&str]) -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.args(args);
    c
}

/// Runs `cmd`, echoing it; a non-zero exit is a failure with that status.
pub fn run(mut cmd: Command) -> Result<(), Failure> {
    let shown = format!("{cmd:?}").replace('"', "");
    eprintln!("==> {shown}");
    let status = cmd
        .status()
        .map_err(|e| Failure(2, format!("cannot run {shown}: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        let code = status.code().map_or(1, |c| u8::try_from(c).unwrap_or(1));
        Err(Failure(code, format!("failed ({status}): {shown}")))
    }
}

fn check() -> Result<(), Failure> {
    run(cargo(&["fmt", "--all", "--check"]))?;
    run(cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--features",
        "daemon",
        "--",
        "-D",
        "warnings",
    ]))?;
    let mut doc = cargo(&["doc", "--no-deps", "--features", "daemon"]);
    doc.env("RUSTDOCFLAGS", "-D warnings");
    run(doc)?;
    shellcheck::run(Path::new("."))?;
    layers::run(Path::new("."))?;
    sizes::run(Path::new("."))?;
    run(cargo(&[
        "test",
        "--workspace",
        "--all-targets",
        "--features",
        "daemon",
    ]))
}

fn bless() -> Result<(), Failure> {
    // --include-ignored: the cases that read ../shared/corpus are ignored without it; asked for
    // here, they fail when it is absent rather than keep stale outputs quietly.
    let mut c = cargo(&[
        "test",
        "--features",
        "daemon",
        "--test",
        "integration",
        "--",
        "--include-ignored",
        "golden::",
    ]);
    c.env("BLESS", "1");
    run(c)?;
    eprintln!(
        "xtask: expected files rewritten; review `git diff tests/cases tests/baseline-cases`"
    );
    Ok(())
}

fn fuzz(seconds: u32, sanitizer: Option<&str>) -> Result<(), Failure> {
    if Command::new("cargo-fuzz")
        .arg("--version")
        .output()
        .is_err()
    {
        return Err(Failure(
            2,
            "cargo-fuzz is not installed: cargo install cargo-fuzz --locked".into(),
        ));
    }
    run(Command::new("fuzz/seed-corpus"))?;
    std::fs::create_dir_all("target").map_err(|e| Failure::new(format!("target: {e}")))?;
    for target in ["parse", "rewrite", "hook"] {
        let mut c = match sanitizer {
            None => {
                let mut c = cargo(&["fuzz", "run", "-s", "none", target]);
                c.env("RUSTC_BOOTSTRAP", "1");
                c
            }
            Some(s) => {
                let mut c = Command::new("cargo");
                c.args(["+nightly", "fuzz", "run", "-s", s, target]);
                c
            }
        };
        c.args([
            "--",
            &format!("-max_total_time={seconds}"),
            "-timeout=10",
            "-rss_limit_mb=2048",
            "-print_final_stats=1",
        ]);
        let log = format!("target/fuzz-{target}.log");
        eprintln!("--- fuzz target {target} ({seconds} s; full output in {log})");
        let file = std::fs::File::create(&log).map_err(|e| Failure::new(format!("{log}: {e}")))?;
        let err = file
            .try_clone()
            .map_err(|e| Failure::new(format!("{log}: {e}")))?;
        c.stdout(file).stderr(err);
        let status = c
            .status()
            .map_err(|e| Failure(2, format!("cannot run cargo fuzz: {e}")))?;
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        for line in text.lines().filter(|l| {
            (l.starts_with('#') && l.contains("DONE"))
                || l.starts_with("stat::number_of_executed_units")
                || l.starts_with("stat::peak_rss_mb")
        }) {
            eprintln!("{line}");
        }
        if !status.success() {
            let tail: Vec<&str> = text.lines().rev().take(60).collect();
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
            return Err(Failure::new(format!(
                "fuzz target {target} failed ({status}); the input is in fuzz/artifacts/{target}/"
            )));
        }
    }
    Ok(())
}

fn bench(whole_process: bool, fleet: bool, test: bool) -> Result<(), Failure> {
    let each = [
        "--features",
        "daemon",
        "--bench",
        "rewrite",
        "--bench",
        "baseline",
        "--bench",
        "hook",
    ];
    // As a test: each benchmark once, in the test profile (no optimised build to wait for).
    let verb = if test { "test" } else { "bench" };
    run(cargo(&[&[verb][..], &each].concat()))?;
    if whole_process {
        run(Command::new("benches/process/compare"))?;
        run(Command::new("benches/process/baseline"))?;
    }
    if fleet {
        // The fleets (2.7 GB) are removed after: they are made again in a minute.
        let mut c = Command::new("benches/process/fleet");
        c.arg("--clean");
        if test {
            // As a test: the two small fleets once each.
            c.args(["--runs", "1", "--small"]);
        }
        run(c)?;
    }
    Ok(())
}

/// A throwaway crate for the checks' tests: `files` as (path below `src/`, text), in a fresh
/// directory of the system's temporary directory named by `tag`.
#[cfg(test)]
fn scratch_crate(tag: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xtask-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (path, text) in files {
        let p = dir.join("src").join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}
