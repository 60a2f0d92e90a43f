//! Generates the man pages and shell completions of `virt-cpu-policy` from its clap definitions,
//! for the packages (`cargo run --example gen-assets -- target/assets`):
//!
//! * `OUTDIR/man/virt-cpu-policy.8` and `virt-cpu-policy-SUBCOMMAND.8` (section 8: the binary is
//!   installed in /usr/sbin);
//! * `OUTDIR/completions/virt-cpu-policy.bash`, `_virt-cpu-policy` (zsh), `virt-cpu-policy.fish`;
//! * with `--features daemon`, the same for `virt-cpu-policyd`.
//!
//! An example rather than a binary so that it is never packaged; clap_mangen and clap_complete are
//! dev-dependencies.

use clap::CommandFactory;
use clap_complete::Shell;
use std::path::{Path, PathBuf};
use virt_cpu_policy::cli::Cli;

const SECTION: &str = "8";

fn main() {
    let out: PathBuf = match std::env::args_os().nth(1) {
        Some(dir) => dir.into(),
        None => {
            eprintln!("usage: cargo run --example gen-assets -- OUTDIR");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&out) {
        eprintln!("gen-assets: {e}");
        std::process::exit(1);
    }
}

fn run(out: &Path) -> std::io::Result<()> {
    let man = out.join("man");
    let completions = out.join("completions");
    std::fs::create_dir_all(&man)?;
    std::fs::create_dir_all(&completions)?;

    program(Cli::command(), "virt-cpu-policy", &man, &completions)?;
    #[cfg(feature = "daemon")]
    program(
        virt_cpu_policy::daemon::Cli::command(),
        "virt-cpu-policyd",
        &man,
        &completions,
    )?;
    Ok(())
}

/// The man pages (the program's, one per subcommand) and completions of one program.
fn program(
    cmd: clap::Command,
    name: &'static str,
    man: &Path,
    completions: &Path,
) -> std::io::Result<()> {
    let mut cmd = cmd.name(name).bin_name(name);
    cmd.build();
    write_man(&cmd, name, man)?;
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        let page = format!("{name}-{}", sub.get_name());
        // Without clap's `string` feature a command name is a `&'static str`: leak a few bytes.
        let static_page: &'static str = Box::leak(page.clone().into_boxed_str());
        let sub = sub
            .clone()
            .name(static_page)
            .bin_name(format!("{name} {}", sub.get_name()));
        write_man(&sub, &page, man)?;
    }
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let path = clap_complete::generate_to(shell, &mut cmd, name, completions)?;
        println!("{}", path.display());
    }
    Ok(())
}

fn write_man(cmd: &clap::Command, page: &str, dir: &Path) -> std::io::Result<()> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .title(page.to_uppercase())
        .section(SECTION)
        .manual("System Administration")
        .source(format!("virt-cpu-policy {}", env!("CARGO_PKG_VERSION")))
        .render(&mut buf)?;
    let path = dir.join(format!("{page}.{SECTION}"));
    std::fs::write(&path, buf)?;
    println!("{}", path.display());
    Ok(())
}
