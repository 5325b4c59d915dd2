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
    /// Digitiser simulator: SPEAD digitiser heaps to UDP destinations or a pcap file.
    Dsim(gpucbf::dsim::DsimArgs),
    /// Decode the SPEAD heaps of a pcap file and print a JSON summary per destination.
    PcapInfo {
        /// Capture to read.
        path: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match cli.command {
        Command::Dsim(args) => {
            let cfg = args.validate().map_err(anyhow::Error::msg)?;
            let summary = gpucbf::dsim::run(&cfg)?;
            if args.summary {
                println!("{}", serde_json::to_string_pretty(&summary)?);
            }
        }
        Command::PcapInfo { path } => {
            let s = gpucbf::inspect::summarise(&path)?;
            println!("{}", serde_json::to_string_pretty(&s)?);
        }
    }
    Ok(())
}
