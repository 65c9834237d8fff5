//! `weir decap`: runs on a backend behind weir's ipip and gue modes, where
//! the kernel has no ipip/fou modules. Attaches weir_decap to an interface
//! for every address of this host, until SIGINT or SIGTERM, then prints its
//! counters and detaches. `weir decap status` prints the counters of the
//! weir_decap attached to an interface.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use weir_dataplane::attach::{self, XdpMode};
use weir_dataplane::decap::{self, Decap};
use weir_dataplane::iface::Iface;

use weir_sys::SignalSet;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DecapXdpMode {
    Native,
    Generic,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct DecapArgs {
    #[command(subcommand)]
    pub cmd: Option<DecapCmd>,
    /// The interface the encapsulated packets arrive on.
    #[arg(long, value_name = "IF", required = true)]
    pub interface: Option<String>,
    /// Native (driver) XDP, or the generic fallback.
    #[arg(long, value_enum, default_value = "native")]
    pub xdp_mode: DecapXdpMode,
    /// The UDP port GUE arrives on (the load balancer's `gue_port`).
    #[arg(long, default_value_t = weir_abi::WEIR_GUE_PORT as u16,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub gue_port: u16,
}

#[derive(Debug, Subcommand)]
pub enum DecapCmd {
    /// Print the counters of the weir decap running on an interface.
    Status {
        #[arg(long, value_name = "IF")]
        interface: String,
    },
}

/// The interface `--interface` names, with an error that says so.
fn interface(name: &str) -> Result<Iface> {
    let known = matches!(weir_sys::ifindex(name), Ok(Some(_)));
    if !known {
        bail!(
            "no network interface named {name:?} here (see `ip link`): --interface names the \
             one the encapsulated packets arrive on"
        );
    }
    Iface::by_name(name)
}

pub fn run(args: &DecapArgs) -> Result<()> {
    if let Some(DecapCmd::Status { interface: name }) = &args.cmd {
        let iface = interface(name)?;
        let stats = decap::attached_stats(&iface.name, iface.ifindex)?;
        print!("{}", stats.render());
        return Ok(());
    }
    // clap requires --interface without a subcommand.
    let name = args
        .interface
        .as_deref()
        .context("--interface is required")?;
    // Before anything else, so no signal ends the process with XDP attached.
    let signals = SignalSet::block(&[libc::SIGINT, libc::SIGTERM]);
    let iface = interface(name)?;
    let prog = Decap::load(args.gue_port)?;
    let addrs = decap::local_addrs()?;
    for a in &addrs {
        prog.add_addr(*a)?;
    }
    let mode = match args.xdp_mode {
        DecapXdpMode::Native => XdpMode::Native,
        DecapXdpMode::Generic => XdpMode::Generic,
    };
    let attached =
        attach::attach_all(prog.prog_fd(), &[(iface.name.clone(), iface.ifindex)], mode)?;
    let list: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
    eprintln!(
        "weir decap: on {name} ({mode} XDP), IPIP, IPv6-in-IP and GUE (UDP port {}) to {}; \
         SIGINT or SIGTERM stops",
        args.gue_port,
        list.join(", ")
    );
    signals.wait();
    let stats = prog.stats();
    drop(attached);
    print!("{}", stats?.render());
    Ok(())
}
