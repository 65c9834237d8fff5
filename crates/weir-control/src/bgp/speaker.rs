//! The thread that keeps BIRD announcing what the gate allows: it starts
//! BIRD (or adopts the one a previous weir left), rewrites its
//! configuration when the announced set changes, reads the sessions' and
//! BFD's state, and publishes what it found.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use weir_config::BgpCfg;
use weir_sys::TunAnchor;

use super::bird_conf::{render, session_name, Announce};
use super::control::{bfd_sessions, protocols, Control};
use super::gate::{decide, to_announce, NodeState};
use super::{dir, drained, BgpView, NeighbourState, ANCHOR, REPORT};
use crate::live::Live;
use crate::run_report::publish_json;

/// How often the gate is evaluated: a failed DIP or a drain is withdrawn
/// within this of the health checker's verdict.
const PERIOD: Duration = Duration::from_millis(200);
/// How often the sessions' state is read from BIRD.
const STATE_EVERY: Duration = Duration::from_secs(1);
/// How long to wait before starting a speaker that failed again.
const RESTART_AFTER: Duration = Duration::from_secs(3);

struct Paths {
    conf: PathBuf,
    socket: PathBuf,
    pid: PathBuf,
    log: PathBuf,
}

impl Paths {
    fn of(run_dir: &Path) -> Paths {
        let d = dir(run_dir);
        Paths {
            conf: d.join("bird.conf"),
            socket: d.join("bird.ctl"),
            pid: d.join("bird.pid"),
            log: d.join("bird.log"),
        }
    }
}

/// Holds the anchor device. On a fresh start, a speaker left by a weir that
/// died is first told to announce nothing, so that it does not announce
/// the dead daemon's VIPs again the moment the anchor is back.
pub fn hold_anchor(cfg: &BgpCfg, run_dir: &Path, taking_over: bool) -> Result<TunAnchor> {
    if !taking_over {
        let p = Paths::of(run_dir);
        if let Ok(mut c) = Control::connect(&p.socket) {
            fs::write(&p.conf, render(cfg, ANCHOR, &Announce::default(), &p.log))?;
            c.run("configure")
                .context("withdrawing what the speaker of a previous weir announced")?;
            log::info!("bgp: adopted the speaker a previous weir left running");
        }
    }
    TunAnchor::hold(ANCHOR).with_context(|| {
        format!(
            "creating the TUN device {ANCHOR} that the VIP routes go through (needs \
             /dev/net/tun: modprobe tun)"
        )
    })
}

/// The speaker's thread; [`Speaker::stop`] ends it.
pub struct Speaker {
    stop: Arc<AtomicBool>,
    handover: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    _anchor: TunAnchor,
}

impl Speaker {
    pub fn start(live: Arc<Live>, cfg: BgpCfg, anchor: TunAnchor) -> Speaker {
        let stop = Arc::new(AtomicBool::new(false));
        let handover = Arc::new(AtomicBool::new(false));
        let (s, h) = (stop.clone(), handover.clone());
        let thread = std::thread::Builder::new()
            .name("weir-bgp".into())
            .spawn(move || Loop::new(live, cfg).run(&s, &h))
            .expect("spawning the BGP speaker's thread");
        Speaker {
            stop,
            handover,
            thread: Some(thread),
            _anchor: anchor,
        }
    }

