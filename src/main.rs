//! `virt-cpu-policy`: parse the command line, run it, exit with its code.

use clap::Parser;

fn main() {
    let cli = virt_cpu_policy::cli::Cli::parse();
    std::process::exit(virt_cpu_policy::cli::run(cli));
}
