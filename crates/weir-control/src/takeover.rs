//! What holds the interfaces `weir serve` is configured for, and whether
//! `--takeover` may replace it.
//!
//! `--takeover` replaces either the running weir recorded in the run
//! directory (which is then retired), or an orphaned weir: its daemon died
//! (`kill -9`, a crash) and its program goes on forwarding with no process
//! holding it. Either way the program must be weir's, on exactly the
//! configured interfaces, and must use the maps pinned in `pin_dir` as seen
//! from here; otherwise the new program would start with empty tables and
//! reset every established connection (a predecessor that pinned in a
//! private mount namespace, see `bpffs.rs`).

use std::fmt;
use std::fs;
use std::path::Path;

use anyhow::{bail, Result};
use weir_config::Config;
use weir_dataplane::attach::{attached_prog_id, held, Held, XdpMode};
use weir_dataplane::iface::Iface;
use weir_dataplane::loader::{pinned_map_ids, PINNED_MAPS, PROG_NAME};

use crate::run_record::RunRecord;

/// Whose program `--takeover` replaces.
#[derive(Debug)]
pub enum Predecessor {
    /// The daemon recorded in the run directory; retired after the swap.
    Live(RunRecord),
    /// A weir program that no process holds; the dead daemon's run record,
    /// if it left one.
    Orphan(Option<RunRecord>),
}

/// A checked takeover: the programs to replace and whose they are.
#[derive(Debug)]
pub struct Takeover {
    pub predecessor: Predecessor,
    pub held: Vec<Held>,
}

/// A process with a file descriptor of a BPF program.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Proc {
    pid: u32,
    comm: String,
}

impl fmt::Display for Proc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {} ({})", self.pid, self.comm)
    }
}

/// Refuses (before anything is loaded) interfaces that already carry an XDP
/// program, saying whose it is and what to run.
pub fn refuse_busy(ifaces: &[Iface]) -> Result<()> {
    for i in ifaces {
        let Some(h) = held(&i.name, i.ifindex)? else {
            continue;
        };
        let what = format!(
            "interface {} already has an XDP program (id {}, name {})",
            h.iface, h.prog_id, h.prog_name
        );
        let off = format!("ip link set dev {} xdp off", h.iface);
        if h.prog_name != PROG_NAME {
            bail!(
                "{what}, which is not weir's; stop whatever attached it (`{off}` if it is stale) \
                 and start weir again"
            );
        }
        let owners = holders(h.prog_id);
        if owners.is_empty() {
            bail!(
                "{what}: an orphaned weir, whose daemon died (no process holds it), still \
                 forwarding with its pinned state; adopt it without dropping connections with \
                 `weir serve --takeover` (same config), or detach it with `{off}` (established \
                 connections reset)"
            );
        }
        bail!(
            "{what} of a running weir, {}; stop it first, or replace it with `weir serve \
             --takeover` and the --run-dir it runs with",
            list(&owners)
        );
    }
    Ok(())
}

/// Checks that `--takeover` can replace what holds the configured
/// interfaces in XDP mode `mode` without losing state; runs before anything
/// is loaded, with the pin directory's filesystem in place.
pub fn check(cfg: &Config, ifaces: &[Iface], run_dir: &Path, mode: XdpMode) -> Result<Takeover> {
    let mut found = Vec::new();
    let mut bare = Vec::new();
    for i in ifaces {
        match held(&i.name, i.ifindex)? {
            Some(h) => found.push(h),
            None => bare.push(i.name.as_str()),
        }
    }
    if found.is_empty() {
        bail!(
            "--takeover: no XDP program on {} to take over; start without --takeover",
            bare.join(", ")
        );
    }
    if !bare.is_empty() {
        bail!(
            "--takeover: {} carries no XDP program while {} does; list the interfaces the \
             program to replace runs on in dataplane.interfaces",
            bare.join(", "),
            found[0].iface
        );
    }
    for h in &found {
        if h.prog_name != PROG_NAME {
            bail!(
                "--takeover: {} carries {} (id {}), which is not weir's {PROG_NAME}; detach it \
                 with `ip link set dev {} xdp off` and start without --takeover",
                h.iface,
                h.prog_name,
                h.prog_id,
                h.iface
            );
        }
    }
    if let Some(h) = found.iter().find(|h| h.mode != mode) {
        bail!(
            "--takeover: the program on {} runs as {} XDP but this start asks for {mode}; pass \
             --xdp-mode {} (or set dataplane.xdp_mode)",
            h.iface,
            h.mode,
            h.mode
        );
    }
    let prog = found[0].prog_id;
    if let Some(h) = found.iter().find(|h| h.prog_id != prog) {
        bail!(
            "--takeover: {} and {} carry different weir programs (ids {} and {}), so they are \
             not one daemon's; stop the others or detach them, then start again",
            found[0].iface,
            h.iface,
            prog,
            h.prog_id
        );
    }
    let elsewhere = other_interfaces_with(prog, ifaces);
    if !elsewhere.is_empty() {
        bail!(
            "--takeover: weir's program (id {prog}) also runs on {}, which dataplane.interfaces \
             does not list; add them (or detach it there with `ip link set dev IF xdp off`) and \
             run again",
            elsewhere.join(", ")
        );
    }

    let record = RunRecord::read(run_dir).ok();
    let owners = holders(prog);
    let predecessor = match record {
        Some(r) if owners.iter().any(|p| p.pid == r.pid) => {
            if r.interfaces != *cfg.dataplane.interfaces.get_ref()
                || r.pin_dir != cfg.dataplane.pin_dir
            {
                bail!(
                    "--takeover needs the same interfaces and pin_dir as the running daemon \
                     (pid {})",
                    r.pid
                );
            }
            Predecessor::Live(r)
        }
        r if owners.is_empty() => Predecessor::Orphan(r),
        _ => bail!(
            "--takeover: weir's program (id {prog}) on {} belongs to {}, which {} does not \
             record; run --takeover with the --run-dir that daemon runs with, or stop it",
            found[0].iface,
            list(&owners),
            RunRecord::path(run_dir).display()
        ),
    };
    check_pins(&found[0], &predecessor, &cfg.dataplane.pin_dir)?;
    Ok(Takeover {
        predecessor,
        held: found,
    })
}

