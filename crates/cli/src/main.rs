//! The `leasehold` command; everything it does lives in the `leasehold_cli` library.

use leasehold_extract as extract;

fn main() -> std::process::ExitCode {
    // The hidden extraction-child mode (docs/DESIGN.md), before any flag parsing
    // so it never shows in help.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == extract::CHILD_ARG)
    {
        return extract::child_main();
    }
    leasehold_cli::main()
}
