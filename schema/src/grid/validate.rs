//! Validation of a parsed config: [`GridConfig::validate`] (every rule the runner relies on, one function per
//! table), [`GridConfig::check_used`] (fields that would drive nothing) and the hub id and revision rules.

use super::types::{is_default_dream_algs, is_default_samplers};
use super::{
    AttentionKernel, BertScoreSpec, Confidence, ConfigError, DeviceSpec, EosPolicy, GridAxes, GridConfig, GumbelNoise,
    ModelKind, ModelSpec, Precision, PromptConfig, PromptSource, QualityConfig, Remasking, RunSettings,
    SyntheticWeights, limits,
};

/// Builds the error of a broken rule: `bad(field, problem, fix)`.
type Bad<'a> = &'a dyn Fn(&str, String, &str) -> ConfigError;

impl GridConfig {
    /// Refuses fields that would drive nothing: sampler series and LLaDA's sampler settings (guidance, blocks,
    /// remasking, ranking precision, Gumbel noise) without a LLaDA model, Dream decoding rules and its nucleus
    /// filter without a Dream model, diffusion steps without either, a prompt seed without the Wikitext source;
    /// and a sequence length whose prompt would be BOS alone. For a config given to the runner (and after its
    /// overrides), not for one a bundle embeds: bundles written before these rules stay readable.
    pub fn check_used(&self, file: &str) -> Result<(), ConfigError> {
        let bad = |field: &str, problem: &str, fix: &str| ConfigError::Invalid {
            file: file.to_string(),
            field: field.to_string(),
            problem: problem.to_string(),
            fix: fix.to_string(),
        };
        let g = &self.grid;
        let has = |kind| self.models.iter().any(|m| m.kind == kind);
        let (has_llada, has_dream) = (has(ModelKind::Llada), has(ModelKind::Dream));
        if !has_llada && !is_default_samplers(&g.samplers) {
            return Err(bad(
                "grid.samplers",
                "sampler series apply to LLaDA models only, and the grid has none",
                "remove samplers (and --samplers), or add a LLaDA model to [[models]]",
            ));
        }
        if !has_dream && !is_default_dream_algs(&g.dream_algs) {
            return Err(bad(
                "grid.dream_algs",
                "Dream decoding rules apply to Dream models only, and the grid has none",
                "remove dream_algs, or add a Dream model to [[models]]",
            ));
        }
        if !has_llada && !has_dream && !g.steps.is_empty() {
            return Err(bad(
                "grid.steps",
                "diffusion steps drive LLaDA and Dream models only, and the grid has neither",
                "remove steps (and --steps), or add a diffusion model to [[models]]",
            ));
        }
        // Settings of one model kind's sampler, on a grid without that kind (each only when not its default).
        let llada_only = [
            (
                "cfg_scale",
                (g.cfg_scale != 0.0).then(|| format!("classifier-free guidance (cfg_scale = {})", g.cfg_scale)),
            ),
            ("block_length", g.block_length.map(|b| format!("block_length = {b}"))),
            (
                "remasking",
                (g.remasking != Remasking::default()).then(|| format!("remasking = \"{}\"", g.remasking.name())),
            ),
            (
                "confidence",
                (g.confidence != Confidence::default())
                    .then(|| format!("the ranking precision (confidence = \"{}\")", g.confidence.name())),
            ),
            (
                "gumbel_noise",
                (g.gumbel_noise != GumbelNoise::default())
                    .then(|| format!("the Gumbel noise's source (gumbel_noise = \"{}\")", g.gumbel_noise.name())),
            ),
        ];
        if !has_llada && let Some((name, Some(what))) = llada_only.into_iter().find(|(_, set)| set.is_some()) {
            return Err(bad(
                &format!("grid.{name}"),
                &format!(
                    "{what} applies to LLaDA models only, and the grid has none{}",
                    if has_dream && name == "block_length" { " (Dream generates its output as one block)" } else { "" }
                ),
                &format!("remove {name}, or add a LLaDA model to [[models]]"),
            ));
        }
        if !has_llada && !has_dream && g.temperature != 0.0 {
            return Err(bad(
                "grid.temperature",
                &format!(
                    "a sampling temperature ({}) applies to the diffusion samplers only, and the grid has no \
                     diffusion model (the autoregressive model decodes greedily)",
                    g.temperature
                ),
                "remove temperature (0, greedy), or add a LLaDA or Dream model to [[models]]",
            ));
        }
        if has_llada && g.temperature == 0.0 && g.gumbel_noise != GumbelNoise::default() {
            return Err(bad(
                "grid.gumbel_noise",
                &format!(
                    "the Gumbel noise's source (gumbel_noise = \"{}\") matters only at temperature > 0, and the \
                     temperature is 0 (greedy: no noise is drawn)",
                    g.gumbel_noise.name()
                ),
                "remove gumbel_noise, or set a temperature above 0",
            ));
        }
        if !has(ModelKind::Llama) && g.eos != EosPolicy::default() {
            return Err(bad(
                "grid.eos",
                "the behaviour at EOS applies to the autoregressive model only, and the grid has none",
                "remove eos, or add a llama-kind model to [[models]]",
            ));
        }
        if !has_dream && let Some(p) = g.top_p {
            return Err(bad(
                "grid.top_p",
                &format!("the nucleus filter (top_p = {p}) applies to Dream models only, and the grid has none"),
                "remove top_p, or add a Dream model to [[models]]",
            ));
        }
        // The prompt starts with BOS: one prompt token would be BOS alone, with no text to continue. (Lengths that
        // leave no prompt at all are `validate`'s, a rule bundles have always kept.)
        for (i, &n) in g.seq_lengths.iter().enumerate() {
            if self.split(n).is_some_and(|s| s.prompt_tokens < 2) {
                let problem = match g.output_tokens {
                    Some(out) => format!("N = {n} leaves a prompt of 1 token with output_tokens = {out}: BOS alone"),
                    None => format!("N = {n} leaves a prompt of 1 token at this prompt_fraction: BOS alone"),
                };
                return Err(bad(&format!("grid.seq_lengths[{i}]"), &problem, &short_length_fix(g)));
            }
        }
        if self.prompts.seed != 0 && self.prompts.source != PromptSource::Wikitext {
            return Err(bad(
                "prompts.seed",
                "only the Wikitext selection is seeded (a file's and the embedded prompts are taken in order)",
                "remove seed, or set source = \"wikitext\"",
            ));
        }
        Ok(())
    }

