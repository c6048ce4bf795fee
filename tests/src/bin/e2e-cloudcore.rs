//! cloudcore, built inside the e2e crate so benchmarks can run it as a process of its own (and
//! measure its memory apart from the client's).
use std::process::ExitCode;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    daemon::cli::main::<cloudcore::CloudCore>()
}
