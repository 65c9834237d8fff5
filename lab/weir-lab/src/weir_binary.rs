//! Where the labs find the `weir` binary they run (`weir serve`, `weir
//! status`, `weir decap`, ...): the product is its own binary, built next to
//! `weir-lab` in the same target directory.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// Names a `weir` binary to use instead of the one next to this program.
pub const ENV: &str = "WEIR_BIN";

/// The `weir` binary: `$WEIR_BIN` if set, else `weir` in the directory of
/// the running executable or its parent (test binaries run from
/// `target/<profile>/deps`).
pub fn locate() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os(ENV) {
        let path = PathBuf::from(path);
        if !path.is_file() {
            bail!(
                "{ENV}={} is not a file: point it at a weir binary, or unset it to use \
                 the one next to weir-lab",
                path.display()
            );
        }
        return Ok(path);
    }
    let exe = std::env::current_exe().context("locating the running executable")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let candidates = [Some(dir), dir.parent()];
    for d in candidates.into_iter().flatten() {
        let weir = d.join("weir");
        if weir.is_file() {
            return Ok(weir);
        }
    }
    bail!(
        "no weir binary next to {}: build it with `cargo build --release -p weir` \
         (or `make build`), or set {ENV} to its path",
        exe.display()
    )
}