    /// Checks every rule the runner relies on. `file` names the config in errors.
    ///
    /// The tables are checked in this order, and the first broken rule is the error: `[run]`, `[prompts]`, the
    /// axes of `[grid]`, `[[models]]`, `[quality]`, then the rules of `[grid]` that depend on the models' kinds
    /// (its series, then each sequence length's split, blocks and steps).
    pub fn validate(&self, file: &str) -> Result<(), ConfigError> {
        let bad = |field: &str, problem: String, fix: &str| ConfigError::Invalid {
            file: file.to_string(),
            field: field.to_string(),
            problem,
            fix: fix.to_string(),
        };
        run(&self.run, &bad)?;
        prompts(&self.prompts, &bad)?;
        grid(&self.grid, &bad)?;
        models(&self.models, &bad)?;
        if let Some(q) = &self.quality {
            quality(q, &self.models, self.prompts.prompt_count(), &bad)?;
        }
        grid_series(&self.grid, &self.models, &bad)?;
        grid_lengths(self, &bad)
    }
}

/// The rules of the `[run]` table.
fn run(run: &RunSettings, bad: Bad) -> Result<(), ConfigError> {
    if run.name.is_empty()
        || run.name.starts_with('.')
        || !run.name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(bad(
            "run.name",
            format!("{:?} is not a usable file-name prefix", run.name),
            "use letters, digits, '-', '_' or '.' (not first), e.g. name = \"experiments\"",
        ));
    }
    if run.name.len() > limits::RUN_NAME_CHARS {
        return Err(bad(
            "run.name",
            format!(
                "{} characters, more than {} (the name prefixes file names)",
                run.name.len(),
                limits::RUN_NAME_CHARS
            ),
            "use a shorter name",
        ));
    }
    if DeviceSpec::parse(&run.device).is_none() {
        return Err(bad(
            "run.device",
            format!("{:?} is not a device", run.device),
            "use \"cpu\", \"cuda\" or \"cuda:N\" (N = the GPU's ordinal)",
        ));
    }
    if run.attention == AttentionKernel::Fused && matches!(DeviceSpec::parse(&run.device), Some(DeviceSpec::Cuda(_))) {
        return Err(bad(
            "run.attention",
            format!("\"fused\" is the CPU's kernel; {} runs \"ops\" or \"cudnn\"", run.device),
            "set run.attention = \"ops\" (the default) or \"cudnn\" (cuDNN's fused attention, bf16) on a GPU, or run \
             on the CPU",
        ));
    }
    let cuda = matches!(DeviceSpec::parse(&run.device), Some(DeviceSpec::Cuda(_)));
    if run.attention == AttentionKernel::Cudnn {
        if !cuda {
            return Err(bad(
                "run.attention",
                format!("\"cudnn\" is cuDNN's attention on a GPU; run.device is {:?}", run.device),
                "set run.attention = \"ops\" or \"fused\" on the CPU, or run on \"cuda\"",
            ));
        }
        if run.dtype == Precision::F32 || run.attention_f32 {
            return Err(bad(
                "run.attention",
                "cuDNN's fused attention takes bf16 or f16 inputs (it has no f32 flash attention)".into(),
                "run in bf16 (run.dtype = \"bf16\", without run.attention_f32), or use run.attention = \"ops\"",
            ));
        }
    }
    if run.cuda_graphs && !cuda {
        return Err(bad(
            "run.cuda_graphs",
            format!("CUDA graphs replay GPU work; run.device is {:?}", run.device),
            "set run.cuda_graphs = false (or drop --cuda-graphs) on the CPU, or run on \"cuda\"",
        ));
    }
    if run.cuda_fused_ops && !cuda {
        return Err(bad(
            "run.cuda_fused_ops",
            format!("the CPU always runs RMSNorm, RoPE and SwiGLU fused; run.device is {:?}", run.device),
            "set run.cuda_fused_ops = false (or drop --cuda-fused-ops) on the CPU, or run on \"cuda\"",
        ));
    }
    if run.repetitions == 0 {
        return Err(bad(
            "run.repetitions",
            "0 measured runs would measure nothing".into(),
            "set repetitions to 1 or more (the study uses 5 or more on GPUs)",
        ));
    }
    for (field, value, limit) in
        [("run.repetitions", run.repetitions, limits::REPETITIONS), ("run.warmup", run.warmup, limits::WARMUP)]
    {
        if value > limit {
            return Err(bad(field, format!("{value} is more than the limit {limit}"), "use a smaller value"));
        }
    }
    Ok(())
}

