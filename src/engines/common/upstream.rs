//! katgpucbf options that serve only Python's debugging consoles (aiomonitor, aioconsole):
//! the telescope's controller passes them to every fgpu and xbgpu, so they are accepted,
//! checked as upstream's parser checks them, and logged once as not applicable.

use clap::Args;

/// `--aiomonitor`, `--aiomonitor-host`, `--aiomonitor-port`, `--aioconsole-port`,
/// `--aiomonitor-webui-port` (katsdpservices' names and aiomonitor 0.7.1's defaults).
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct ConsoleArgs {
    /// Accepted for katgpucbf compatibility (a Python asyncio monitor): not applicable.
    #[arg(long)]
    pub aiomonitor: bool,
    /// Accepted for katgpucbf compatibility: not applicable.
    #[arg(long, default_value = "127.0.0.1", value_name = "HOST")]
    pub aiomonitor_host: String,
    /// Accepted for katgpucbf compatibility: not applicable.
    #[arg(long, default_value_t = 20101, value_name = "PORT")]
    pub aiomonitor_port: u16,
    /// Accepted for katgpucbf compatibility: not applicable.
    #[arg(long, default_value_t = 20103, value_name = "PORT")]
    pub aioconsole_port: u16,
    /// Accepted for katgpucbf compatibility: not applicable.
    #[arg(long, default_value_t = 20102, value_name = "PORT")]
    pub aiomonitor_webui_port: u16,
}

impl ConsoleArgs {
    /// The one log line, when any of the options was used (`--aiomonitor` turns the
    /// consoles on upstream; the ports alone do nothing there either).
    pub fn log_not_applicable(&self) {
        if self.aiomonitor {
            tracing::info!(
                aiomonitor_port = self.aiomonitor_port,
                aioconsole_port = self.aioconsole_port,
                aiomonitor_webui_port = self.aiomonitor_webui_port,
                "--aiomonitor: Python's asyncio debugging consoles are not applicable to \
                 gpucbf; no console is started (use katcp, Prometheus metrics and the logs)"
            );
        }
    }
}
