//! The `leasehold` command; everything it does lives in the library's `cli` room.

fn main() -> std::process::ExitCode {
    leasehold::cli::main()
}
