//! Running `weir serve` inside the lab's load-balancer namespace, with a
//! private pin directory and run directory that are removed afterwards.
//!
//! The daemon enters only the lab's network namespace (setns, as `nsenter
//! --net=/run/netns/NS` does) and stays in the host's mount namespace, so its
//! pins outlive it and a `--takeover` finds them. `ip netns exec` would give
//! it a private mount namespace; [`Daemon::start_via_ip_netns_exec`] does
//! that on purpose, for tests of what weir does about it.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// How the daemon enters the lab's namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Launch {
    /// setns(2) into the network namespace only.
    NetNs,
    /// `ip netns exec`: also a private mount namespace (ip execs weir, so
    /// the child's pid is weir's).
    IpNetnsExec,
}

/// A `weir serve` child process.
pub struct Daemon {
    exe: PathBuf,
    ns: String,
    pub dir: PathBuf,
    pub pin_dir: PathBuf,
    child: Option<Child>,
    log_offset: u64,
}

impl Daemon {
    /// Prepares (does not start) a daemon for namespace `ns`.
    pub fn new(exe: &Path, ns: &str) -> Result<Daemon> {
        let dir = std::env::temp_dir().join(format!("weir-lab-{ns}"));
        fs::create_dir_all(&dir)?;
        Ok(Daemon {
            exe: exe.to_path_buf(),
            ns: ns.to_string(),
            pin_dir: PathBuf::from(format!("/sys/fs/bpf/weir-lab-{ns}")),
            dir,
            child: None,
            log_offset: 0,
        })
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.join("weir.toml")
    }

    pub fn run_dir(&self) -> PathBuf {
        self.dir.join("run")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("weir.log")
    }

    /// Writes the configuration, pointing its pin_dir at the lab's own.
    pub fn write_config(&self, text: &str) -> Result<()> {
        let pinned = text.replacen(
            "[dataplane]",
            &format!("[dataplane]\npin_dir = \"{}\"", self.pin_dir.display()),
            1,
        );
        fs::write(self.config_path(), pinned).context("writing the lab config")
    }

    /// Starts `weir serve` and waits until it serves (or fails).
    pub fn start(&mut self) -> Result<()> {
        if self.child.is_some() {
            bail!("already running");
        }
        self.spawn(Launch::NetNs, &[])
    }

    /// Starts `weir serve --takeover` with no daemon of ours running: it
    /// adopts the orphaned program that [`Daemon::kill`] left.
    pub fn adopt(&mut self) -> Result<()> {
        if self.child.is_some() {
            bail!("already running");
        }
        self.spawn(Launch::NetNs, &["--takeover"])
    }

    /// Starts `weir serve --ephemeral-state` under `ip netns exec`, in a
    /// mount namespace of its own where its pins are private.
    pub fn start_via_ip_netns_exec(&mut self) -> Result<()> {
        if self.child.is_some() {
            bail!("already running");
        }
        self.spawn(Launch::IpNetnsExec, &["--ephemeral-state"])
    }

    /// SIGKILL and reap, as a crash would: the XDP program stays attached
    /// and goes on forwarding with nobody holding it (an orphan).
    pub fn kill(&mut self) -> Result<()> {
        let mut child = self.child.take().context("not running")?;
        child.kill()?;
        child.wait()?;
        Ok(())
    }

    /// Restarts without a gap: a new daemon takes the data plane over from
    /// the running one (`weir serve --takeover`), which then exits.
    pub fn restart(&mut self) -> Result<()> {
        let mut old = self.child.take().context("not running")?;
        if let Err(e) = self.spawn(Launch::NetNs, &["--takeover"]) {
            self.child = Some(old);
            return Err(e);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while old.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = old.kill();
                bail!("the old weir serve did not exit after the takeover");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn spawn(&mut self, launch: Launch, extra: &[&str]) -> Result<()> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        self.log_offset = log.metadata()?.len();
        let netns = File::open(format!("/run/netns/{}", self.ns))?;
        let mut cmd = match launch {
            Launch::NetNs => Command::new(&self.exe),
            Launch::IpNetnsExec => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &self.ns]).arg(&self.exe);
                c
            }
        };
        cmd.arg("serve")
            .arg("--config")
            .arg(self.config_path())
            .arg("--run-dir")
            .arg(self.run_dir())
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if launch == Launch::NetNs {
            weir_sys::process::ChildSetup {
                netns: Some(netns),
                ..Default::default()
            }
            .apply_to(&mut cmd)?;
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", self.exe.display()))?;
        // The namespace's descriptor closes with the command.
        drop(cmd);
        self.child = Some(child);
        let record = self.run_dir().join("serve.json");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait()? {
                self.child = None;
                bail!(
                    "weir serve exited ({status}) during startup:\n{}",
                    self.new_log()
                );
            }
            if let Ok(text) = fs::read_to_string(&record) {
                if text.contains(&format!("\"pid\": {}", self.pid().unwrap_or(0))) {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!("weir serve did not come up in 20 s:\n{}", self.new_log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Log lines written since the last start.
    pub fn new_log(&self) -> String {
        let text = fs::read_to_string(self.log_path()).unwrap_or_default();
        text.get(self.log_offset as usize..)
            .unwrap_or("")
            .to_string()
    }

    /// Rewrites the configuration and asks the daemon to reload it; waits
    /// for its answer in the log.
    pub fn reload(&mut self, text: &str) -> Result<String> {
        let pid = self.pid().context("not running")?;
        let before = self.new_log().len();
        self.write_config(text)?;
        weir_sys::process::send_signal(pid, libc::SIGHUP)
            .with_context(|| format!("sending SIGHUP to weir serve (pid {pid})"))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.new_log();
            let fresh = &log[before.min(log.len())..];
            if fresh.contains("reloaded")
                || fresh.contains("reload refused")
                || fresh.contains("reload failed")
            {
                return Ok(fresh.to_string());
            }
            if Instant::now() > deadline {
                bail!("no answer to SIGHUP in 10 s:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM and wait; the pinned state stays.
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        weir_sys::process::send_signal(child.id(), libc::SIGTERM)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                bail!("weir serve ignored SIGTERM for 10 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// `weir status --json` of this daemon.
    pub fn status_json(&self) -> Result<serde_json::Value> {
        let out = Command::new(&self.exe)
            .args(["status", "--json", "--run-dir"])
            .arg(self.run_dir())
            .arg("--pin-dir")
            .arg(&self.pin_dir)
            .output()?;
        if !out.status.success() {
            bail!("weir status: {}", String::from_utf8_lossy(&out.stderr));
        }
        serde_json::from_slice(&out.stdout).context("weir status --json output")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.stop();
        let _ = fs::remove_dir_all(&self.pin_dir);
        let _ = fs::remove_dir_all(&self.dir);
    }
}
