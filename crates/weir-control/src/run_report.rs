//! The reports `weir serve` keeps in its run directory beside its record
//! (`<run dir>/<name>.json`): one watch of the daemon writes each whole,
//! `weir status`, the management API and /metrics read it, and it goes
//! when the daemon stops.

use std::fs;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Replaces `path` with `value` as pretty JSON, through a rename so that a
/// reader (`weir status`, the API, a successor) never sees half a file.
/// The run directory's reports are best effort: a failed write keeps the
/// last one, and the next period writes again.
pub(crate) fn publish_json<T: Serialize>(path: &Path, value: &T) {
    let tmp = path.with_extension("json.tmp");
    if let Ok(text) = serde_json::to_vec_pretty(value) {
        if fs::write(&tmp, text).is_ok() {
            let _ = fs::rename(&tmp, path);
        }
    }
}

/// A report's file name and what it holds (`T`).
pub struct RunReport<T> {
    name: &'static str,
    holds: PhantomData<fn() -> T>,
}

impl<T: Serialize + DeserializeOwned + PartialEq + Default> RunReport<T> {
    pub const fn new(name: &'static str) -> RunReport<T> {
        RunReport {
            name,
            holds: PhantomData,
        }
    }

    /// Where the report of the daemon recorded in `run_dir` is.
    pub fn file(&self, run_dir: &Path) -> PathBuf {
        run_dir.join(self.name)
    }

    /// The last report the running daemon wrote, if it runs and wrote one.
    pub fn read(&self, run_dir: &Path) -> Option<T> {
        let text = fs::read_to_string(self.file(run_dir)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// The daemon's side: nothing is written before the first
    /// [`Published::publish`].
    pub fn publisher(&self, run_dir: &Path) -> Published<T> {
        Published {
            file: self.file(run_dir),
            last: T::default(),
        }
    }
}

/// What a watch last published; the file goes with it.
pub struct Published<T> {
    file: PathBuf,
    last: T,
}

impl<T: Serialize + PartialEq> Published<T> {
    /// The value last published (`T::default()` before the first).
    pub fn last(&self) -> &T {
        &self.last
    }

    /// Writes `now` where it differs from the last report.
    pub fn publish(&mut self, now: T) {
        if now != self.last {
            publish_json(&self.file, &now);
            self.last = now;
        }
    }
}

impl<T> Drop for Published<T> {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.file);
    }
}
