//! `weir serve`: preflight checks, load, apply, attach, then serve signals
//! (SIGHUP reloads the configuration, SIGINT/SIGTERM detach and exit).
//!
//! Every check that can fail on bad input runs before anything is loaded,
//! and a failure after loading removes the pins this start created, so a
//! failed start leaves nothing attached or pinned.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use weir_config::{Config, ConnLru, HostFacts, NonSynMiss, Tier, Verdict, XdpModeCfg};
use weir_dataplane::attach::{attach_all, take_over, XdpMode};
use weir_dataplane::iface::Iface;
use weir_dataplane::loader::{self, Action, LoadOptions, LoadedLb};
use weir_dataplane::maps::Maps;

use crate::apply::{apply, prime_neighbours};
use crate::bpffs::{self, Persistence};
use crate::controller::Shared;
use crate::live::{log_warnings, Live};
use crate::program::Program;
use crate::run_record::RunRecord;
use crate::takeover::{self, Predecessor, Takeover};
use weir_sys::SignalSet;

/// Options of `weir serve` beyond the configuration file.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub config: PathBuf,
    pub xdp_mode: Option<XdpMode>,
    pub reset_state: bool,
    pub run_dir: PathBuf,
    /// Replace the running daemon's programs atomically, then retire it;
    /// or adopt an orphaned weir program whose daemon died.
    pub takeover: bool,
    /// Run even where the pinned state cannot outlive the process (a
    /// private mount namespace, as under `ip netns exec`).
    pub ephemeral_state: bool,
}

fn verdict(v: Verdict) -> Action {
    match v {
        Verdict::Pass => Action::Pass,
        Verdict::Drop => Action::Drop,
    }
}

/// What preflight found: everything `serve` needs before loading.
pub struct Preflight {
    pub cfg: Config,
    pub ifaces: Vec<Iface>,
    pub mode: XdpMode,
    /// With --takeover: the checked programs to replace.
    pub takeover: Option<Takeover>,
    pub persistence: Persistence,
    /// `[cluster]` checked and, unless taking over, this node registered.
    pub cluster: Option<(crate::cluster::Plan, Option<weir_cluster::Agent>)>,
}

/// Checks that need no loading: privileges, kernel, config, interfaces,
/// XDP slots (or, with --takeover, the program to replace and its pins),
/// bpffs and whether pins there persist, another daemon.
pub fn preflight(opts: &ServeOptions) -> Result<Preflight> {
    if weir_sys::process::euid() != 0 {
        bail!("weir serve must run as root (it loads BPF programs and attaches XDP); run it with sudo");
    }
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        bail!(
            "this kernel has no BTF (/sys/kernel/btf/vmlinux is missing); weir needs Linux >= 5.15 \
             built with CONFIG_DEBUG_INFO_BTF=y"
        );
    }
    let cfg = Config::load(&opts.config)?;
    log_warnings(&cfg);
    if let Some(b) = &cfg.bgp {
        let speaker = b.speaker.get_ref();
        if !speaker.is_file() {
            bail!(
                "bgp.speaker {} does not exist: [bgp] announces the VIPs through BIRD 2; install                  it (apt install bird2) or set bgp.speaker to its path",
                speaker.display()
            );
        }
    }
    // What the kernel would refuse, refused before anything is created.
    let host = HostFacts::read().map_err(|e| anyhow::anyhow!("reading this host's memory: {e}"))?;
    cfg.check_host(&host)?;
    let ifaces = cfg
        .dataplane
        .interfaces
        .get_ref()
        .iter()
        .map(|n| Iface::by_name(n))
        .collect::<Result<Vec<_>>>()?;
    let mode = opts.xdp_mode.unwrap_or(match cfg.dataplane.xdp_mode {
        XdpModeCfg::Native => XdpMode::Native,
        XdpModeCfg::Generic => XdpMode::Generic,
    });
    if !opts.takeover {
        takeover::refuse_busy(&ifaces)?;
    }
    let persistence = bpffs::prepare(&cfg.dataplane.pin_dir, opts.ephemeral_state)?;
    let takeover = match opts.takeover {
        true => Some(takeover::check(&cfg, &ifaces, &opts.run_dir, mode)?),
        false => None,
    };
    if let Some(rec) = RunRecord::read(&opts.run_dir)
        .ok()
        .filter(|r| !opts.takeover && weir_sys::process::alive(r.pid))
    {
        bail!(
            "another weir serve (pid {}) is running with {}; stop it first, restart with --takeover, \
             or use another --run-dir",
            rec.pid,
            rec.config.display()
        );
    }
    // Last: joining registers this node's name in etcd.
    let cluster = match crate::cluster::plan(&cfg, &opts.run_dir)? {
        Some(p) => {
            let agent = if opts.takeover { None } else { Some(p.join()?) };
            Some((p, agent))
        }
        None => None,
    };
    Ok(Preflight {
        cfg,
        ifaces,
        mode,
        takeover,
        persistence,
        cluster,
    })
}

