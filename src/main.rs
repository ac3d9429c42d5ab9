//! The `ratescope` binary: parses the command line and hands over to `ratescope::cli`.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    ratescope::cli::main(ratescope::cli::Cli::parse())
}
