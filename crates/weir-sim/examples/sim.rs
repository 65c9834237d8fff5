//! The `weir sim` / `weir bench sim` command lines without the `weir`
//! binary, for working on the simulator alone:
//! `cargo run --release -p weir-sim --example sim -- spotlight --out out/spotlight`
//! `cargo run --release -p weir-sim --example sim -- bench --json out/bench-sim.json`

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "sim", about = "weir sim without the weir binary")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    #[command(flatten)]
    Sim(weir_sim::cli::SimCommand),
    /// Same as `weir bench sim`.
    Bench(weir_sim::cli::BenchArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Sim(c) => weir_sim::cli::run(c),
        Cmd::Bench(b) => weir_sim::cli::run_bench(&b),
    }
}