/// The rules of the `[prompts]` table.
fn prompts(p: &PromptConfig, bad: Bad) -> Result<(), ConfigError> {
    if p.prompt_count() > limits::PROMPTS {
        return Err(bad(
            "prompts.count",
            format!("{} prompts, more than the limit {}", p.prompt_count(), limits::PROMPTS),
            "use a smaller count (the study's largest set has 128)",
        ));
    }
    match (p.count, p.preset) {
        (0, None) => {
            return Err(bad(
                "prompts.count",
                "no prompts: count is 0 (or not set) and there is no preset".into(),
                "set preset = \"small\", \"medium\" or \"large\" (8, 32 or 128 prompts), or count = N",
            ));
        }
        (n, Some(p)) if n != 0 && n != p.count() => {
            return Err(bad(
                "prompts.preset",
                format!("count = {n} and preset = \"{}\" ({} prompts) are both set", p.name(), p.count()),
                "keep one of them: preset for the study's sizes, count for any other",
            ));
        }
        _ => {}
    }
    let source = p.source;
    if source == PromptSource::File && p.path.is_none() {
        return Err(bad(
            "prompts.path",
            "source = \"file\" needs a path".into(),
            "set path = \"prompts.jsonl\" (JSONL with a \"prompt\" and an optional \"reference\" field, or \
             plain text)",
        ));
    }
    if source != PromptSource::File && p.path.is_some() {
        return Err(bad(
            "prompts.path",
            format!("a path is only read with source = \"file\" (source is \"{}\")", source.name()),
            "remove path, or set source = \"file\"",
        ));
    }
    let wikitext_only = [
        ("prompts.dataset", p.dataset.is_some()),
        ("prompts.revision", p.revision.is_some()),
        ("prompts.min_chars", p.min_chars.is_some()),
    ];
    if source != PromptSource::Wikitext
        && let Some((field, _)) = wikitext_only.iter().find(|(_, set)| *set)
    {
        return Err(bad(
            field,
            format!("only used with source = \"wikitext\" (source is \"{}\")", source.name()),
            "remove it, or set source = \"wikitext\"",
        ));
    }
    let id = p.dataset();
    if id.split('/').count() > 2 || id.split('/').any(str::is_empty) || id.contains(char::is_whitespace) {
        return Err(bad(
            "prompts.dataset",
            format!("{id:?} is not a hub dataset id"),
            "use ORG/NAME, e.g. dataset = \"Salesforce/wikitext\"",
        ));
    }
    if p.revision().trim().is_empty() {
        return Err(bad("prompts.revision", "empty revision".into(), "use a branch, tag or commit, e.g. \"main\""));
    }
    if p.min_chars == Some(0) {
        return Err(bad(
            "prompts.min_chars",
            "0 would admit empty documents".into(),
            "use e.g. 6000 (the default), or more for N above 1024",
        ));
    }
    Ok(())
}

