//! `dllm-bench fetch`: every model file and prompt dataset a config needs, into the HF cache.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use super::CacheArgs;
use crate::plan::ConfigArgs;
use crate::{InputError, plan};

/// `dllm-bench fetch`.
#[derive(Debug, clap::Args)]
pub struct FetchArgs {
    /// Grid config (TOML) whose models, evaluators and Wikitext dataset to fetch. Default: the embedded demo (its
    /// models are synthetic: nothing to fetch). What `run` overrides of the grid (K, B, N, ...) changes nothing
    /// that is fetched, so fetch takes no overrides.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Where models and datasets go (the cache `run` reads).
    #[command(flatten)]
    pub cache: CacheArgs,
    /// Another model to fetch as well (hub id, revision main); repeatable.
    #[arg(long, value_name = "ORG/NAME")]
    pub extra_model_id: Vec<String>,
    /// Only check the cache and list what is missing, by path; download nothing. Exit 1 if anything is missing.
    /// Implied by HF_HUB_OFFLINE=1.
    #[arg(long)]
    pub local_files_only: bool,
    /// No progress bars.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

pub fn main(args: FetchArgs) -> Result<ExitCode> {
    use crate::fetch::Asset;
    let resolved = plan::resolve(&ConfigArgs { config: args.config.clone(), ..ConfigArgs::default() })?;
    let cfg = &resolved.config;
    let cache = args.cache.dir();
    let offline_env = std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"));
    let local_only = args.local_files_only || offline_env;
    if offline_env && !args.local_files_only {
        crate::say!("HF_HUB_OFFLINE is set: checking the cache only, downloading nothing");
    }
    let mut wanted: Vec<Asset> = Vec::new();
    // The measured models, then the evaluators of [quality] that are not measured models, then its encoder.
    let evaluators = cfg.evaluators();
    let measured = cfg.models.iter().map(|m| (m, cfg.prompts.chat_template));
    for (m, chat_template) in measured.chain(evaluators.iter().filter(|e| !cfg.models.contains(e)).map(|e| (e, false)))
    {
        if m.synthetic.is_some() {
            crate::say!("{}: synthetic (a synthetic table): `dllm-bench run` writes it; nothing to fetch", m.id);
        } else if !wanted.iter().any(|w| w.id() == m.id) {
            wanted.push(Asset::Model { id: m.id.clone(), revision: m.revision.clone(), chat_template });
        }
    }
    // The BERTScore encoder (config, tokenizer, weights, as a model's).
    if let Some(b) = cfg.quality.as_ref().and_then(|q| q.bertscore.as_ref()) {
        if b.synthetic.is_some() {
            crate::say!("{}: synthetic (a synthetic table): `dllm-bench run` writes it; nothing to fetch", b.id);
        } else if !wanted.iter().any(|w| w.id() == b.id) {
            let revision = b.revision.clone().unwrap_or_else(|| "main".into());
            wanted.push(Asset::Model { id: b.id.clone(), revision, chat_template: false });
        }
    }
    for id in &args.extra_model_id {
        if let Some(problem) = schema::grid::hub_id_problem(id) {
            return Err(InputError(format!("--extra-model-id: {problem}; fix: use a hub id such as ORG/NAME")).into());
        }
        if !wanted.iter().any(|w| w.id() == id) {
            wanted.push(Asset::Model { id: id.clone(), revision: "main".into(), chat_template: false });
        }
    }
    if cfg.prompts.source == schema::grid::PromptSource::Wikitext {
        let (id, revision) = (cfg.prompts.dataset().to_string(), cfg.prompts.revision().to_string());
        wanted.push(Asset::Dataset { id, revision });
    }
    let mut missing = 0;
    let mut failed = 0;
    for asset in &wanted {
        let files = if local_only {
            asset.check(&cache)
        } else {
            match asset.download(&cache, !args.quiet) {
                Ok(files) => files,
                Err(e) => {
                    failed += 1;
                    crate::say!("error: {}: {e:#}", asset.id());
                    continue;
                }
            }
        };
        let complete = files.iter().all(|f| f.present);
        for f in files {
            let note = f.note.map_or(String::new(), |n| format!("  ({n})"));
            if f.present {
                crate::tell!("ok       {}", f.path.display());
            } else {
                missing += 1;
                crate::tell!("missing  {}{note}", f.path.display());
            }
        }
        // Present is not enough: the files are read as a run reads them before its first cell (config for the
        // model's kind, tokenizer, the safetensors headers and sizes). Evaluators and extra ids load as llama.
        if let (true, Asset::Model { id, revision, .. }) = (complete, asset) {
            let kind = cfg.models.iter().find(|m| m.id == *id).map_or(schema::ModelKind::Llama, |m| m.kind);
            let checked = crate::model::ModelFiles::from_hf_cache(&cache, id, revision)
                .and_then(|files| crate::model::LoadedModel::check_files(&files, kind).map(|_| ()));
            if let Err(e) = checked {
                failed += 1;
                crate::tell!("broken   {id}: {e}");
            }
        }
    }
    if missing + failed > 0 {
        crate::say!(
            "{missing} files missing{} in {}{}",
            if failed > 0 {
                format!(", {failed} models or datasets failed to download or are broken")
            } else {
                String::new()
            },
            cache.display(),
            match (local_only, offline_env) {
                (true, true) => "; fix: run `dllm-bench fetch` where there is network, without HF_HUB_OFFLINE set",
                (true, false) => "; fix: run `dllm-bench fetch` without --local-files-only where there is network",
                (false, _) => "",
            }
        );
        return Ok(ExitCode::from(1));
    }
    let datasets = wanted.iter().filter(|a| matches!(a, Asset::Dataset { .. })).count();
    let with = if datasets > 0 { format!(" and {datasets} dataset") } else { String::new() };
    crate::say!("all files of {} models{with} are in {}", wanted.len() - datasets, cache.display());
    Ok(ExitCode::SUCCESS)
}
