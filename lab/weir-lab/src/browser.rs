//! A headless Chromium for looking at weir's web dashboard in a lab: it
//! opens a page from inside a lab namespace, evaluates JavaScript in it and
//! takes screenshots, in real time (the page's timers run as they would for
//! a person; `--dump-dom` with a virtual-time budget would run them ahead
//! of the server).
//!
//! It is driven over the DevTools protocol on a pipe
//! (`--remote-debugging-pipe`: commands on the browser's fd 3, answers and
//! events on its fd 4, each one JSON text ended by a NUL byte). No port is
//! opened, so nothing else can drive the browser, and it needs no
//! WebSocket client. The browser runs in a process group of its own with a
//! throw-away profile; drop closes it (and its helpers), also on a panic.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine;
use serde_json::{json, Value};

/// Names of the browser on Debian (`apt-get install chromium`) and others.
const NAMES: [&str; 3] = ["chromium", "chromium-browser", "google-chrome"];
/// Longest wait for one answer of the browser.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// The browser's stderr, in its profile directory.
const STDERR: &str = "stderr.log";
/// Longest wait for the page to load.
const LOAD_TIMEOUT: Duration = Duration::from_secs(20);

/// The browser's path, if one is installed (on `PATH`).
pub fn find() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| NAMES.iter().map(move |n| dir.join(n)))
        .find(|p| p.is_file())
}

/// A running headless browser with one page.
pub struct Browser {
    child: Child,
    to: File,
    from: Receiver<Value>,
    reader: Option<JoinHandle<()>>,
    next_id: u64,
    session: String,
    profile: PathBuf,
}

