//! Network namespaces and veth links that a lab creates and always removes.
//!
//! Names are unique per process and lab (`w<pid>-<n>-<role>`), every
//! namespace is registered for teardown, and teardown runs on drop (also
//! when a test panics) and on SIGINT/SIGTERM (see [`install_signal_teardown`]).
//! Addresses exist only inside these namespaces.

use std::fs::File;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use weir_sys::SignalSet;

static NEXT_LAB: AtomicUsize = AtomicUsize::new(0);
/// Every namespace alive in this process, for teardown on a signal.
static LIVE: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Runs `ip` with arguments; an error quotes the command and its stderr.
pub fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip (install iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// `ip -n <ns> ...`
pub fn ip_in(ns: &str, args: &[&str]) -> Result<()> {
    let mut full = vec!["-n", ns];
    full.extend_from_slice(args);
    ip(&full)
}

/// Sets a sysctl inside a namespace.
pub fn sysctl_in(ns: &str, key: &str, value: &str) -> Result<()> {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "sysctl",
            "-qw",
            &format!("{key}={value}"),
        ])
        .output()
        .context("running sysctl in a namespace")?;
    if !out.status.success() {
        bail!(
            "sysctl {key}={value} in {ns}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// A set of namespaces owned by one lab; removed on drop.
pub struct NamespaceSet {
    prefix: String,
    names: Vec<String>,
}

impl NamespaceSet {
    pub fn new() -> NamespaceSet {
        let n = NEXT_LAB.fetch_add(1, Ordering::SeqCst);
        NamespaceSet {
            prefix: format!("w{}-{n}", std::process::id()),
            names: Vec::new(),
        }
    }

    /// Creates namespace `<prefix>-<role>` with loopback up.
    pub fn add(&mut self, role: &str) -> Result<String> {
        let name = format!("{}-{role}", self.prefix);
        ip(&["netns", "add", &name])?;
        LIVE.lock().unwrap().push(name.clone());
        self.names.push(name.clone());
        ip_in(&name, &["link", "set", "lo", "up"])?;
        Ok(name)
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Removes every namespace (their veths go with them).
    pub fn teardown(&mut self) {
        for name in self.names.drain(..) {
            let _ = ip(&["netns", "del", &name]);
            LIVE.lock().unwrap().retain(|n| n != &name);
        }
    }
}

impl Default for NamespaceSet {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for NamespaceSet {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// Creates a veth pair with one end in each namespace.
pub fn veth(ns_a: &str, name_a: &str, ns_b: &str, name_b: &str) -> Result<()> {
    ip(&[
        "link", "add", name_a, "netns", ns_a, "type", "veth", "peer", "name", name_b, "netns", ns_b,
    ])
}

/// Moves the calling thread into a namespace (network namespaces are per
/// thread), for servers and clients that run as threads of the lab.
pub fn enter(ns: &str) -> Result<()> {
    let f = File::open(format!("/run/netns/{ns}"))
        .with_context(|| format!("opening namespace {ns}"))?;
    weir_sys::namespaces::enter_netns(&f).with_context(|| format!("entering namespace {ns}"))
}

/// On SIGINT or SIGTERM, remove every live namespace and exit 130. Call once
/// from the main thread before starting other threads.
pub fn install_signal_teardown() {
    // Blocked here, so every thread started later leaves them to this one.
    let signals = SignalSet::block(&[libc::SIGINT, libc::SIGTERM]);
    std::thread::spawn(move || {
        signals.wait();
        eprintln!("weir-lab: interrupted, removing namespaces");
        for name in LIVE.lock().unwrap().drain(..) {
            let _ = ip(&["netns", "del", &name]);
        }
        std::process::exit(130);
    });
}