fn load_options(cfg: &Config) -> LoadOptions {
    let dp = &cfg.dataplane;
    LoadOptions {
        tier: match dp.tier {
            Tier::Xdp => loader::Tier::Xdp,
            Tier::Software => loader::Tier::Software,
            Tier::Hybrid => loader::Tier::Hybrid,
        },
        conn_capacity: dp.conn_table_size,
        conn_capacity_v6: dp.conn_size_v6(),
        conn_lru: match dp.conn_lru {
            ConnLru::Shared => loader::ConnLru::Shared,
            ConnLru::PerCpu => loader::ConnLru::PerCpu,
        },
        half_open_capacity: dp.half_open_size(),
        fast_table_size: dp.fast_size(),
        // The configuration refuses an empty list and a repeated interface.
        interfaces: dp.interfaces.get_ref().len() as u32,
        workers: crate::tier::load_workers(cfg),
        timeouts: dp.timeouts.to_conn_timeouts(),
        max_vips: dp.max_vips,
        max_dips: dp.max_dips,
        not_vip: verdict(dp.not_vip),
        icmp: verdict(dp.icmp),
        fragments: verdict(dp.fragments),
        malformed: verdict(dp.malformed),
        nonsyn_miss: match dp.tcp_nonsyn_miss {
            NonSynMiss::Dispatch => loader::NonSynMiss::Dispatch,
            NonSynMiss::Drop => loader::NonSynMiss::Drop,
        },
        hash_seed: dp.hash_seed,
        fib_lookup: dp.fib_lookup,
        pin_dir: Some(dp.pin_dir.clone()),
        passive_telemetry: crate::live::wants_passive_telemetry(cfg),
        conn_sync: cfg
            .cluster
            .as_ref()
            .is_some_and(|c| *c.connection_sync.get_ref()),
        encap: loader::Encap {
            mtu: *dp.encap_mtu.get_ref(),
            source_v4: dp.encap_source_v4.as_ref().map(|a| *a.get_ref()),
            source_v6: dp.encap_source_v6.as_ref().map(|a| *a.get_ref()),
            gue_port: *dp.gue_port.get_ref(),
        },
        syn_budget: dp.syn_budget(),
        features: crate::program::wanted_features(cfg),
    }
}

fn log_migrated(entries: usize) {
    if entries > 0 {
        log::info!(
            "moved {entries} connection and reverse-NAT entries from an older weir's tables"
        );
    }
}

/// Removes the pins a start created when it fails before attaching; a start
/// that got as far as attaching keeps them.
struct PinsOfFailedStart<'a> {
    lb: &'a LoadedLb,
    armed: bool,
}

impl PinsOfFailedStart<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for PinsOfFailedStart<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.lb.remove_created_pins();
        }
    }
}

/// The directories a start creates (the pin directory and the run
/// directory, with any parents they lacked), removed again with all they
/// hold if the start fails: a failed start leaves no directory that was not
/// there before. What existed before is left as it was.
struct CreatedByStart {
    /// The outermost directory that did not exist yet, of each.
    dirs: Vec<PathBuf>,
    armed: bool,
}

