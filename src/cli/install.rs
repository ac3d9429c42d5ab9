//! `ratescope completions` and `ratescope man`: the shell completion scripts and manual pages a
//! packager installs beside the binary, generated from the same clap definitions as the
//! command line itself, so they never drift from it.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, CommandFactory};
use clap_complete::Shell;

use super::Cli;
use crate::files::{self, WriteOptions};

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write one page per command (ratescope.1, ratescope-burst.1, …) into DIR, made if
    /// missing, instead of printing ratescope.1 on standard output.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Prints the completion script for `args.shell` on standard output.
pub fn completions(args: CompletionsArgs) -> anyhow::Result<ExitCode> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "ratescope", &mut script);
    std::io::stdout().lock().write_all(&script)?;
    Ok(ExitCode::SUCCESS)
}

/// Prints ratescope(1), or writes every command's page into `args.dir`.
pub fn man(args: ManArgs) -> anyhow::Result<ExitCode> {
    let mut command = Cli::command().disable_help_subcommand(true);
    // Built, so each subcommand knows its full name (`ratescope-burst`) for its own page.
    command.build();
    let Some(dir) = args.dir else {
        std::io::stdout().lock().write_all(&page(command)?)?;
        return Ok(ExitCode::SUCCESS);
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    let mut pending = vec![command];
    while let Some(command) = pending.pop() {
        pending.extend(command.get_subcommands().filter(|sub| !sub.is_hide_set()).cloned());
        let man = clap_mangen::Man::new(command.clone());
        let path = dir.join(man.get_filename());
        // Each page replaces its file whole (a temporary file renamed over it), never half-written.
        files::write_bytes(&path, &page(command)?, WriteOptions::default())?;
        outln!("{}", path.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The roff text of `command`'s manual page.
fn page(command: clap::Command) -> anyhow::Result<Vec<u8>> {
    let mut text = Vec::new();
    clap_mangen::Man::new(command).render(&mut text).context("could not render the manual page")?;
    Ok(text)
}
