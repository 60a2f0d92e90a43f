//! `virt-cpu-policyd`: parse the command line, run it, exit with its code.

fn main() {
    std::process::exit(virt_cpu_policy::daemon::main());
}
