//! The same as `weir bench kv`, without the weir binary.
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: weir_kv::bench::KvBenchArgs,
}

fn main() -> anyhow::Result<()> {
    weir_kv::bench::run(&Cli::parse().args)
}
