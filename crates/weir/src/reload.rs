//! `weir reload`: asks the running daemon to re-read its configuration and
//! waits for its answer, so a refused file fails the command (and systemd's
//! `systemctl reload`) instead of hiding in the daemon's log.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use weir_control::reload_outcome::reload_and_wait;
use weir_control::run_record::DEFAULT_RUN_DIR;

#[derive(Args)]
pub struct ReloadArgs {
    #[arg(long, default_value = DEFAULT_RUN_DIR)]
    run_dir: PathBuf,
    /// How long to wait for the daemon's answer, in seconds.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    timeout: f64,
}

/// Exits 0 with what changed when the daemon applied the file; an error
/// with the daemon's reason when it refused it or did not answer.
pub fn run(args: &ReloadArgs) -> Result<()> {
    if !(args.timeout.is_finite() && args.timeout > 0.0 && args.timeout <= 3600.0) {
        bail!(
            "--timeout {}: give the seconds to wait for the daemon, more than 0 and at most 3600",
            args.timeout
        );
    }
    let (pid, outcome) = reload_and_wait(&args.run_dir, Duration::from_secs_f64(args.timeout))?;
    println!("weir serve (pid {pid}) {}", outcome.message);
    Ok(())
}