/// The rules of the `[grid]` table that hold whatever the models are: the lengths and batch sizes, the
/// prompt/output split, the temperature and the guidance scale (the rest, [`grid_series`] and [`grid_lengths`],
/// is checked after the models and the quality table).
fn grid(g: &GridAxes, bad: Bad) -> Result<(), ConfigError> {
    for (field, values, limit) in [
        ("grid.seq_lengths", &g.seq_lengths, limits::SEQ_LEN),
        ("grid.batch_sizes", &g.batch_sizes, limits::BATCH_SIZE),
    ] {
        if values.is_empty() {
            return Err(bad(field, "the list is empty".into(), "list at least one value"));
        }
        if let Some(i) = values.iter().position(|&v| v == 0) {
            return Err(bad(&format!("{field}[{i}]"), "0 is not allowed".into(), "use values of 1 or more"));
        }
        if let Some(i) = values.iter().position(|&v| v > limit) {
            return Err(bad(
                &format!("{field}[{i}]"),
                format!("{} is more than the limit {limit}", values[i]),
                "use smaller values",
            ));
        }
    }
    for (field, values) in
        [("grid.seq_lengths", &g.seq_lengths), ("grid.batch_sizes", &g.batch_sizes), ("grid.steps", &g.steps)]
    {
        if let Some((i, v)) = first_duplicate(values) {
            return Err(bad(
                &format!("{field}[{i}]"),
                format!("{v} is listed twice (two cells would have one key)"),
                "list each value once",
            ));
        }
    }
    match (g.output_tokens, g.prompt_fraction) {
        (Some(_), Some(_)) | (None, None) => {
            return Err(bad(
                "grid.output_tokens",
                "exactly one of output_tokens and prompt_fraction must be set".into(),
                "set output_tokens = 128 (fixed N_out, prompt = N - N_out) or prompt_fraction = 0.5",
            ));
        }
        (Some(0), _) => {
            return Err(bad(
                "grid.output_tokens",
                "0 tokens: every cell generates at least one".into(),
                "set output_tokens = 128 (the study's N_out), or another positive number",
            ));
        }
        (_, Some(f)) if !(f > 0.0 && f < 1.0) => {
            return Err(bad(
                "grid.prompt_fraction",
                format!("{f} is not strictly between 0 and 1"),
                "use e.g. 0.5 (half prompt, half generation)",
            ));
        }
        _ => {}
    }
    if !(g.temperature >= 0.0 && g.temperature <= limits::TEMPERATURE) {
        return Err(bad(
            "grid.temperature",
            format!("{} is not a temperature", g.temperature),
            &format!(
                "use 0 (greedy, the study's setting) or a small positive value such as 0.1 (at most {})",
                limits::TEMPERATURE
            ),
        ));
    }
    if !(g.cfg_scale >= 0.0 && g.cfg_scale <= limits::CFG_SCALE) {
        return Err(bad(
            "grid.cfg_scale",
            format!("{} is not a guidance scale", g.cfg_scale),
            &format!("use 0 (no guidance, the default) or a positive scale up to {}", limits::CFG_SCALE),
        ));
    }
    Ok(())
}

