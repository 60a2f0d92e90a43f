//! `virt-cpu-policy`: parse the command line, run it, exit with its code.

use clap::Parser;

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(code) = virt_cpu_policy::cli::fast_path(&args) {
        std::process::exit(code);
    }
    let cli = virt_cpu_policy::cli::Cli::parse_from(args);
    std::process::exit(virt_cpu_policy::cli::run(cli));
}
