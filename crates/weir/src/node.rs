//! `weir node drain|undrain`: takes this node out of the routers' ECMP
//! (every VIP de-preferred or withdrawn by BGP, as `bgp.drain` says) or
//! puts it back, through the running daemon's management API. The drain
//! outlives restarts and takeovers.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};
use weir_control::run_record::DEFAULT_RUN_DIR;
use weir_http::client::Method;

#[derive(Args, Debug)]
pub struct NodeArgs {
    #[command(subcommand)]
    pub cmd: NodeCmd,
    /// The API's address (default: the running daemon's, from its run record).
    #[arg(long, global = true, value_name = "IP:PORT")]
    pub api: Option<SocketAddr>,
    /// The running daemon's run directory.
    #[arg(long, global = true, default_value = DEFAULT_RUN_DIR)]
    pub run_dir: PathBuf,
    /// A file holding the API token (default: the running configuration's
    /// [api] token or token_file).
    #[arg(long, global = true, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum NodeCmd {
    /// Announce every VIP de-preferred (bgp.drain = "graceful-shutdown", the
    /// default) or withdraw it ("withdraw"): new flows go to the other nodes;
    /// established ones keep their backends where connection sync runs.
    Drain,
    /// Announce the VIPs again (those that pass their checks).
    Undrain,
}

pub fn run(args: &NodeArgs) -> Result<()> {
    let (addr, token) = crate::dip::target(args.api, &args.run_dir, args.token_file.as_deref())?;
    let path = match args.cmd {
        NodeCmd::Drain => "/api/v1/node/drain",
        NodeCmd::Undrain => "/api/v1/node/undrain",
    };
    let changed = crate::dip::send(addr, token.as_deref(), Method::POST, path, None)?;
    println!("{}", changed.message);
    Ok(())
}
