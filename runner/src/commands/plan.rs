//! `dllm-bench plan`: the cells a config expands to, without running anything.

use std::process::ExitCode;

use anyhow::Result;
use schema::bundle::CellKey;

use crate::plan;
use crate::plan::ConfigArgs;

/// `dllm-bench plan`.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The grid and its overrides.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Print the resolved config as TOML as well.
    #[arg(long)]
    pub show_config: bool,
    /// Print one JSON object instead: the resolved config, the cells (keys as a bundle writes them) with their
    /// roofline counts, each model's shape and every synthetic preset's shapes (what jobs/hf_reference.py reads).
    #[arg(long, conflicts_with = "show_config")]
    pub json: bool,
    /// With --json: count every model with this synthetic preset's shapes (the HF reference's --shapes).
    #[arg(long, value_enum, requires = "json", value_name = "PRESET")]
    pub shapes: Option<ShapesArg>,
    /// With --json: count every model with this many layers (the HF reference's --layers).
    #[arg(long, requires = "json", value_name = "L", value_parser = clap::value_parser!(u32).range(1..))]
    pub layers: Option<u32>,
    /// List only the cells of shard I of N (`run --shard I/N`'s), with its share of the grid's estimated cost.
    #[arg(long, value_name = "I/N", conflicts_with_all = ["json", "shards"])]
    pub shard: Option<String>,
    /// Show how N shards (a job array of N tasks, `jobs/submit.sh --shards N`) split the grid: each shard's cells
    /// and share of the estimated cost B x NFE x N. More shards than cells is refused (a shard would be empty).
    #[arg(long, value_name = "N", conflicts_with = "json", value_parser = clap::value_parser!(u32).range(1..))]
    pub shards: Option<u32>,
    /// Exit with status 2, naming each problem and its fix, when `run` would stop before measuring anything: a
    /// checkpoint or evaluator neither in the cache nor synthetic, prompts that cannot be read (Wikitext not
    /// fetched), a CUDA device asked of a binary built without CUDA, or a parity search split into shards
    /// (`--shards`/`--shard`). `jobs/submit.sh` runs it before it queues the array. Without it these are notes.
    #[arg(long, conflicts_with = "json")]
    pub check: bool,
    /// The cache whose checkpoints the cells are checked against, as `run` checks them before loading (positions,
    /// prompt lengths in tokens, chat templates); a model not in it is listed as not checked.
    #[command(flatten)]
    pub cache: super::CacheArgs,
}

/// A synthetic preset on the command line.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ShapesArg {
    /// The tiny preset.
    Tiny,
    /// The small preset.
    Small,
    /// The real 8B shapes.
    Real,
}

/// A value's name as configs and bundles write it (`llada_low_confidence`, `embedded`), not Rust's.
fn file_name_of(value: impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        other => format!("{other:?}"),
    }
}

