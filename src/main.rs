//! The `ratescope` binary: parses the command line and hands over to `ratescope::cli`.

use std::process::ExitCode;

use clap::Parser;

/// A faster allocator than glibc's under many concurrent requests (see BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: ratescope::allocator::Mimalloc = ratescope::allocator::Mimalloc;

fn main() -> ExitCode {
    ratescope::cli::main(ratescope::cli::Cli::parse())
}
