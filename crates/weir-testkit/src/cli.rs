//! What every command-line tool of weir must do, checked the same way for
//! each: printing into a pipe whose reader is gone ends it quietly.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

/// Runs `cmd` with its stdout a pipe whose reader is already gone, as in
/// `weir status --json | head -1` once head has its line, and asserts that
/// it ends as `cat` or `ls` would: by SIGPIPE, without a panic.
pub fn assert_ends_quietly_into_a_closed_pipe(mut cmd: Command) {
    // The reader is closed before the child starts: no process started
    // meanwhile can inherit it and keep the pipe open.
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let o = cmd
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
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
