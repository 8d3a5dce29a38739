//! The subcommands whose arguments and bodies are not in a module of their own: one file each (its clap
//! arguments and its body, `main`), dispatched by [`crate::cli`].

use std::path::PathBuf;

pub mod fetch;
pub mod merge;
pub mod plan;
pub mod run;
pub mod serve;
pub mod synth;
pub mod validate;

/// Where models live.
#[derive(Debug, Clone, clap::Args)]
pub struct CacheArgs {
    /// HF hub cache folder (models--org--name/...). Default: $HF_HUB_CACHE, else $HF_HOME/hub, else
    /// ~/.cache/huggingface/hub.
    #[arg(long, value_name = "DIR")]
    pub model_cache_dir: Option<PathBuf>,
}

impl CacheArgs {
    /// The cache folder to use.
    pub fn dir(&self) -> PathBuf {
        if let Some(d) = &self.model_cache_dir {
            return d.clone();
        }
        if let Some(d) = std::env::var_os("HF_HUB_CACHE") {
            return d.into();
        }
        if let Some(d) = std::env::var_os("HF_HOME") {
            return PathBuf::from(d).join("hub");
        }
        let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
        home.join(".cache/huggingface/hub")
    }
}
