//! `ratescope headers`: explains the rate-limit headers of a pasted response head.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Args;

use crate::http::headers::{RateLimitInfo, explain_json, explain_table, parse_response_head};

#[derive(Debug, Args)]
pub struct HeadersArgs {
    /// File with the response head (status line, headers, blank line, optional body); stdin when absent.
    pub file: Option<PathBuf>,
    /// The client's clock as Unix epoch seconds, for relative answers (default: now).
    #[arg(long, value_name = "EPOCH")]
    pub now: Option<f64>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: HeadersArgs) -> anyhow::Result<ExitCode> {
    let bytes = match &args.file {
        Some(path) => std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?,
        None => {
            let mut bytes = Vec::new();
            std::io::stdin().read_to_end(&mut bytes).context("cannot read standard input")?;
            bytes
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    let now = match args.now {
        None => SystemTime::now(),
        Some(epoch) if epoch.is_finite() && (0.0..1e11).contains(&epoch) => UNIX_EPOCH + Duration::from_secs_f64(epoch),
        Some(epoch) => bail!("--now {epoch} is not a Unix time in seconds"),
    };
    let head = parse_response_head(&text)?;
    let mut info = RateLimitInfo::parse(head.status, &head.headers, head.body.as_deref(), now);
    let mut warnings = head.warnings;
    warnings.append(&mut info.warnings);
    info.warnings = warnings;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&explain_json(&info))?)?;
    } else {
        print!("{}", explain_table(&info));
    }
    Ok(ExitCode::SUCCESS)
}
