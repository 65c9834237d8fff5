//! Benchmarks behind `weir-lab bench ...`. They are commands, never timed
//! assertions in tests: the machine is shared and noisy, so every figure is
//! measured side by side with a baseline in the same run and reported as a
//! ratio to it.

pub mod forward;
pub mod katran;
pub mod xdp;

/// Writes a bench report as pretty JSON to `path` and says so on stderr.
fn write_json(path: &std::path::Path, report: &impl serde::Serialize) -> anyhow::Result<()> {
    use anyhow::Context;
    let text = serde_json::to_string_pretty(report)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}
