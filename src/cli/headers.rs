//! `ratescope headers`: explains the rate-limit headers of a pasted response head.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// The most of a response head `headers` reads: far above any real head, far below what
/// `/dev/zero` would fill memory with.
const MAX_HEAD_BYTES: u64 = 1 << 20;

pub fn run(args: HeadersArgs) -> anyhow::Result<ExitCode> {
    let path = args.file.clone().unwrap_or_else(|| "-".into());
    let bytes = crate::files::read_capped(&path, MAX_HEAD_BYTES).map_err(|err| match err {
        crate::files::FileError::TooLarge { .. } => {
            let source = if path == Path::new("-") { "standard input".to_owned() } else { path.display().to_string() };
            anyhow::anyhow!(
                "{source} holds more than {} MiB: a response head is far smaller (paste the status line and headers)",
                MAX_HEAD_BYTES >> 20
            )
        }
        other => other.into(),
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let now = match args.now {
        None => SystemTime::now(),
        Some(epoch) if epoch.is_finite() && (0.0..1e11).contains(&epoch) => UNIX_EPOCH + Duration::from_secs_f64(epoch),
        Some(epoch) => usage!("--now {} is not a Unix time in seconds", crate::engine::format_amount(epoch)),
    };
    let head = parse_response_head(&text)?;
    let mut info = RateLimitInfo::parse(head.status, &head.headers, head.body.as_deref(), now);
    let mut warnings = head.warnings;
    warnings.append(&mut info.warnings);
    info.warnings = warnings;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&explain_json(&info))?)?;
    } else {
        out!("{}", explain_table(&info))?;
    }
    Ok(ExitCode::SUCCESS)
}
