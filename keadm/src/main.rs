//! `keadm`: see the library.

fn main() -> std::process::ExitCode {
    keadm::main()
}