    /// Stops the thread. Without `handover`, BIRD closes its sessions and
    /// exits (the routers withdraw this node's VIPs at once); with it, BIRD
    /// runs on for the successor, which holds the anchor already.
    pub fn stop(mut self, handover: bool) {
        self.handover.store(handover, Ordering::Relaxed);
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Loop {
    live: Arc<Live>,
    cfg: BgpCfg,
    run_dir: PathBuf,
    paths: Paths,
    control: Option<Control>,
    /// What BIRD's configuration announces now (None: not configured yet).
    applied: Option<Announce>,
    next_start: Instant,
    view: BgpView,
}

impl Loop {
    fn new(live: Arc<Live>, cfg: BgpCfg) -> Loop {
        let run_dir = live.run_dir().to_path_buf();
        let view = BgpView {
            local_as: *cfg.local_as.get_ref(),
            router_id: cfg.router_id.get_ref().to_string(),
            ..BgpView::default()
        };
        Loop {
            paths: Paths::of(&run_dir),
            live,
            cfg,
            run_dir,
            control: None,
            applied: None,
            next_start: Instant::now(),
            view,
        }
    }

    fn run(mut self, stop: &AtomicBool, handover: &AtomicBool) {
        if let Err(e) = fs::create_dir_all(dir(&self.run_dir)) {
            log::warn!("bgp: creating {}: {e}", dir(&self.run_dir).display());
        }
        let mut state_due = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            self.tick();
            if Instant::now() >= state_due {
                self.read_sessions();
                state_due = Instant::now() + STATE_EVERY;
            }
            self.view.at_unix_ms = crate::api::view::unix_ms();
            publish_json(&REPORT.file(&self.run_dir), &self.view);
            std::thread::sleep(PERIOD);
        }
        if handover.load(Ordering::Relaxed) {
            return;
        }
        self.shut_down();
    }

    fn node_state(&self) -> NodeState {
        let running = self.live.running();
        let n = self.cfg.neighbours.get_ref();
        NodeState {
            drained: drained(&self.run_dir),
            detached: crate::xdp_watch::REPORT
                .read(&self.run_dir)
                .unwrap_or_default()
                .into_iter()
                .find(|i| !i.attached)
                .map(|i| i.interface),
            v4_neighbour: n.iter().any(|n| n.address.get_ref().is_ipv4()),
            v6_neighbour: n.iter().any(|n| n.address.get_ref().is_ipv6()),
            // The keys of [bgp] a reload changes.
            min_healthy_dips: running
                .bgp
                .as_ref()
                .map_or(*self.cfg.min_healthy_dips.get_ref(), |b| {
                    *b.min_healthy_dips.get_ref()
                }),
            drain: *running.bgp.as_ref().unwrap_or(&self.cfg).drain.get_ref(),
        }
    }

    fn tick(&mut self) {
        let node = self.node_state();
        let running = self.live.running();
        let snap = self.live.shared().snapshot();
        let vips = decide(&running, snap.as_ref(), &node);
        let want = to_announce(&vips);
        self.view.drained = node.drained;
        if self.control.is_none() && Instant::now() >= self.next_start {
            match self.connect_or_start(&want) {
                Ok(c) => {
                    self.control = Some(c);
                    self.view.speaker_error = None;
                }
                Err(e) => {
                    let msg = format!("{e:#}");
                    if self.view.speaker_error.as_deref() != Some(&msg) {
                        log::warn!(
                            "bgp: the speaker does not run: {msg}; retrying every {}s",
                            RESTART_AFTER.as_secs()
                        );
                    }
                    self.view.speaker_error = Some(msg);
                    self.next_start = Instant::now() + RESTART_AFTER;
                }
            }
        }
        if self.control.is_some() && self.applied.as_ref() != Some(&want) {
            match self.configure(&want) {
                Ok(()) => {
                    log_changes(&self.view.vips, &vips);
                    self.applied = Some(want);
                }
                Err(e) => {
                    log::warn!("bgp: reconfiguring the speaker: {e:#}");
                    self.view.speaker_error = Some(format!("{e:#}"));
                    self.lost_speaker();
                }
            }
        }
        // What is shown is what BIRD was told.
        let applied = self.applied.clone().unwrap_or_default();
        self.view.vips = vips
            .into_iter()
            .map(|mut v| {
                if v.announced
                    && !applied
                        .addresses
                        .iter()
                        .any(|a| v.prefix.starts_with(&format!("{a}/")))
                {
                    v.announced = false;
                    v.why_not = Some("the speaker does not run".into());
                }
                v.depreferred &= v.announced && applied.depreferred;
                v
            })
            .collect();
    }

    fn lost_speaker(&mut self) {
        self.control = None;
        self.applied = None;
        self.view.speaker_pid = None;
        self.next_start = Instant::now() + RESTART_AFTER;
    }

    fn configure(&mut self, want: &Announce) -> Result<()> {
        fs::write(
            &self.paths.conf,
            render(&self.cfg, super::ANCHOR, want, &self.paths.log),
        )
        .with_context(|| format!("writing {}", self.paths.conf.display()))?;
        let c = self.control.as_mut().expect("connected");
        c.run("configure")?;
        Ok(())
    }

    /// Adopts a running BIRD on our socket, or starts one.
    fn connect_or_start(&mut self, want: &Announce) -> Result<Control> {
        if let Ok(c) = Control::connect(&self.paths.socket) {
            self.view.speaker_pid = read_pid(&self.paths.pid);
            // Configured by the caller: `applied` is unknown.
            self.applied = None;
            return Ok(c);
        }
        let speaker = self.cfg.speaker.get_ref();
        fs::write(
            &self.paths.conf,
            render(&self.cfg, super::ANCHOR, want, &self.paths.log),
        )
        .with_context(|| format!("writing {}", self.paths.conf.display()))?;
        // BIRD checks its configuration, then goes to the background: it
        // outlives this process, so that a takeover keeps the sessions up.
        let out = Command::new(speaker)
            .arg("-c")
            .arg(&self.paths.conf)
            .arg("-s")
            .arg(&self.paths.socket)
            .arg("-P")
            .arg(&self.paths.pid)
            .output()
            .with_context(|| {
                format!(
                    "running {} (install BIRD 2: apt install bird2)",
                    speaker.display()
                )
            })?;
        if !out.status.success() {
            bail!(
                "{} refused to start ({}): {}",
                speaker.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match Control::connect(&self.paths.socket) {
                Ok(c) => {
                    self.view.speaker_pid = read_pid(&self.paths.pid);
                    // Configured again by the caller, which logs what it announces.
                    self.applied = None;
                    log::info!(
                        "bgp: started {} (pid {}) with {} neighbours",
                        speaker.display(),
                        self.view.speaker_pid.unwrap_or(0),
                        self.cfg.neighbours.get_ref().len()
                    );
                    return Ok(c);
                }
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    fn read_sessions(&mut self) {
        let Some(c) = self.control.as_mut() else {
            self.view.neighbours.clear();
            return;
        };
        let protos = match c.run("show protocols") {
            Ok(lines) => protocols(&lines),
            Err(e) => {
                log::warn!("bgp: the speaker stopped answering ({e:#}); starting it again");
                self.view.speaker_error = Some(format!("{e:#}"));
                self.lost_speaker();
                return;
            }
        };
        let any_bfd = self
            .cfg
            .neighbours
            .get_ref()
            .iter()
            .any(|n| *n.bfd.get_ref());
        let bfd = if any_bfd {
            c.run("show bfd sessions")
                .map(|l| bfd_sessions(&l))
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let states: Vec<NeighbourState> = self
            .cfg
            .neighbours
            .get_ref()
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let addr = *n.address.get_ref();
                let p = protos.iter().find(|p| p.name == session_name(i));
                let (session, detail) = match p {
                    Some(p) => {
                        let mut words = p.info.splitn(2, ' ');
                        let s = words.next().filter(|s| !s.is_empty()).unwrap_or(&p.state);
                        (s.to_string(), words.next().unwrap_or("").trim().to_string())
                    }
                    None => ("Unknown".to_string(), String::new()),
                };
                NeighbourState {
                    address: addr.to_string(),
                    remote_as: *n.remote_as.get_ref(),
                    established: session == "Established",
                    session,
                    bfd: n.bfd.get_ref().then(|| {
                        bfd.iter()
                            .find(|(a, _)| *a == addr)
                            .map_or("Down".to_string(), |(_, s)| s.clone())
                    }),
                    detail,
                }
            })
            .collect();
        for (new, old) in states.iter().map(|s| {
            (
                s,
                self.view.neighbours.iter().find(|o| o.address == s.address),
            )
        }) {
            let was = old.map(|o| (o.session.as_str(), o.bfd.as_deref()));
            if was != Some((new.session.as_str(), new.bfd.as_deref())) {
                let bfd = new
                    .bfd
                    .as_ref()
                    .map_or(String::new(), |b| format!(", BFD {b}"));
                let detail = if new.detail.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", new.detail)
                };
                if new.established {
                    log::info!(
                        "bgp: neighbour {} (AS {}) Established{bfd}",
                        new.address,
                        new.remote_as
                    );
                } else {
                    log::warn!(
                        "bgp: neighbour {} (AS {}) is {}{detail}{bfd}; the speaker keeps trying",
                        new.address,
                        new.remote_as,
                        new.session
                    );
                }
            }
        }
        self.view.neighbours = states;
    }

    /// A clean stop: BIRD closes every session (a Cease the routers act
    /// on at once) and exits.
    fn shut_down(&mut self) {
        let Some(mut c) = self.control.take() else {
            return;
        };
        let pid = read_pid(&self.paths.pid);
        if let Err(e) = c.run("down") {
            // "down" ends with BIRD closing the socket mid-reply.
            log::debug!("bgp: stopping the speaker: {e:#}");
        }
        if let Some(pid) = pid {
            let deadline = Instant::now() + Duration::from_secs(3);
            while weir_sys::process::alive(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        log::info!("bgp: withdrew every VIP and stopped the speaker");
        self.view.vips.iter_mut().for_each(|v| {
            v.announced = false;
            v.why_not = Some("weir serve stopped".into());
        });
        self.view.neighbours.clear();
        self.view.speaker_pid = None;
        publish_json(&REPORT.file(&self.run_dir), &self.view);
    }
}

fn read_pid(path: &Path) -> Option<u32> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn log_changes(before: &[super::VipAnnouncement], after: &[super::VipAnnouncement]) {
    for a in after {
        let was = before
            .iter()
            .find(|b| b.name == a.name)
            .is_some_and(|b| b.announced);
        let was_depreferred = before
            .iter()
            .find(|b| b.name == a.name)
            .is_some_and(|b| b.depreferred);
        match (was, a.announced) {
            (false, true) | (true, true) if a.depreferred && !was_depreferred => log::warn!(
                "bgp: announcing VIP `{}` ({}) de-preferred (GRACEFUL_SHUTDOWN, longer AS \
                 path): this node is drained",
                a.name,
                a.prefix
            ),
            (true, true) if was_depreferred && !a.depreferred => log::info!(
                "bgp: announcing VIP `{}` ({}) as preferred as the other nodes' again",
                a.name,
                a.prefix
            ),
            (false, true) => log::info!("bgp: announcing VIP `{}` ({})", a.name, a.prefix),
            (true, false) => log::warn!(
                "bgp: withdrawing VIP `{}` ({}): {}",
                a.name,
                a.prefix,
                a.why_not.as_deref().unwrap_or("")
            ),
            _ => {}
        }
    }
}
