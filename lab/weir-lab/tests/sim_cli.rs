//! `weir-lab sim` as a command-line tool: it stops quietly when the reader
//! of its output goes away, and its JSON records every input of the run.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output, Stdio};

const WEIR_LAB: &str = env!("CARGO_BIN_EXE_weir-lab");

/// A run small enough to take well under a second.
const SMALL: &[&str] = &["--flows", "2000", "--dips", "4", "--runs", "1", "--quiet"];

/// Runs `weir-lab args` with its stdout a pipe whose reader is already
/// gone, as in `weir-lab sim run --format json | head` once head is done.
fn into_a_closed_pipe(args: &[&str]) -> Output {
    let mut child = Command::new(WEIR_LAB)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting weir-lab");
    drop(child.stdout.take());
    child.wait_with_output().unwrap()
}

#[test]
fn sim_run_into_a_closed_pipe_ends_quietly() {
    let mut args = vec!["sim", "run", "--format", "json"];
    args.extend_from_slice(SMALL);
    let o = into_a_closed_pipe(&args);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!e.contains("panicked"), "{e}");
    assert_ne!(o.status.code(), Some(101), "{e}");
    assert_eq!(
        o.status.signal(),
        Some(libc::SIGPIPE),
        "{:?}: {e}",
        o.status
    );
}
