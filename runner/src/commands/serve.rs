//! `dllm-bench serve`: the explorer and a results folder's bundles on a local address.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use crate::serve;

/// `dllm-bench serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Folder of bundles.
    #[arg(long, default_value = "results", value_name = "DIR")]
    pub results: PathBuf,
    /// The explorer's built site (trunk's output).
    #[arg(long, default_value = "explorer/dist", value_name = "DIR")]
    pub explorer: PathBuf,
    /// Address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "HOST:PORT")]
    pub addr: String,
}

/// Serves until the process is stopped.
pub fn main(args: ServeArgs) -> Result<ExitCode> {
    serve::serve(&args.results, &args.explorer, &args.addr)?;
    Ok(ExitCode::SUCCESS)
}
