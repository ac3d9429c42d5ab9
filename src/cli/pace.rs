//! `ratescope pace`: runs simulated requests through a real limiter on a virtual clock (an hour of
//! pacing takes milliseconds) and prints each admission.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use tokio::time::Instant;

use super::LimitArgs;
use crate::engine::{Limiter, Priority, parse_duration};

#[derive(Debug, Args)]
pub struct PaceArgs {
    /// Number of requests, all arriving at once.
    #[arg(short = 'n', long, default_value_t = 12)]
    pub requests: usize,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// How long each simulated request holds its slot, e.g. 200ms (at most a day).
    #[arg(long, default_value = "100ms", value_parser = parse_duration_arg)]
    pub work: Duration,
    /// Share of requests in the high lane (0.0 to 1.0); the rest are normal.
    #[arg(long, default_value_t = 0.0, value_parser = super::share_arg)]
    pub high: f64,
}

/// The longest `--work` accepted: a day of virtual time is already far beyond any request.
const MAX_WORK: Duration = Duration::from_secs(86_400);

fn parse_duration_arg(text: &str) -> Result<Duration, String> {
    let work = parse_duration(text).map_err(|err| err.to_string())?;
    if work > MAX_WORK {
        return Err(format!("'{text}' is longer than a day, the most a simulated request may take"));
    }
    Ok(work)
}

pub fn run(args: PaceArgs) -> anyhow::Result<ExitCode> {
    if args.requests > 1_000_000 {
        usage!("-n {} is more than pace simulates (1,000,000)", args.requests);
    }
    let config = args.limits.to_requests_config("pace")?;
    let limiter = Limiter::new("pace", config)?;
    outln!("limiter: {}", limiter.config().describe())?;
    outln!("{:>9}  {:>5}  {:<6}  {:>6}  budgets left", "time", "req", "lane", "queued")?;
    // Virtual time: the clock stands still while every task waits, then jumps to the next
    // deadline, so the schedule printed is the limiter's own and no wall-clock time passes.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?;
    runtime.block_on(async {
        let start = Instant::now();
        let high_count = (args.requests as f64 * args.high).round() as usize;
        let tasks: Vec<_> = (0..args.requests)
            .map(|i| {
                let limiter = limiter.clone();
                let priority = if i % args.requests.max(1) < high_count { Priority::High } else { Priority::Normal };
                tokio::spawn(async move {
                    let permit = limiter.acquire(priority, 1).await?;
                    let snapshot = limiter.snapshot();
                    let budgets: Vec<String> = snapshot
                        .budgets
                        .iter()
                        .map(|b| format!("{} {:.2}/{}", b.name, b.available, b.capacity))
                        .collect();
                    outln!(
                        "{:>8.3}s  {:>5}  {:<6}  {:>6}  {}",
                        start.elapsed().as_secs_f64(),
                        i + 1,
                        priority,
                        snapshot.queued_total(),
                        budgets.join(", ")
                    )?;
                    tokio::time::sleep(args.work).await;
                    drop(permit);
                    anyhow::Ok(())
                })
            })
            .collect();
        for task in tasks {
            task.await??;
        }
        let elapsed = start.elapsed().as_secs_f64();
        outln!(
            "{} requests in {elapsed:.3}s of simulated time ({:.2}/s)",
            args.requests,
            args.requests as f64 / elapsed.max(1e-9)
        )?;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}
