//! Writes the shared AWFD test vectors, like `weir sim vectors`:
//! `cargo run -p weir-sim --example awfd_vectors [-- PATH]`
//! (default `tests/vectors/awfd.json`, run from the repository root).

fn main() -> anyhow::Result<()> {
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "tests/vectors/awfd.json".into());
    weir_sim::cli::run_vectors(&weir_sim::cli::VectorsArgs { out: out.into() })
}
