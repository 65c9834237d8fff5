//! The same as `weir-lab bench kv`, without the weir binary.
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: weir_lab::kv::bench::KvBenchArgs,
}

fn main() -> anyhow::Result<()> {
    weir_lab::kv::bench::run(&Cli::parse().args)
}
