//! `dllm-bench plan`: the cells a config expands to, without running anything.

use std::process::ExitCode;

use anyhow::Result;

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
    if resolved.config.prompts.source == schema::grid::PromptSource::File {
        resolved.load_prompts(std::path::Path::new(""))?;
    }
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
    let cells = cfg.cells();
    println!("# {} cells from {}", cells.len(), resolved.source);
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
    // Every model and evaluator whose weights the runner writes, once each.
    let evaluators = cfg.quality.iter().flat_map(|q| &q.evaluators).filter(|e| e.synthetic.is_some()).map(|e| &e.id);
    let mut synthetic: Vec<&str> = Vec::new();
    for id in cfg.models.iter().filter(|m| m.synthetic.is_some()).map(|m| &m.id).chain(evaluators) {
        if !synthetic.contains(&id.as_str()) {
            synthetic.push(id);
        }
    }
    if !synthetic.is_empty() {
        println!("# SYNTHETIC weights (timing is real, quality is meaningless): {}", synthetic.join(", "));
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
    if args.show_config {
        println!("\n{}", cfg.to_toml());
    }
    Ok(ExitCode::SUCCESS)
}