/// A fresh profile directory per browser: one process may open several.
fn profile_dir() -> Result<PathBuf> {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "weir-browser-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    // A leftover of an earlier process with this pid would hold its lock.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

impl Browser {
    /// Starts the browser (in network namespace `ns`, if given) with a
    /// window of `width` x `height` CSS pixels and opens `url`.
    pub fn open(ns: Option<&str>, url: &str, width: u32, height: u32) -> Result<Browser> {
        let exe = find().context(
            "no chromium on PATH: install it (apt-get install chromium, as scripts/deps.sh does)",
        )?;
        let profile = profile_dir()?;
        let (cmd_r, cmd_w) = weir_sys::pipe().context("pipe2")?;
        let (ans_r, ans_w) = weir_sys::pipe().context("pipe2")?;
        let netns = ns
            .map(|ns| {
                File::open(format!("/run/netns/{ns}")).with_context(|| format!("namespace {ns}"))
            })
            .transpose()?;
        let mut cmd = Command::new(&exe);
        cmd.args([
            "--headless",
            // The sandbox cannot run as root; the page is weir's own.
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-sync",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-default-apps",
            "--hide-scrollbars",
            "--mute-audio",
            "--remote-debugging-pipe",
        ])
        .arg(format!("--window-size={width},{height}"))
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(profile.join(STDERR))?)
        .process_group(0);
        // The child reads commands on 3 and answers on 4; the pipe's ends
        // are numbered 10 and above, so neither dup2 overwrites the other.
        weir_sys::process::ChildSetup {
            netns,
            fds: vec![(cmd_r, 3), (ans_w, 4)],
            ..Default::default()
        }
        .apply_to(&mut cmd)?;
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&profile);
                return Err(e).with_context(|| format!("starting {}", exe.display()));
            }
        };
        // Our copies of the child's ends close with `cmd`, so that a child
        // that dies is seen as end of file.
        drop(cmd);
        let (tx, from) = mpsc::channel();
        // From here on, drop ends the browser whatever fails.
        let mut b = Browser {
            child,
            to: File::from(cmd_w),
            from,
            reader: None,
            next_id: 0,
            session: String::new(),
            profile,
        };
        b.reader = Some(
            std::thread::Builder::new()
                .name("browser-pipe".into())
                .spawn(move || {
                    let mut r = BufReader::new(File::from(ans_r));
                    let mut buf = Vec::new();
                    loop {
                        buf.clear();
                        match r.read_until(0, &mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                        if buf.last() == Some(&0) {
                            buf.pop();
                        }
                        if let Ok(v) = serde_json::from_slice::<Value>(&buf) {
                            if tx.send(v).is_err() {
                                return;
                            }
                        }
                    }
                })?,
        );
        let target = b.send(None, "Target.createTarget", json!({ "url": url }))?;
        let id = target["targetId"]
            .as_str()
            .context("Target.createTarget gave no targetId")?
            .to_string();
        let attached = b.send(
            None,
            "Target.attachToTarget",
            json!({ "targetId": id, "flatten": true }),
        )?;
        b.session = attached["sessionId"]
            .as_str()
            .context("Target.attachToTarget gave no sessionId")?
            .to_string();
        // The new page starts as about:blank; wait until `url` has loaded.
        b.wait_for(
            "location.href !== 'about:blank' && document.readyState === 'complete'",
            LOAD_TIMEOUT,
        )
        .with_context(|| format!("loading {url}"))?;
        Ok(b)
    }

    /// One DevTools command to the page; its result.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        let session = self.session.clone();
        self.send(Some(&session), method, params)
    }

    /// One DevTools command, to a page's `session` or to the browser.
    fn send(&mut self, session: Option<&str>, method: &str, params: Value) -> Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg)?;
        bytes.push(0);
        self.to
            .write_all(&bytes)
            .with_context(|| format!("{method}: the browser is gone"))?;
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = match self.from.recv_timeout(left) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => {
                    bail!("{method}: no answer from the browser within {CALL_TIMEOUT:?}")
                }
                Err(RecvTimeoutError::Disconnected) => {
                    bail!("{method}: the browser exited; it said: {}", self.said())
                }
            };
            if m["id"].as_u64() != Some(id) {
                continue; // an event, or the answer to a call that timed out
            }
            if let Some(e) = m.get("error") {
                bail!("{method}: {}", e["message"].as_str().unwrap_or("error"));
            }
            return Ok(m["result"].clone());
        }
    }

    /// Evaluates `js` in the page (awaiting a promise); its value as JSON.
    pub fn eval(&mut self, js: &str) -> Result<Value> {
        let r = self.call(
            "Runtime.evaluate",
            json!({ "expression": js, "returnByValue": true, "awaitPromise": true }),
        )?;
        if let Some(e) = r.get("exceptionDetails") {
            let what = e["exception"]["description"]
                .as_str()
                .or(e["text"].as_str())
                .unwrap_or("an exception");
            bail!("evaluating in the page: {what}");
        }
        Ok(r["result"]["value"].clone())
    }

    /// Evaluates `js` every 100 ms until it gives something other than
    /// false, null or undefined, for at most `timeout`; that value.
    pub fn wait_for(&mut self, js: &str, timeout: Duration) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.eval(js)?;
            if !matches!(v, Value::Null | Value::Bool(false)) {
                return Ok(v);
            }
            if Instant::now() > deadline {
                bail!("the page did not come to `{js}` within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The last lines the browser wrote to stderr.
    fn said(&self) -> String {
        let text = std::fs::read_to_string(self.profile.join(STDERR)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(3)..].join(" | ")
    }

    /// A PNG of the whole page (not only the window).
    pub fn screenshot(&mut self) -> Result<Vec<u8>> {
        let m = self.call("Page.getLayoutMetrics", json!({}))?;
        let size = &m["cssContentSize"];
        let (w, h) = (
            size["width"].as_f64().context("no page width")?,
            size["height"].as_f64().context("no page height")?,
        );
        let shot = self.call(
            "Page.captureScreenshot",
            json!({
                "format": "png",
                "captureBeyondViewport": true,
                "clip": { "x": 0, "y": 0, "width": w, "height": h, "scale": 1 },
            }),
        )?;
        let data = shot["data"].as_str().context("no screenshot data")?;
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| anyhow!("the screenshot is not base64: {e}"))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let pgid = self.child.id();
        // Ask the browser to quit; then its group goes, whatever is left.
        let _ = self.send(None, "Browser.close", json!({}));
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = weir_sys::process::signal_group(pgid, libc::SIGKILL);
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
