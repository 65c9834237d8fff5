//! The BPF filesystem that holds weir's pins, and whether those pins outlive
//! the daemon.
//!
//! A pin lives as long as its bpffs is mounted, and a bpffs is seen only by
//! the mount namespaces it is mounted in. `ip netns exec` runs its command
//! in a mount namespace of its own with a fresh /sys, where /sys/fs/bpf is
//! an empty sysfs directory: a bpffs mounted there is private to that
//! namespace and unmounted when its last process exits, taking the
//! connection state along. So weir pins only where the host's mount
//! namespace (init's) sees the same filesystem, unless told that state may
//! be ephemeral.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};

/// The conventional mount point of the BPF filesystem.
pub const BPFFS: &str = "/sys/fs/bpf";

/// Whether the pinned state outlives this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// The host's mount namespace sees the pins: the next daemon finds them.
    Persistent,
    /// Only this process's mount namespace sees them; they go with it.
    Ephemeral,
}

/// Makes sure `pin_dir` lies on a BPF filesystem (mounting one on
/// /sys/fs/bpf when that is where it belongs and none is there) and says
/// whether pins there outlive this process. A filesystem that only a
/// private mount namespace sees is refused unless `allow_ephemeral`.
pub fn prepare(pin_dir: &Path, allow_ephemeral: bool) -> Result<Persistence> {
    let parent = pin_dir.parent().unwrap_or(Path::new("/"));
    let ns = MountNs::compare();
    if let MountNs::Unknown(why) = &ns {
        log::info!(
            "cannot tell whether this is the host's mount namespace ({why}); if it is a private \
             one (ip netns exec), the state pinned in {} goes away when weir exits",
            pin_dir.display()
        );
    }
    let private = matches!(ns, MountNs::Other { .. });
    if !is_bpffs(parent) && parent == Path::new(BPFFS) {
        if private && !allow_ephemeral {
            bail!(
                "{BPFFS} is no BPF filesystem here and weir runs in a mount namespace of its own \
                 ({}), as under `ip netns exec`: a BPF filesystem it mounted would vanish with the \
                 process, and the connection state pinned in {} with it (a restart or --takeover \
                 would reset every connection); {}",
                ns,
                pin_dir.display(),
                remedy()
            );
        }
        // What systemd does at boot; some minimal systems skip it.
        mount_bpffs()?;
        log::info!("mounted a BPF filesystem on {BPFFS}");
    }
    if !is_bpffs(parent) {
        bail!(
            "{} is not a BPF filesystem, so weir cannot pin its state there; mount one with \
             `mount -t bpf bpf {}` or set dataplane.pin_dir",
            parent.display(),
            parent.display()
        );
    }
    let MountNs::Other { host_root, .. } = &ns else {
        return Ok(Persistence::Persistent);
    };
    if same_file(
        parent,
        &host_root.join(parent.strip_prefix("/").unwrap_or(parent)),
    ) {
        // A namespace of its own (a sandboxed systemd unit, say) that shares
        // the host's bpffs: pins there persist.
        return Ok(Persistence::Persistent);
    }
    if !allow_ephemeral {
        bail!(
            "{} is a BPF filesystem that only this mount namespace sees ({ns}), as under \
             `ip netns exec`: the connection state pinned in {} would vanish with the process (a \
             restart or --takeover would reset every connection); {}",
            parent.display(),
            pin_dir.display(),
            remedy()
        );
    }
    Ok(Persistence::Ephemeral)
}

/// What to run instead, naming the network namespace when it has a name.
fn remedy() -> String {
    let netns = netns_name().unwrap_or_else(|| "NAME".to_string());
    format!(
        "start it with `nsenter --net=/run/netns/{netns} weir serve ...`, which enters only the \
         network namespace, or pass --ephemeral-state to run without persistent state"
    )
}

/// This process's mount namespace next to the host's.
#[derive(Debug)]
enum MountNs {
    Host,
    Other {
        ours: String,
        host: String,
        /// The host's root directory, seen through its init task.
        host_root: PathBuf,
    },
    Unknown(String),
}

impl MountNs {
    /// Compares /proc/self/ns/mnt with init's. Where init's is unreadable
    /// (an init that is not dumpable), kthreadd's stands in: kernel threads
    /// live in the initial namespaces.
    fn compare() -> MountNs {
        let ours = match fs::read_link("/proc/self/ns/mnt") {
            Ok(l) => l.to_string_lossy().into_owned(),
            Err(e) => return MountNs::Unknown(format!("reading /proc/self/ns/mnt: {e}")),
        };
        let init = fs::read_link("/proc/1/ns/mnt").map(|l| (l, "/proc/1"));
        let (host, task) = match init.or_else(|e| kthreadd_mnt_ns().ok_or(e)) {
            Ok((l, task)) => (l.to_string_lossy().into_owned(), task),
            Err(e) => return MountNs::Unknown(format!("reading /proc/1/ns/mnt: {e}")),
        };
        if ours == host {
            return MountNs::Host;
        }
        MountNs::Other {
            ours,
            host,
            host_root: PathBuf::from(task).join("root"),
        }
    }
}

impl std::fmt::Display for MountNs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MountNs::Host => f.write_str("the host's mount namespace"),
            MountNs::Other { ours, host, .. } => write!(f, "{ours}; the host's is {host}"),
            MountNs::Unknown(why) => f.write_str(why),
        }
    }
}

/// kthreadd's mount namespace, if pid 2 is kthreadd (parent 0) and readable.
fn kthreadd_mnt_ns() -> Option<(PathBuf, &'static str)> {
    let stat = fs::read_to_string("/proc/2/stat").ok()?;
    // "2 (kthreadd) S 0 ...": the parent pid follows the state.
    let rest = stat.strip_prefix("2 (kthreadd) ")?;
    if rest.split_whitespace().nth(1) != Some("0") {
        return None;
    }
    Some((fs::read_link("/proc/2/ns/mnt").ok()?, "/proc/2"))
}

/// Both paths name the same file (same device and inode).
fn same_file(a: &Path, b: &Path) -> bool {
    match (fs::metadata(a), fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// The name under /run/netns of this process's network namespace, if any.
fn netns_name() -> Option<String> {
    let ours = fs::metadata("/proc/self/ns/net").ok()?;
    fs::read_dir("/run/netns")
        .ok()?
        .flatten()
        .find(|e| {
            e.metadata()
                .is_ok_and(|m| m.dev() == ours.dev() && m.ino() == ours.ino())
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
}

fn mount_bpffs() -> Result<()> {
    weir_sys::fs::mount_bpffs(Path::new(BPFFS), "mode=0700").map_err(|e| {
        anyhow!(
            "{BPFFS} is not a BPF filesystem and mounting one failed: {e}; mount it with \
             `mount -t bpf bpf {BPFFS}`"
        )
    })
}

/// Whether this process runs in a mount namespace other than the host's
/// (as under `ip netns exec`); `None` when that cannot be told.
pub fn in_private_mount_ns() -> Option<bool> {
    match MountNs::compare() {
        MountNs::Host => Some(false),
        MountNs::Other { .. } => Some(true),
        MountNs::Unknown(_) => None,
    }
}

/// Whether `dir` lies on a BPF filesystem.
pub fn is_bpffs(dir: &Path) -> bool {
    weir_sys::fs::is_bpffs(dir).unwrap_or(false)
}
