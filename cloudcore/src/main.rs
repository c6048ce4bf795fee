use std::process::ExitCode;

/// mimalloc rather than the system allocator: cloudhub's sessions allocate on one thread and
/// free on another (a frame decoded by a reader task, dropped by its session), and glibc's arena
/// locks made that a fifth of the link's CPU (QUIC acked messages per second: 76,000 median with
/// glibc, 100,000 with mimalloc; see BENCHMARKS.md). It costs about 4 KiB more per idle session.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    daemon::cli::main::<cloudcore::CloudCore>()
}
