//! Signals, network namespaces and child processes: the only raw libc of
//! the e2e tests, one function each.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::daemon::WEIR;

/// Sends `signal` to process `pid`.
pub fn send_signal(pid: u32, signal: libc::c_int) -> std::io::Result<()> {
    // SAFETY: kill(2) takes no pointers; a wrong pid is an error, not UB.
    if unsafe { libc::kill(pid as libc::pid_t, signal) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether process `pid` exists (signal 0 checks without sending).
pub fn alive(pid: u32) -> bool {
    send_signal(pid, 0).is_ok()
}

/// `weir <args>` run to its end.
pub fn weir(args: &[&str]) -> Output {
    Command::new(WEIR)
        .args(args)
        .output()
        .expect("running weir")
}

/// `weir <args>` run inside namespace `ns` (its network only, as the
/// daemon's own commands are).
pub fn command_in(ns: &str, args: &[&str]) -> Command {
    let netns =
        File::open(format!("/run/netns/{ns}")).unwrap_or_else(|e| panic!("namespace {ns}: {e}"));
    let mut cmd = Command::new(WEIR);
    cmd.args(args);
    // SAFETY: setns is async-signal-safe; it moves only the child. The
    // closure owns the namespace's file, so its fd stays open until exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// `weir <args>` run to its end inside namespace `ns`.
pub fn weir_in(ns: &str, args: &[&str]) -> Output {
    command_in(ns, args).output().expect("running weir")
}

/// Runs `cmd` to its end, or kills it after `limit` and panics (a command
/// that should have been refused would otherwise run forever).
pub fn output_within(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the command");
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "still running after {limit:?}, not refused: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A child stopped with SIGINT when dropped (`weir kv` and `weir serve`
/// detach their XDP programs on it), then killed if it lingers past 5 s;
/// also on a panic.
pub struct Interrupted(pub Child);

impl Drop for Interrupted {
    fn drop(&mut self) {
        let _ = send_signal(self.0.id(), libc::SIGINT);
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.0.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
