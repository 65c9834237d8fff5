//! The bench's helper processes (iperf3, HAProxy, `weir decap`) inside a
//! lab namespace: entered by setns before exec, optionally pinned to a CPU,
//! killed with the bench however it ends (PR_SET_PDEATHSIG), and waited
//! for no longer than a deadline.

use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Spawns `cmd` in namespace `ns`, on `cpu` if given.
pub fn spawn_in(ns: &str, cpu: Option<usize>, cmd: &mut Command) -> Result<Child> {
    let netns = File::open(format!("/run/netns/{ns}"))
        .with_context(|| format!("opening namespace {ns}"))?;
    let ns_fd = netns.as_raw_fd();
    let program = cmd.get_program().to_string_lossy().into_owned();
    // SAFETY: setns, prctl and sched_setaffinity are async-signal-safe and
    // touch only the child between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(ns_fd, libc::CLONE_NEWNET) != 0
                || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(cpu) = cpu {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.spawn()
        .with_context(|| format!("starting {program} in {ns} (is it installed?)"))
}

/// Runs `cmd` in `ns` (on `cpu`) to completion and returns its output;
/// killed, and an error, after `timeout`.
pub fn output_in(
    ns: &str,
    cpu: Option<usize>,
    cmd: &mut Command,
    timeout: Duration,
) -> Result<Output> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = spawn_in(
        ns,
        cpu,
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )?;
    // Drained while waiting: a chatty child must not block on a full pipe.
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(child.stdout.take().map(|r| Box::new(r) as _));
    let stderr = drain(child.stderr.take().map(|r| Box::new(r) as _));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{program} in {ns} did not finish in {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// SIGTERM, then SIGKILL if `child` has not exited within `grace`.
pub fn stop(child: &mut Child, grace: Duration) -> Result<()> {
    if child.try_wait()?.is_some() {
        return Ok(());
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + grace;
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            child.kill()?;
            child.wait()?;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}
