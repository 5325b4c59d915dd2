//! The `gpucbf` command: one subcommand per engine or tool.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use gpucbf::telemetry::{init_logging, LogFormat};

#[derive(Parser)]
#[command(
    name = "gpucbf",
    version,
    about = "GPU correlator-beamformer (katgpucbf wire-compatible)"
)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, value_enum, global = true, default_value = "human")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Decode the SPEAD heaps of a pcap file and print a JSON summary per destination.
    PcapInfo {
        /// Capture to read.
        path: PathBuf,
    },
    /// Non-uniform FFTs (FINUFFT conventions) on .npy files, and the CPU benchmark.
    #[command(subcommand)]
    Nufft(gpucbf::nufft::cli::NufftCmd),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match cli.command {
        Command::PcapInfo { path } => {
            let s = gpucbf::inspect::summarise(&path)?;
            println!("{}", serde_json::to_string_pretty(&s)?);
        }
        Command::Nufft(cmd) => gpucbf::nufft::cli::run(cmd)?,
    }
    Ok(())
}
