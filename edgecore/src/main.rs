use std::process::ExitCode;

fn main() -> ExitCode {
    daemon::cli::main::<edgecore::EdgeCore>()
}
