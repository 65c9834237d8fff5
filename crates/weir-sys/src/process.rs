//! Processes and threads: who we run as, signals to other processes,
//! scheduling class, and what a child does between fork and exec.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// This process's effective user id (0: root).
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The calling thread's id (what /proc/<pid>/task lists).
pub fn current_tid() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() as u32 }
}

/// Sends `sig` to process `pid`.
pub fn send_signal(pid: u32, sig: libc::c_int) -> io::Result<()> {
    let pid = to_pid(pid)?;
    // SAFETY: kill(2) takes any pid and signal; it reports what it refuses.
    if unsafe { libc::kill(pid, sig) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends `sig` to every process of group `pgid` (a child started with
/// `process_group(0)` leads one of its own, numbered as its pid).
pub fn signal_group(pgid: u32, sig: libc::c_int) -> io::Result<()> {
    let pgid = to_pid(pgid)?;
    // SAFETY: kill(2) with a negative pid addresses that process group.
    if unsafe { libc::kill(-pgid, sig) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether process `pid` exists (a zombie still does, until reaped).
/// EPERM means it exists but belongs to someone else.
pub fn alive(pid: u32) -> bool {
    match send_signal(pid, 0) {
        Ok(()) => true,
        Err(e) => e.raw_os_error() == Some(libc::EPERM),
    }
}

/// Puts thread `tid` (0: the calling thread) in the real-time FIFO class
/// at `priority` (1..=99): it runs as soon as it wakes, ahead of every
/// ordinary thread. Needs CAP_SYS_NICE.
pub fn set_realtime(tid: u32, priority: i32) -> io::Result<()> {
    let tid = to_pid(tid)?;
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: a thread id and a parameter that outlives the call.
    if unsafe { libc::sched_setscheduler(tid, libc::SCHED_FIFO, &param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn to_pid(pid: u32) -> io::Result<libc::pid_t> {
    libc::pid_t::try_from(pid).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{pid} is not a process id (the kernel's are below 2^31)"),
        )
    })
}

/// What a child process does between fork and exec, in this order: enter
/// a network namespace, ask to be killed when its parent dies, pin itself
/// to a CPU, take real-time priority, and put descriptors at fixed numbers.
#[derive(Debug, Default)]
pub struct ChildSetup {
    /// A network namespace (an open /run/netns/<name> or /proc/<pid>/ns/net).
    pub netns: Option<File>,
    /// SIGKILL when the parent thread exits, so a crashed lab leaves no
    /// process behind.
    pub die_with_parent: bool,
    pub cpu: Option<usize>,
    /// SCHED_FIFO at this priority.
    pub realtime: Option<i32>,
    /// Descriptors to give the child at the numbers paired with them
    /// (dup2 clears close-on-exec there).
    pub fds: Vec<(OwnedFd, RawFd)>,
}

impl ChildSetup {
    /// Makes `cmd`'s children do this setup; the descriptors stay open (in
    /// `cmd`) until `cmd` is dropped.
    pub fn apply_to(self, cmd: &mut Command) -> io::Result<()> {
        if let Some(cpu) = self.cpu {
            if cpu >= libc::CPU_SETSIZE as usize {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "CPU {cpu} is beyond the {} a CPU set holds",
                        libc::CPU_SETSIZE
                    ),
                ));
            }
        }
        let ChildSetup {
            netns,
            die_with_parent,
            cpu,
            realtime,
            fds,
        } = self;
        let hook = move || -> io::Result<()> {
            // Only async-signal-safe calls from here on: the child of a
            // multi-threaded parent may not allocate or take locks.
            let check = |rc: libc::c_int| {
                if rc < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(())
                }
            };
            // SAFETY: setns, prctl, sched_setaffinity, sched_setscheduler
            // and dup2 are async-signal-safe; they change only this child,
            // on descriptors and structs that the closure owns.
            unsafe {
                if let Some(ns) = &netns {
                    check(libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET))?;
                }
                if die_with_parent {
                    check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL))?;
                }
                if let Some(cpu) = cpu {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut set);
                    check(libc::sched_setaffinity(
                        0,
                        std::mem::size_of_val(&set),
                        &set,
                    ))?;
                }
                if let Some(priority) = realtime {
                    let param = libc::sched_param {
                        sched_priority: priority,
                    };
                    check(libc::sched_setscheduler(0, libc::SCHED_FIFO, &param))?;
                }
                for (fd, target) in &fds {
                    check(libc::dup2(fd.as_raw_fd(), *target))?;
                }
            }
            Ok(())
        };
        // SAFETY: the hook makes only async-signal-safe calls (above) and
        // allocates nothing.
        unsafe { cmd.pre_exec(hook) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_alive_until_killed_and_reaped() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        assert!(alive(child.id()));
        send_signal(child.id(), libc::SIGKILL).unwrap();
        child.wait().unwrap();
        assert!(!alive(child.id()));
        let err = send_signal(child.id(), libc::SIGTERM).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ESRCH), "{err}");
        assert!(send_signal(u32::MAX, 0).is_err());
    }

    #[test]
    fn we_are_alive_and_our_thread_has_an_id() {
        assert!(alive(std::process::id()));
        // The main thread's id is the process id; a test's thread is another.
        assert_ne!(current_tid(), 0);
    }

    #[test]
    fn a_child_gets_its_descriptors_and_cpu() {
        let cpu = crate::allowed_cpus().unwrap()[0];
        let (r, w) = crate::pipe().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "echo hi >&7; grep Cpus_allowed_list /proc/self/status",
        ]);
        cmd.stdout(std::process::Stdio::piped());
        ChildSetup {
            cpu: Some(cpu),
            fds: vec![(w, 7)],
            ..Default::default()
        }
        .apply_to(&mut cmd)
        .unwrap();
        let out = cmd.output().unwrap();
        drop(cmd);
        assert!(out.status.success());
        let status = String::from_utf8(out.stdout).unwrap();
        assert!(status.trim().ends_with(&format!("\t{cpu}")), "{status}");
        let mut got = String::new();
        std::io::Read::read_to_string(&mut File::from(r), &mut got).unwrap();
        assert_eq!(got, "hi\n");
    }
}
