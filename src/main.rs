//! `virt-cpu-policy`: parse the command line, run it, exit with its code.

use clap::Parser;

/// Runs before Rust's runtime, which puts `/dev/null` on a closed stdout: `>&-` must be seen
/// (exit 2), not written into the void.
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static NOTE_STDOUT: extern "C" fn() = note_stdout;

#[cfg(target_os = "linux")]
extern "C" fn note_stdout() {
    virt_cpu_policy::stdio::note_stdout_at_start();
}

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(code) = virt_cpu_policy::cli::unchecked_hook_exit(&args) {
        std::process::exit(code);
    }
    let cli = virt_cpu_policy::cli::Cli::parse_from(args);
    std::process::exit(virt_cpu_policy::cli::run(cli));
}
