//! edgecore, built inside the e2e crate so its tests can run it as a process (and kill it).
use std::process::ExitCode;

fn main() -> ExitCode {
    daemon::cli::main::<edgecore::EdgeCore>()
}
