//! Temporary directories of a test.

use std::path::{Path, PathBuf};

/// A fresh directory `{what}-{pid}` under the system's temporary
/// directory, removed when dropped (also on a panic).
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(what: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