pub fn main(args: PlanArgs) -> Result<ExitCode> {
    let resolved = plan::resolve(&args.config)?;
    // A prompt file is read here as `run` reads it (a missing or short file is refused now, not after the jobs
    // are queued); Wikitext's shards are `fetch`'s to check.
    let file_prompts = match resolved.config.prompts.source {
        schema::grid::PromptSource::File => Some(resolved.load_prompts(std::path::Path::new(""))?),
        _ => None,
    };
    if args.json {
        use schema::grid::SynthPreset;
        let preset = args.shapes.map(|s| match s {
            ShapesArg::Tiny => SynthPreset::Tiny,
            ShapesArg::Small => SynthPreset::Small,
            ShapesArg::Real => SynthPreset::Real,
        });
        let over = plan::ShapeOverride { preset, layers: args.layers };
        println!("{}", serde_json::to_string_pretty(&plan::plan_json(&resolved, over))?);
        return Ok(ExitCode::SUCCESS);
    }
    let cfg = &resolved.config;
    let all = cfg.cells();
    let shard = args.shard.as_deref().map(crate::shard::parse).transpose()?;
    let cells = crate::shard::select_some(&all, shard, "--shard")?;
    if let Some(count) = args.shards {
        // As `run` refuses the task of an empty shard: before the array is queued, not when its task starts.
        crate::shard::check_count(count, &format!("--shards {count}"))?;
        if let Some(index) = crate::shard::loads(&all, count).iter().position(|l| l.0 == 0) {
            let empty = schema::ShardInfo { index: index as u32, count };
            crate::shard::select_some(&all, Some(empty), &format!("--shards {count}"))?;
        }
    }
    match shard {
        Some(s) => {
            let share = crate::shard::loads(&all, s.count)[s.index as usize].1;
            println!(
                "# shard {s}: {} of the {} cells from {} ({:.1}% of the estimated cost B x NFE x N)",
                cells.len(),
                all.len(),
                resolved.source,
                100.0 * share
            );
        }
        None => println!("# {} cells from {}", cells.len(), resolved.source),
    }
    let wrapped = if cfg.prompts.chat_template { ", each in its model's chat template" } else { "" };
    println!(
        "# device {}, {}, warm-up {}, repetitions {}, {} prompts ({}){wrapped}",
        cfg.run.device,
        cfg.run.dtype,
        cfg.run.warmup,
        cfg.run.repetitions,
        cfg.prompts.prompt_count(),
        file_name_of(cfg.prompts.source)
    );
    if let Some(b) = cfg.quality.as_ref().and_then(|q| q.bertscore.as_ref()) {
        println!(
            "# BERTScore against the true continuations: encoder {} (revision {}), layer {}",
            b.id,
            b.revision.as_deref().unwrap_or("main"),
            b.layer.map_or("?".into(), |l| l.to_string())
        );
    }
    // Every model and evaluator whose weights the runner writes, once each.
    let evaluators = cfg.quality.iter().flat_map(|q| &q.evaluators).filter(|e| e.synthetic.is_some()).map(|e| &e.id);
    let encoder = cfg.quality.iter().flat_map(|q| &q.bertscore).filter(|b| b.synthetic.is_some()).map(|b| &b.id);
    let mut synthetic: Vec<&str> = Vec::new();
    for id in cfg.models.iter().filter(|m| m.synthetic.is_some()).map(|m| &m.id).chain(evaluators).chain(encoder) {
        if !synthetic.contains(&id.as_str()) {
            synthetic.push(id);
        }
    }
    if !synthetic.is_empty() {
        println!("# SYNTHETIC weights (timing is real, quality is meaningless): {}", synthetic.join(", "));
    }
    // The work, in the units a user can weigh against a node's speed.
    let per_cell = u64::from(cfg.run.warmup) + u64::from(cfg.run.repetitions);
    let forwards: u64 = cells.iter().map(|k| u64::from(crate::shard::forwards(k))).sum::<u64>() * per_cell;
    println!(
        "# work: {} batch generations ({} x ({} warm-up + {} repetitions)), {}{forwards} forward passes{}{}",
        cells.len() as u64 * per_cell,
        crate::counted(cells.len(), "cell"),
        cfg.run.warmup,
        cfg.run.repetitions,
        if cells.iter().any(|k| k.threshold.is_some()) { "up to " } else { "" },
        if cfg.quality.is_some() { ", then the evaluators' scoring" } else { "" },
        if cfg.quality.as_ref().is_some_and(|q| q.parity_search) { ", and the parity search's cells" } else { "" }
    );
    // The prompts as `run` reads them, read once (Wikitext only once fetched: `check_cached_models` says so).
    let prompts = match file_prompts {
        Some(p) => Ok(p),
        None => resolved.load_prompts(&args.cache.dir()),
    };
    if let Some(note) = prompts.as_ref().ok().and_then(|p| p.repeated_rows_note(&cfg.grid.batch_sizes)) {
        println!("# {note}");
    }
    for note in cfg.notes() {
        println!("# {note}");
    }
    if let Some(count) = args.shards {
        println!("# {count} shards (`run --shard I/{count}`; cells split by estimated cost B x NFE x N):");
        for (i, (n, share)) in crate::shard::loads(&all, count).into_iter().enumerate() {
            println!("#   shard {i}/{count}: {}, {:.1}% of the cost", crate::counted(n, "cell"), 100.0 * share);
        }
    }
    println!(
        "{:<36} {:<40} {:>6} {:>4} {:>6} {:>7} {:>7} {:>6}",
        "model", "sampler", "K", "B", "N", "prompt", "output", "block"
    );
    for c in &cells {
        let opt = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
        println!(
            "{:<36} {:<40} {:>6} {:>4} {:>6} {:>7} {:>7} {:>6}",
            c.model,
            match c.variant() {
                Some(v) => format!("{} {v}", file_name_of(c.sampler)),
                None => file_name_of(c.sampler),
            },
            match (c.steps, c.threshold) {
                (None, Some(t)) => format!("t={t}"),
                (k, _) => opt(k),
            },
            c.batch_size,
            c.seq_len,
            c.prompt_tokens,
            c.output_tokens,
            opt(c.block_length)
        );
    }
    let mut blockers = check_cached_models(&resolved, &prompts, &args.cache.dir(), &cells)?;
    blockers.extend(crate::device::check_build(resolved.device()).err().map(|e| e.0));
    let sharded = args.shard.is_some() || args.shards.is_some();
    blockers.extend(crate::sweep::check_parity_search_shards(cfg, sharded).err().map(|e| e.0));
    if args.show_config {
        println!("\n{}", cfg.to_toml());
    }
    if !args.check || blockers.is_empty() {
        for b in &blockers {
            println!("# `run` would stop before measuring: {b}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let list: Vec<String> = blockers.iter().map(|b| format!("  - {b}")).collect();
    Err(crate::InputError(format!(
        "plan --check: `run` would stop before measuring anything ({}):\n{}",
        crate::counted(blockers.len(), "problem"),
        list.join("\n")
    ))
    .into())
}

/// The checks `run` makes of each model before loading it ([`crate::sweep::check_model`]: positions, prompts long
/// enough in tokens, the chat template), made now for every model already in `cache`, so that a grid a job would
/// refuse at once is refused before it is queued; the others (synthetic ones not written yet, checkpoints not
/// fetched) are named as not checked. Nothing is written. Returns what would stop `run` before it measures (each
/// with its fix): checkpoints to fetch, prompts that cannot be read.
fn check_cached_models(
    resolved: &plan::ResolvedConfig,
    prompts: &Result<crate::prompts::PromptSet>,
    cache: &std::path::Path,
    cells: &[CellKey],
) -> Result<Vec<String>> {
    let mut blockers = Vec::new();
    let cfg = &resolved.config;
    let (mut checked, mut to_write, mut to_fetch) = (Vec::new(), Vec::new(), Vec::new());
    for m in &cfg.models {
        match crate::model::ModelFiles::from_hf_cache(cache, &m.id, &m.revision) {
            Ok(files) => checked.push((m, crate::sweep::check_model(m, &files, cells, cfg)?)),
            Err(_) if m.synthetic.is_some() => to_write.push(m.id.clone()),
            Err(_) => to_fetch.push(m.id.clone()),
        }
    }
    // The evaluators that are not models of the grid are loaded by `run` as well: where each one is.
    let mut evaluators = Vec::new();
    for e in cfg.evaluators().into_iter().filter(|e| !cfg.models.iter().any(|m| m.id == e.id)) {
        match crate::model::ModelFiles::from_hf_cache(cache, &e.id, &e.revision) {
            Ok(_) => evaluators.push(e.id.clone()),
            Err(_) if e.synthetic.is_some() => to_write.push(format!("{} (evaluator)", e.id)),
            Err(_) => to_fetch.push(format!("{} (evaluator)", e.id)),
        }
    }
    if let Some(b) = cfg.quality.as_ref().and_then(|q| q.bertscore.as_ref()) {
        let revision = b.revision.as_deref().unwrap_or("main");
        match crate::model::ModelFiles::from_hf_cache(cache, &b.id, revision) {
            Ok(files) => match crate::model::encoder::Encoder::check_files(&files) {
                Ok(_) => evaluators.push(format!("{} (BERTScore encoder)", b.id)),
                Err(e) => blockers.push(format!("the BERTScore encoder {}: {}", b.id, crate::error_text(&e))),
            },
            Err(_) if b.synthetic.is_some() => to_write.push(format!("{} (BERTScore encoder)", b.id)),
            Err(_) => to_fetch.push(format!("{} (BERTScore encoder)", b.id)),
        }
    }
    match prompts {
        Ok(prompts) => {
            let checked: Vec<&str> = checked
                .into_iter()
                .map(|(m, c)| crate::sweep::check_prompts(m, c, prompts, cells, cfg).map(|()| m.id.as_str()))
                .collect::<Result<_>>()?;
            if !checked.is_empty() {
                println!(
                    "# checked against {}: {} (positions, prompt lengths in tokens)",
                    cache.display(),
                    checked.join(", ")
                );
            }
        }
        // Wikitext not fetched here: `fetch` checks it, `run` reads it.
        Err(e) => {
            let e = format!("{e:#}");
            let why = e.split("; fix:").next().unwrap_or(&e);
            println!("# prompt lengths not checked, the prompts cannot be read here (`run` would say so): {why}");
            blockers.push(format!("the prompts cannot be read: {e}"));
            if !checked.is_empty() {
                let ids: Vec<&str> = checked.iter().map(|(m, _)| m.id.as_str()).collect();
                println!("# checked against {}: {} (positions)", cache.display(), ids.join(", "));
            }
        }
    }
    if !evaluators.is_empty() {
        println!("# evaluators in {}: {}", cache.display(), evaluators.join(", "));
    }
    if !to_write.is_empty() {
        println!(
            "# not in {} yet, synthetic: `run` writes them (and checks them before loading): {}",
            cache.display(),
            to_write.join(", ")
        );
    }
    if !to_fetch.is_empty() {
        let config = match resolved.source.split(' ').next() {
            Some(path) if !path.starts_with("embedded:") => format!(" --config {path}"),
            _ => String::new(),
        };
        println!(
            "# not in {}: `run` would stop at them; fetch them first (`dllm-bench fetch{config}`, where the hub is \
             reachable, into this cache): {}",
            cache.display(),
            to_fetch.join(", ")
        );
        blockers.push(format!(
            "not in the cache {}: {}; fix: `dllm-bench fetch{config}` where the hub is reachable, into this cache \
             (--model-cache-dir or HF_HUB_CACHE)",
            cache.display(),
            to_fetch.join(", ")
        ));
    }
    Ok(blockers)
}
