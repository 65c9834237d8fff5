//! Signals, network namespaces and child processes (their system calls are
//! weir-sys's).

use std::fs::File;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use weir_sys::process::ChildSetup;

use super::daemon::WEIR;

pub use weir_sys::process::{alive, send_signal};

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
    ChildSetup {
        netns: Some(netns),
        ..ChildSetup::default()
    }
    .apply_to(&mut cmd)
    .expect("a child setup with a namespace only");
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
