//! `ratescope sim`: a burst spec run in virtual time against a model of a server.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::mock::MockConfig;
use crate::sim::{SimOptions, burst_from_file, simulate};

#[derive(Debug, Args)]
pub struct SimArgs {
    /// The server: a demo API config (TOML, as for `ratescope mock --config`); default the built-in demo.
    #[arg(long, value_name = "CONFIG")]
    pub server: Option<PathBuf>,
    /// What to send: a burst-spec file (TOML; see assets/sim-burst.toml).
    #[arg(long, value_name = "SPEC")]
    pub burst: PathBuf,
    /// Seed of the client's jitter (and the server's, when its config has none).
    #[arg(long, default_value_t = SimOptions::default().seed)]
    pub seed: u64,
    /// Print the summary as one JSON object (the schema of `ratescope burst --json`).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: SimArgs) -> anyhow::Result<ExitCode> {
    let server = match &args.server {
        Some(path) => MockConfig::from_file(path)?,
        None => MockConfig::demo()?,
    };
    let spec = burst_from_file(&args.burst).map_err(anyhow::Error::msg)?;
    let options = SimOptions { seed: args.seed, ..SimOptions::default() };
    let simulation = simulate(&server, spec, &options)?;
    let summary = &simulation.summary;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&summary.to_json())?)?;
    } else {
        out!("{summary}")?;
        outln!(
            "simulated:     {:.3}s of traffic in {:.1} ms of real time",
            summary.elapsed_s,
            simulation.real_time.as_secs_f64() * 1000.0
        )?;
    }
    Ok(if summary.failed > 0 || summary.cancelled > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}