/// The rules of the `[[models]]` tables.
fn models(models: &[ModelSpec], bad: Bad) -> Result<(), ConfigError> {
    if models.is_empty() {
        return Err(bad(
            "models",
            "no models".into(),
            "add [[models]] tables with kind = \"llama\", \"llada\" or \"dream\" and an id",
        ));
    }
    for (i, m) in models.iter().enumerate() {
        if let Some(problem) = hub_id_problem(&m.id) {
            return Err(bad(&format!("models[{i}].id"), problem, "use a hub id such as \"GSAI-ML/LLaDA-8B-Base\""));
        }
        if let Some(problem) = revision_problem(&m.revision) {
            return Err(bad(&format!("models[{i}].revision"), problem, "use a branch, tag or commit, e.g. \"main\""));
        }
        if models[..i].iter().any(|o| o.id == m.id) {
            return Err(bad(
                &format!("models[{i}].id"),
                format!(
                    "{} is listed twice (cells are keyed by the model id, so two revisions would share keys)",
                    m.id
                ),
                "list each model once; compare two revisions of one model in two runs",
            ));
        }
        if let Some(s) = &m.synthetic {
            validate_synthetic(s, &format!("models[{i}].synthetic"), bad)?;
        }
    }
    Ok(())
}

/// The rules of the `[quality]` table; `models` are the measured models, `prompt_count` the prompt set's size.
fn quality(q: &QualityConfig, models: &[ModelSpec], prompt_count: u32, bad: Bad) -> Result<(), ConfigError> {
    for (i, e) in q.evaluators.iter().enumerate() {
        let field = format!("quality.evaluators[{i}]");
        match models.iter().find(|m| m.id == e.id) {
            Some(m) if m.kind != ModelKind::Llama => {
                return Err(bad(
                    &format!("{field}.id"),
                    format!("{} is a \"{}\" model; an evaluator scores text left to right", e.id, m.kind.name()),
                    "name a Llama-layout checkpoint, e.g. id = \"meta-llama/Meta-Llama-3-8B\"",
                ));
            }
            Some(m) if e.synthetic.is_some() || e.revision.as_ref().is_some_and(|r| *r != m.revision) => {
                return Err(bad(
                    &field,
                    format!("{} is also a measured model; it cannot have its own revision or weights", e.id),
                    "give only the id to reuse the measured model, or use another id",
                ));
            }
            _ => {}
        }
        if let Some(problem) = hub_id_problem(&e.id) {
            return Err(bad(&format!("{field}.id"), problem, "use a hub id such as \"meta-llama/Meta-Llama-3-8B\""));
        }
        if let Some(problem) = e.revision.as_deref().and_then(revision_problem) {
            return Err(bad(&format!("{field}.revision"), problem, "use a branch, tag or commit, e.g. \"main\""));
        }
        if let Some(s) = &e.synthetic {
            validate_synthetic(s, &format!("{field}.synthetic"), bad)?;
        }
        if q.evaluators[..i].iter().any(|o| o.id == e.id) {
            return Err(bad(&format!("{field}.id"), format!("{} is listed twice", e.id), "list it once"));
        }
    }
    if let Some(b) = &q.bertscore {
        bertscore(b, models, bad)?;
    }
    let text_metrics = ["unigram_entropy", "distinct_1", "distinct_2", "rouge_l_f1", "token_f1"];
    let m = q.parity_metric.as_str();
    if m == "bertscore_f1" && q.bertscore.is_none() {
        return Err(bad(
            "quality.parity_metric",
            "bertscore_f1 needs an encoder, and there is no [quality.bertscore] table".into(),
            "add [quality.bertscore] with id = \"FacebookAI/roberta-large\", or use parity_metric = \"rouge_l_f1\"",
        ));
    }
    if m == "perplexity" && q.evaluators.is_empty() {
        return Err(bad(
            "quality.parity_metric",
            "perplexity needs an evaluator, and quality.evaluators is empty".into(),
            "add [[quality.evaluators]] id = \"meta-llama/Meta-Llama-3-8B\", or use parity_metric = \
             \"rouge_l_f1\"",
        ));
    }
    if !["perplexity", "bertscore_f1"].contains(&m) && !text_metrics.contains(&m) {
        return Err(bad(
            "quality.parity_metric",
            format!("unknown metric {m:?}"),
            &format!("use \"perplexity\", \"bertscore_f1\" or one of {}", text_metrics.join(", ")),
        ));
    }
    let draws = u64::from(q.bootstrap_resamples) * u64::from(prompt_count);
    if draws > limits::BOOTSTRAP_DRAWS {
        return Err(bad(
            "quality.bootstrap_resamples",
            format!(
                "{} resamples of {} prompts are {draws} draws, more than the limit {}",
                q.bootstrap_resamples,
                prompt_count,
                limits::BOOTSTRAP_DRAWS
            ),
            "use fewer resamples (1000, the default, gives stable 95% intervals)",
        ));
    }
    if q.bootstrap_resamples == 0 || q.bootstrap_resamples > limits::BOOTSTRAP_RESAMPLES {
        return Err(bad(
            "quality.bootstrap_resamples",
            format!(
                "{} resamples: 0 give no interval, more than {} only take time",
                q.bootstrap_resamples,
                limits::BOOTSTRAP_RESAMPLES
            ),
            &format!("use 1000 (the default), or any number from 1 to {}", limits::BOOTSTRAP_RESAMPLES),
        ));
    }
    Ok(())
}

