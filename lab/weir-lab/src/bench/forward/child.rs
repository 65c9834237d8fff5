//! The bench's helper processes (iperf3, HAProxy, `weir decap`) inside a
//! lab namespace: entered by setns before exec, optionally pinned to a CPU,
//! killed with the bench however it ends (PR_SET_PDEATHSIG), and waited
//! for no longer than a deadline.

use std::fs::File;
use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Spawns `cmd` in namespace `ns`, on `cpu` if given.
pub fn spawn_in(ns: &str, cpu: Option<usize>, cmd: &mut Command) -> Result<Child> {
    let netns = File::open(format!("/run/netns/{ns}"))
        .with_context(|| format!("opening namespace {ns}"))?;
    let program = cmd.get_program().to_string_lossy().into_owned();
    weir_sys::process::ChildSetup {
        netns: Some(netns),
        die_with_parent: true,
        cpu,
        ..Default::default()
    }
    .apply_to(cmd)?;
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
    weir_sys::process::send_signal(child.id(), libc::SIGTERM)?;
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