/// Refuses unless every map of `h` that weir pins is the very map pinned in
/// `pin_dir` here (same kernel id): the new program then reuses them.
fn check_pins(h: &Held, predecessor: &Predecessor, pin_dir: &Path) -> Result<()> {
    let pinned = pinned_map_ids(pin_dir)?;
    let mut checked = 0;
    let mut lost = Vec::new();
    for (name, id) in &h.maps {
        // The kernel keeps the first 15 bytes of a map's name.
        let Some(weir_name) = PINNED_MAPS
            .iter()
            .find(|n| n.get(..15).unwrap_or(n) == name)
        else {
            continue;
        };
        checked += 1;
        match pinned.iter().find(|(n, _)| n == weir_name) {
            Some((_, pin)) if pin == id => {}
            Some(_) => lost.push(format!("{weir_name} (another map is pinned)")),
            None => lost.push(format!("{weir_name} (not pinned)")),
        }
    }
    if checked == 0 {
        bail!(
            "--takeover: the program on {} (id {}) uses none of weir's maps; detach it with `ip \
             link set dev {} xdp off` and start without --takeover",
            h.iface,
            h.prog_id,
            h.iface
        );
    }
    if lost.is_empty() {
        return Ok(());
    }
    let lost = lost.join(", ");
    let dir = pin_dir.display();
    match predecessor {
        Predecessor::Live(r) => bail!(
            "--takeover: the running weir (pid {}) keeps its state in maps that are not the ones \
             pinned in {dir} as seen from here: {lost}; it runs in a mount namespace with a BPF \
             filesystem of its own (started with `ip netns exec`?), so taking over would start \
             with empty tables and reset every connection. Stop it and start weir with `nsenter \
             --net=/run/netns/NAME weir serve ...` (connections reset once), or take over from \
             inside its namespaces: `nsenter --target {} --mount --net weir serve --takeover \
             --ephemeral-state ...`",
            r.pid,
            r.pid
        ),
        Predecessor::Orphan(record) => {
            let hint = match record {
                Some(r) if r.pin_dir != pin_dir => format!(
                    "; its run record names pin_dir {}: set dataplane.pin_dir to it",
                    r.pin_dir.display()
                ),
                _ => String::new(),
            };
            bail!(
                "--takeover: the orphaned weir program (id {}) on {} keeps its state in maps that \
                 are not the ones pinned in {dir} as seen from here: {lost}{hint}. If its daemon \
                 ran in a private mount namespace (`ip netns exec`), that state went with it and \
                 cannot be adopted: detach the program with `ip link set dev {} xdp off` and \
                 start without --takeover (established connections reset)",
                h.prog_id,
                h.iface,
                h.iface
            )
        }
    }
}

/// Interfaces of this network namespace, other than `ifaces`, that carry
/// program `prog`.
fn other_interfaces_with(prog: u32, ifaces: &[Iface]) -> Vec<String> {
    weir_sys::interfaces()
        .unwrap_or_default()
        .into_iter()
        .filter(|(idx, _)| {
            !ifaces.iter().any(|i| i.ifindex == *idx) && attached_prog_id(*idx) == Some(prog)
        })
        .map(|(_, name)| name)
        .collect()
}

/// The processes (other than this one) holding a file descriptor of BPF
/// program `prog`: a running daemon holds its program's; after `kill -9`
/// only the interfaces do.
fn holders(prog: u32) -> Vec<Proc> {
    let me = std::process::id();
    let want = format!("prog_id:\t{prog}");
    let mut out = Vec::new();
    let Ok(procs) = fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == "anon_inode:bpf-prog")
                && fs::read_to_string(p.path().join("fdinfo").join(fd.file_name()))
                    .is_ok_and(|info| info.lines().any(|l| l == want))
        });
        if holds {
            let comm = fs::read_to_string(p.path().join("comm")).unwrap_or_default();
            out.push(Proc {
                pid,
                comm: comm.trim().to_string(),
            });
        }
    }
    out
}

fn list(procs: &[Proc]) -> String {
    procs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