/// The rules of the `[grid]` table's series, which depend on the models' kinds: Dream's decoding rules and nucleus
/// filter, the steps, LLaDA's sampler series and the thresholds.
fn grid_series(g: &GridAxes, models: &[ModelSpec], bad: Bad) -> Result<(), ConfigError> {
    let has_llada = models.iter().any(|m| m.kind == ModelKind::Llada);
    let has_dream = models.iter().any(|m| m.kind == ModelKind::Dream);
    if g.dream_algs.is_empty() {
        return Err(bad(
            "grid.dream_algs",
            "no Dream decoding rule".into(),
            "list at least one of \"origin\", \"maskgit_plus\", \"topk_margin\", \"entropy\" (default [\"entropy\"])",
        ));
    }
    if let Some(j) = (1..g.dream_algs.len()).find(|&j| g.dream_algs[..j].contains(&g.dream_algs[j])) {
        return Err(bad(
            &format!("grid.dream_algs[{j}]"),
            format!("{} is listed twice", g.dream_algs[j]),
            "list each rule once",
        ));
    }
    if let Some(p) = g.top_p
        && !(p > 0.0 && p <= 1.0)
    {
        return Err(bad(
            "grid.top_p",
            format!("{p} is not in (0, 1]"),
            "use e.g. 0.95, or remove it (no nucleus filter)",
        ));
    }
    if has_dream && g.steps.is_empty() {
        return Err(bad("grid.steps", "a Dream model needs diffusion steps".into(), "list steps, e.g. [32, 64, 128]"));
    }
    if g.samplers.is_empty() {
        return Err(bad(
            "grid.samplers",
            "no sampler series".into(),
            "list at least one, e.g. [\"reference\"] (the default when the field is absent)",
        ));
    }
    if let Some(j) = (1..g.samplers.len()).find(|&j| g.samplers[..j].contains(&g.samplers[j])) {
        return Err(bad(
            &format!("grid.samplers[{j}]"),
            format!("{} is listed twice", g.samplers[j]),
            "list each series once",
        ));
    }
    let k_driven = g.samplers.iter().any(|v| !v.thresholded());
    let thresholded = g.samplers.iter().any(|v| v.thresholded());
    if has_llada && k_driven && g.steps.is_empty() {
        return Err(bad("grid.steps", "a LLaDA model needs diffusion steps".into(), "list steps, e.g. [32, 64, 128]"));
    }
    if has_llada && !has_dream && !k_driven && !g.steps.is_empty() {
        return Err(bad(
            "grid.steps",
            "only threshold series are listed in grid.samplers: steps would drive nothing".into(),
            "remove steps, or add a K-driven series (\"reference\", \"prefix\" or \"dual\") to samplers",
        ));
    }
    if has_llada && thresholded && g.thresholds.is_empty() {
        return Err(bad(
            "grid.thresholds",
            "a threshold series is listed in grid.samplers but no threshold".into(),
            "list thresholds, e.g. [0.9, 0.7, 0.5]",
        ));
    }
    if !thresholded && !g.thresholds.is_empty() {
        return Err(bad(
            "grid.thresholds",
            "thresholds drive only the threshold series, and grid.samplers lists none".into(),
            "add \"threshold\" or \"prefix+threshold\" to samplers, or remove thresholds",
        ));
    }
    for (j, &t) in g.thresholds.iter().enumerate() {
        if !(t.is_finite() && t >= 0.0) {
            return Err(bad(
                &format!("grid.thresholds[{j}]"),
                format!("{t} is not a finite number >= 0"),
                "use a confidence in [0, 1], e.g. 0.9 (above 1 commits one token per step)",
            ));
        }
        // By value: 0 and -0 are one threshold.
        if g.thresholds[..j].contains(&t) {
            return Err(bad(&format!("grid.thresholds[{j}]"), format!("{t} is listed twice"), "list each once"));
        }
    }
    Ok(())
}