impl CreatedByStart {
    fn note(pin_dir: &Path, run_dir: &Path) -> CreatedByStart {
        let dirs = [pin_dir, run_dir]
            .into_iter()
            .filter_map(outermost_missing)
            .collect();
        CreatedByStart { dirs, armed: true }
    }

    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for CreatedByStart {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        for dir in &self.dirs {
            match fs::remove_dir_all(dir) {
                Ok(()) => log::info!("removed {}, created by this failed start", dir.display()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => log::warn!("removing {} after the failed start: {e}", dir.display()),
            }
        }
    }
}

/// The outermost of `dir` and its parents that does not exist, if any.
fn outermost_missing(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .last()
        .map(Path::to_path_buf)
}

/// Fills the freshly loaded maps: the interfaces' slots, the configuration,
/// and the connections an older weir's tables held.
fn fill_tables(lb: &LoadedLb, ifaces: &[Iface], cfg: &Config) -> Result<Maps> {
    let maps = Maps::of(&lb.skel)?;
    // An interface's slot in the workers' socket map is its position.
    for (slot, i) in ifaces.iter().enumerate() {
        maps.put_iface_in_slot(i.ifindex, i.mac, slot as u32)?;
    }
    let report = apply(&maps, cfg)?;
    log::info!(
        "configuration applied: {} VIPs, {} new DIPs, {} tables published",
        cfg.vips.len(),
        report.dips_added,
        report.tables_published
    );
    log_migrated(lb.migrate_connections(&maps)?);
    Ok(maps)
}

/// Runs the daemon until SIGINT or SIGTERM.
pub fn serve(opts: &ServeOptions) -> Result<()> {
    // Block the signals first, so no thread started below takes them.
    let signals = SignalSet::block(&[
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGUSR1,
        libc::SIGUSR2,
    ]);

    let Preflight {
        cfg,
        ifaces,
        mode,
        takeover,
        persistence,
        cluster,
    } = preflight(opts)?;
    let pin_dir = cfg.dataplane.pin_dir.clone();
    if opts.reset_state && pin_dir.exists() {
        fs::remove_dir_all(&pin_dir)
            .with_context(|| format!("removing saved state {}", pin_dir.display()))?;
        log::info!("dropped saved state in {}", pin_dir.display());
    }
    // Until the start completes, any failure removes the directories and
    // the run record this start created; declared before the program is
    // loaded, it runs after the pins' guard below.
    let created = CreatedByStart::note(&pin_dir, &opts.run_dir);
    let lb_opts = load_options(&cfg);
    let lb = loader::load(&lb_opts)?;
    log::info!("weir_lb carries {}", lb.features);
    // Until the program is attached, any failure removes what this start
    // pinned: a failed start leaves nothing pinned.
    let start_guard = PinsOfFailedStart {
        lb: &lb,
        armed: true,
    };
    let maps = fill_tables(&lb, &ifaces, &cfg)?;
    // In a cluster, its tables and its established connections come first.
    let shared = Arc::new(Shared::default());
    let (plan, agent) = cluster.map_or((None, None), |(p, a)| (Some(p), a));
    let sync_maps = |p: &crate::cluster::Plan| {
        p.conn_sync()
            .then(|| weir_dataplane::sync_events::SyncMaps::of(&lb.skel))
            .transpose()
    };
    let mut member = match (&plan, agent) {
        (Some(p), Some(agent)) => {
            let joined = sync_maps(p)
                .and_then(|m| crate::cluster::Member::start(p, agent, m, &shared, &cfg, false));
            Some(joined.context("joining the cluster")?)
        }
        _ => None,
    };
    // The software tier's sockets are registered before XDP is attached,
    // so no packet is steered to a queue without one; a tier that cannot
    // start leaves nothing attached.
    if let Some(Takeover {
        predecessor: Predecessor::Live(p),
        ..
    }) = &takeover
    {
        if cfg.dataplane.tier != weir_config::Tier::Xdp {
            crate::tier::release_predecessor(p.pid, &opts.run_dir)?;
        }
    }
    let mut tier = crate::tier::start(&cfg, &ifaces, &maps, &opts.run_dir)
        .context("starting the software tier")?;
    let pairs: Vec<(String, u32)> = ifaces.iter().map(|i| (i.name.clone(), i.ifindex)).collect();
    // Held before a predecessor lets go of it, so a takeover withdraws nothing.
    let bgp_anchor = cfg
        .bgp
        .as_ref()
        .map(|b| crate::bgp::hold_anchor(b, &opts.run_dir, takeover.is_some()))
        .transpose()?;
    let attached = match &takeover {
        Some(t) => take_over(lb.prog_fd(), &t.held, mode),
        None => attach_all(lb.prog_fd(), &pairs, mode),
    };
    let attachment = attached?;
    start_guard.disarm();
    // A predecessor that installed connections until the swap did so in its
    // own tables.
    match lb.migrate_connections(&maps) {
        Ok(n) => log_migrated(n),
        Err(e) => log::warn!("moving an older weir's last connections: {e:#}"),
    }
    for pin in lb.drop_superseded_pins() {
        log::info!(
            "dropped {pin}: an older weir's table, replaced by this version's (what it \
             held is moved, or rebuilt, or was a handshake in progress)"
        );
    }
    prime_neighbours(&cfg);
    match takeover.map(|t| (t.predecessor, t.held[0].prog_id)) {
        Some((Predecessor::Live(p), _)) => {
            retire_predecessor(p.pid);
            log::info!("took over from pid {}", p.pid);
        }
        Some((Predecessor::Orphan(record), prog)) => log::info!(
            "adopted the orphaned weir program (id {prog}) and its state in {}{}",
            pin_dir.display(),
            record.map_or(String::new(), |r| format!(
                "; its daemon (pid {}) had died",
                r.pid
            ))
        ),
        None => {}
    }
    if let (Some(p), None) = (&plan, &member) {
        // A takeover: the predecessor has left the cluster. Its table is
        // ours, but it missed what peers sent while nobody held the sync
        // port (all since an orphan's daemon died), and peers missed what
        // the data plane installed while nobody drained its ring.
        member = match p
            .join()
            .and_then(|a| crate::cluster::Member::start(p, a, sync_maps(p)?, &shared, &cfg, true))
        {
            Ok(m) => Some(m),
            Err(e) => {
                log::warn!(
                    "cluster: not joined ({e:#}); this node serves alone until it is restarted"
                );
                None
            }
        };
    }

    fs::create_dir_all(&opts.run_dir)
        .with_context(|| format!("creating {}", opts.run_dir.display()))?;
    // The controller and the API start only now: after a takeover the
    // predecessor (its controller, its API's port) is gone, so one process
    // writes the tables. The API is up before the run record names it.
    let live = Arc::new(Live::start(
        maps,
        &opts.config,
        cfg.clone(),
        shared.clone(),
        &opts.run_dir,
    ));
    live.adopt_program(Program::new(lb_opts, lb, attachment));
    let api = crate::api::start(live.clone(), &cfg.api, &pin_dir);
    let speaker = cfg
        .bgp
        .clone()
        .zip(bgp_anchor)
        .map(|(b, anchor)| crate::bgp::Speaker::start(live.clone(), b, anchor));
    let record = RunRecord {
        pid: std::process::id(),
        config: fs::canonicalize(&opts.config).unwrap_or(opts.config.clone()),
        pin_dir: pin_dir.clone(),
        interfaces: pairs.iter().map(|(n, _)| n.clone()).collect(),
        api: api.as_ref().map(|s| s.addr),
    };
    fs::write(
        RunRecord::path(&opts.run_dir),
        serde_json::to_vec_pretty(&record)?,
    )?;
    created.disarm();
    log::info!(
        "serving on {} ({mode} XDP), {}",
        record.interfaces.join(", "),
        match persistence {
            Persistence::Persistent => format!("state pinned in {}", pin_dir.display()),
            Persistence::Ephemeral => format!(
                "state in {} is NOT persistent: it lives in this process's private mount \
                 namespace and goes away when it exits",
                pin_dir.display()
            ),
        }
    );

    let timeouts = cfg.dataplane.timeouts.to_conn_timeouts();
    let _sweeper = crate::sweeper::Sweeper::start(&pin_dir, timeouts)
        .map_err(|e| log::warn!("connection sweeper not started: {e:#}"))
        .ok();
    // Each DIP's next hop in its slot: what a packet would ask the FIB for,
    // resolved once per change instead (fib_lookup off: configured MACs only;
    // the software tier's workers resolve their own).
    let resolve_next_hops =
        cfg.dataplane.fib_lookup && cfg.dataplane.tier != weir_config::Tier::Software;
    let _next_hops = resolve_next_hops
        .then(|| {
            let held = ifaces
                .iter()
                .map(|i| (i.name.clone(), (i.ifindex, i.mac)))
                .collect();
            crate::nexthops::NextHops::start(&pin_dir, held, shared.table_lock.clone())
                .map_err(|e| log::warn!("next-hop resolver not started: {e:#}"))
                .ok()
        })
        .flatten();
    let _metrics = cfg.metrics.as_ref().and_then(|m| {
        let addr = *m.listen.get_ref();
        match crate::metrics::serve(addr, live.clone(), &pin_dir) {
            Ok(s) => {
                log::info!("metrics on http://{addr}/metrics");
                Some(s)
            }
            Err(e) => {
                log::warn!("metrics endpoint not started: {e:#}");
                None
            }
        }
    });

    let mut handed_over = false;
    let mut watch = match live.program_id() {
        Some(id) => Some(crate::xdp_watch::Watch::new(id, &opts.run_dir)),
        None => {
            log::warn!("not watching the XDP attachment (the program's id is unknown)");
            None
        }
    };
    let mut targets = crate::redirect_targets::Watch::new(mode == XdpMode::Native, &opts.run_dir);
    let mut targets_due = std::time::Instant::now();
    loop {
        if let Some(w) = &mut watch {
            // A change may have swapped in a program with more features.
            if let Some(id) = live.program_id() {
                w.follow(id);
            }
            w.check(&pairs);
        }
        if std::time::Instant::now() >= targets_due {
            targets.check(&pairs);
            targets_due += crate::redirect_targets::CHECK_EVERY;
        }
        match signals.wait_timeout(Duration::from_secs(1)) {
            Some(libc::SIGHUP) => {
                // Logged either way; a refused file leaves the running one.
                let _ = live.reload();
            }
            Some(libc::SIGINT | libc::SIGTERM) => break,
            Some(libc::SIGUSR1) => {
                handed_over = true;
                break;
            }
            // A successor takes over: it needs the interfaces' queues for
            // its own sockets before it swaps the program in.
            Some(libc::SIGUSR2) if tier.take().is_some() => {
                // The successor swaps its program in next: not a loss.
                watch = None;
                log::info!("released the software tier's sockets to a successor");
            }
            _ => {}
        }
    }
    // Routers stop sending before the program is detached.
    if let Some(s) = speaker {
        s.stop(handed_over);
    }
    drop(api);
    live.stop();
    // Leaving the cluster revokes the lease: another node leads at once.
    drop(member);
    if handed_over {
        // The successor already runs its program on our interfaces and owns
        // the run record.
        if let Some(p) = live.take_program() {
            p.leave_attached();
        }
        log::info!("handed the data plane over to a successor; exiting");
        return Ok(());
    }
    drop(live.take_program());
    // `weir status` after the stop still finds the pins of this run.
    if let Err(e) = RunRecord::retire(&opts.run_dir) {
        log::warn!("keeping the run record as the last run's: {e}");
    }
    log::info!(
        "{}",
        match persistence {
            Persistence::Persistent => format!(
                "detached; connection state stays pinned in {} for the next start",
                pin_dir.display()
            ),
            Persistence::Ephemeral => {
                "detached; the connection state was not persistent and goes away now".to_string()
            }
        }
    );
    Ok(())
}

/// Tells the daemon we replaced to exit without detaching, and waits.
fn retire_predecessor(pid: u32) {
    if let Err(e) = weir_sys::process::send_signal(pid, libc::SIGUSR1) {
        log::warn!("telling predecessor pid {pid} to exit: {e}");
        return;
    }
    for _ in 0..200 {
        if !running(pid) {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    log::warn!("predecessor pid {pid} did not exit within 5 s");
}

/// Whether process `pid` still runs: a zombie has exited, whenever its
/// parent reaps it (a supervisor that waits for this start to complete
/// first would otherwise hold the takeover, and the node's connection sync
/// with it, for the full wait).
fn running(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses and
        // may itself hold any character.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| !matches!(state, 'Z' | 'X')),
        Err(_) => weir_sys::process::alive(pid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exited_child_not_yet_reaped_does_not_run() {
        assert!(running(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let zombie = || {
            fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
        };
        for _ in 0..500 {
            if zombie() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(zombie(), "the child never exited");
        assert!(weir_sys::process::alive(pid), "a zombie still exists");
        assert!(!running(pid));
        child.wait().unwrap();
        assert!(!running(pid));
    }
}