/// The rules of the `[grid]` table at each sequence length: its prompt/output split, and for diffusion models the
/// block length and the steps.
fn grid_lengths(c: &GridConfig, bad: Bad) -> Result<(), ConfigError> {
    let g = &c.grid;
    let has_llada = c.models.iter().any(|m| m.kind == ModelKind::Llada);
    let has_dream = c.models.iter().any(|m| m.kind == ModelKind::Dream);
    for (i, &n) in g.seq_lengths.iter().enumerate() {
        let split = c.split(n).ok_or_else(|| {
            bad(
                &format!("grid.seq_lengths[{i}]"),
                match g.output_tokens {
                    Some(out) => format!("N = {n} leaves no prompt tokens with output_tokens = {out}"),
                    None => format!("N = {n} leaves no prompt or no output tokens at this prompt_fraction"),
                },
                &short_length_fix(g),
            )
        })?;
        if !has_llada && !has_dream {
            continue;
        }
        // Dream generates its whole output as one block (its sampler has no blocks).
        let block = if has_llada { g.block_length.unwrap_or(split.output_tokens) } else { split.output_tokens };
        if block == 0 || split.output_tokens % block != 0 {
            return Err(bad(
                "grid.block_length",
                format!("{block} does not divide the {} output tokens of N = {n}", split.output_tokens),
                "choose a block_length that divides output_tokens, or remove it (one block)",
            ));
        }
        let blocks = split.output_tokens / block;
        let most = split.output_tokens.saturating_mul(limits::STEPS_PER_OUTPUT_TOKEN);
        if let Some(j) = g.steps.iter().position(|&k| k > most) {
            return Err(bad(
                &format!("grid.steps[{j}]"),
                format!(
                    "{} steps for {} output tokens at N = {n}: more than {} steps per token, where steps past \
                     one per token commit nothing",
                    g.steps[j],
                    split.output_tokens,
                    limits::STEPS_PER_OUTPUT_TOKEN
                ),
                &format!("use at most {most} steps (K = N_out is one token per step)"),
            ));
        }
        for (j, &k) in g.steps.iter().enumerate() {
            if k == 0 || k % blocks != 0 {
                return Err(bad(
                    &format!("grid.steps[{j}]"),
                    format!(
                        "{k} steps is not a positive multiple of the {blocks} blocks \
                         (output_tokens {} / block_length {block}) at N = {n}",
                        split.output_tokens
                    ),
                    &format!("use steps that are multiples of {blocks}, or a larger block_length"),
                ));
            }
        }
    }
    Ok(())
}

/// The fix of a sequence length too short for a prompt (BOS and at least one token) and the output.
fn short_length_fix(g: &GridAxes) -> String {
    match g.output_tokens {
        Some(out) => format!(
            "use sequence lengths of at least output_tokens + 2 = {} (BOS and one prompt token), or prompt_fraction \
             for short N",
            out.saturating_add(2)
        ),
        None => "use longer sequence lengths, or a prompt_fraction nearer 0.5".into(),
    }
}

/// The limits of a `synthetic` table (`field` names it).
fn validate_synthetic(s: &SyntheticWeights, field: &str, bad: Bad) -> Result<(), ConfigError> {
    for (name, value, limit) in [
        ("shards", s.shards, limits::SYNTH_SHARDS),
        ("layers", s.layers, limits::SYNTH_LAYERS),
        ("hidden", s.hidden, limits::SYNTH_HIDDEN),
    ] {
        match value {
            Some(0) => {
                return Err(bad(
                    &format!("{field}.{name}"),
                    "0 is not allowed".into(),
                    "use 1 or more, or remove it for the preset's value",
                ));
            }
            Some(v) if v > limit => {
                return Err(bad(
                    &format!("{field}.{name}"),
                    format!("{v} is more than the limit {limit}"),
                    "use a smaller value, or remove it for the preset's value",
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The rules of `[quality.bertscore]`: a hub id that is not a measured model, a revision, and a layer (named, or
/// the `bert_score` package's for the checkpoint); a synthetic encoder's layers within the limit, the layer among
/// them.
fn bertscore(b: &BertScoreSpec, models: &[ModelSpec], bad: Bad) -> Result<(), ConfigError> {
    let field = "quality.bertscore";
    if let Some(problem) = hub_id_problem(&b.id) {
        return Err(bad(&format!("{field}.id"), problem, "use a hub id such as \"FacebookAI/roberta-large\""));
    }
    if models.iter().any(|m| m.id == b.id) {
        return Err(bad(
            &format!("{field}.id"),
            format!("{} is a measured model; BERTScore needs a BERT or RoBERTa encoder", b.id),
            "name an encoder checkpoint, e.g. id = \"FacebookAI/roberta-large\"",
        ));
    }
    if let Some(problem) = b.revision.as_deref().and_then(revision_problem) {
        return Err(bad(&format!("{field}.revision"), problem, "use a branch, tag or commit, e.g. \"main\""));
    }
    let layers = b.synthetic.as_ref().map(|s| s.layers.unwrap_or(2));
    if let Some(n) = layers
        && (n == 0 || n > limits::SYNTH_LAYERS)
    {
        return Err(bad(
            &format!("{field}.synthetic.layers"),
            format!("{n} layers: the encoder needs 1 to {}", limits::SYNTH_LAYERS),
            "use a small number such as 2, or remove it",
        ));
    }
    match b.layer() {
        None => Err(bad(
            &format!("{field}.layer"),
            format!("{} is not a checkpoint whose BERTScore layer is known", b.id),
            "name the encoder layer to compare, e.g. layer = 17 (roberta-large's in the bert_score package)",
        )),
        Some(0) => Err(bad(
            &format!("{field}.layer"),
            "layer 0 is the embeddings, before any context".into(),
            "use a layer from 1 to the encoder's number of layers",
        )),
        Some(l) if layers.is_some_and(|n| l > n) => Err(bad(
            &format!("{field}.layer"),
            format!("layer {l}, and the synthetic encoder has {} layers", layers.unwrap_or_default()),
            "use a layer it has, or set quality.bertscore.synthetic.layers",
        )),
        Some(_) => Ok(()),
    }
}

/// The first value of `values` that appears earlier in it: `(index, value)`.
fn first_duplicate(values: &[u32]) -> Option<(usize, u32)> {
    values.iter().enumerate().find(|(i, v)| values[..*i].contains(v)).map(|(i, &v)| (i, v))
}

/// Why `id` is not a usable hub repository id (`ORG/NAME` or `NAME`: letters, digits, `-`, `_`, `.`), if not.
pub fn hub_id_problem(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("the id is empty".into());
    }
    if id.chars().count() > limits::ID_CHARS {
        return Some(format!("the id has {} characters, more than {}", id.chars().count(), limits::ID_CHARS));
    }
    if let Some(c) = id.chars().find(|c| !(c.is_ascii_alphanumeric() || "-_./".contains(*c))) {
        return Some(format!("{id:?} contains {c:?}; a hub id has only letters, digits, '-', '_', '.' and one '/'"));
    }
    let parts: Vec<&str> = id.split('/').collect();
    if parts.len() > 2 || parts.iter().any(|p| p.is_empty() || *p == "." || *p == ".." || p.starts_with('.')) {
        return Some(format!("{id:?} is not ORG/NAME"));
    }
    None
}

/// Why `rev` is not a usable revision (branch, tag or commit), if not.
pub fn revision_problem(rev: &str) -> Option<String> {
    if rev.trim().is_empty() {
        return Some("the revision is empty".into());
    }
    if rev.chars().count() > limits::ID_CHARS {
        return Some(format!("the revision has {} characters, more than {}", rev.chars().count(), limits::ID_CHARS));
    }
    if let Some(c) = rev.chars().find(|c| c.is_control() || c.is_whitespace() || "\\:*?\"<>|".contains(*c)) {
        return Some(format!("{rev:?} contains {c:?}, which no branch, tag or commit has"));
    }
    if rev.split('/').any(|p| p.is_empty() || p == "." || p == "..") {
        return Some(format!("{rev:?} has an empty, '.' or '..' path component"));
    }
    None
}
