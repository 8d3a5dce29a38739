//! Grid configs: the shipped files are valid and expand as the study says; bad ones are refused with the
//! file, the field and the fix.

use std::path::PathBuf;

use schema::grid::{ConfigError, GridConfig};
use schema::{ModelKind, Sampler};

fn shipped(name: &str) -> GridConfig {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config").join(name);
    let text = std::fs::read_to_string(&path).expect("config file");
    GridConfig::from_toml(&text, name).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn primary_grid_matches_the_study() {
    let c = shipped("experiments.toml");
    assert_eq!(c.grid.seq_lengths, [512, 1024]);
    assert_eq!(c.grid.batch_sizes, [1, 4]);
    assert_eq!(c.grid.steps, [32, 64, 128]);
    assert_eq!(c.grid.output_tokens, Some(128));
    assert_eq!((c.run.warmup, c.prompts.count), (3, 32));
    assert_eq!(c.run.dtype, schema::grid::Precision::Bf16);
    // 2 N x 2 B x (1 AR + 3 K) = 16 cells.
    let cells = c.cells();
    assert_eq!(cells.len(), 16);
    let k: Vec<_> = cells.iter().filter(|c| c.sampler == Sampler::LladaLowConfidence).map(|c| c.steps).collect();
    assert_eq!(k.len(), 12);
    assert!(cells.iter().all(|c| c.prompt_tokens + c.output_tokens == c.seq_len && c.output_tokens == 128));
}

#[test]
fn instruct_grid_is_the_primary_grid_with_chat_templates() {
    let (c, primary) = (shipped("instruct.toml"), shipped("experiments.toml"));
    assert!(c.prompts.chat_template && !primary.prompts.chat_template);
    let unwrapped = schema::grid::PromptConfig { chat_template: false, ..c.prompts.clone() };
    assert_eq!(unwrapped, primary.prompts, "the same prompts, wrapped");
    assert_eq!(c.grid, primary.grid);
    assert_eq!((c.run.dtype, c.run.warmup, c.run.repetitions), (primary.run.dtype, 3, 5));
    let ids: Vec<(ModelKind, &str)> = c.models.iter().map(|m| (m.kind, m.id.as_str())).collect();
    assert_eq!(
        ids,
        [(ModelKind::Llama, "meta-llama/Meta-Llama-3-8B-Instruct"), (ModelKind::Llada, "GSAI-ML/LLaDA-8B-Instruct")]
    );
    assert_eq!(c.cells().len(), primary.cells().len());
    // An old config without the field reads as unwrapped, and a resolved one writes it back only when on.
    let toml = c.to_toml();
    assert!(toml.contains("chat_template = true"), "{toml}");
    assert!(!primary.to_toml().contains("chat_template"));
}

#[test]
fn full_grid_spans_the_study_ranges_with_a_prompt_at_n_128() {
    let c = shipped("experiments_full.toml");
    assert_eq!(c.grid.steps, [16, 32, 64, 128, 256]);
    assert_eq!(c.grid.batch_sizes, [1, 4, 8, 16, 32, 64]);
    assert_eq!(c.grid.seq_lengths, [128, 512, 1024, 2048]);
    assert_eq!(c.cells().len(), 4 * 6 * (1 + 5));
    let short = c.split(128).expect("N=128 splits");
    assert_eq!((short.prompt_tokens, short.output_tokens), (64, 64));
}

#[test]
fn every_shipped_config_is_valid() {
    for name in [
        "experiments.toml",
        "experiments_full.toml",
        "experiments_mini.toml",
        "experiments_cpu_test.toml",
        "demo.toml",
        "llama31.toml",
        "instruct.toml",
        "dream.toml",
        "dream_demo.toml",
    ] {
        let c = shipped(name);
        assert!(!c.cells().is_empty(), "{name}");
        assert!(
            c.models.iter().any(|m| m.kind == ModelKind::Llama) && c.models.iter().any(|m| m.kind != ModelKind::Llama)
        );
    }
    // The Dream pair: one series per `alg`, each at every K, one block of N_out, at the primary grid's shapes.
    let dream = shipped("dream.toml");
    let primary = shipped("experiments.toml");
    assert_eq!(
        (&dream.grid.seq_lengths, &dream.grid.batch_sizes),
        (&primary.grid.seq_lengths, &primary.grid.batch_sizes)
    );
    let dream_cells: Vec<_> = dream.cells().into_iter().filter(|k| k.sampler.kind() == ModelKind::Dream).collect();
    assert_eq!(dream_cells.len(), 4 * 3 * 2 * 2);
    assert!(dream_cells.iter().all(|k| k.block_length == Some(k.output_tokens) && k.steps.is_some()));
    assert_eq!(shipped("experiments_cpu_test.toml").run.warmup, 1);
    assert_eq!(shipped("experiments_cpu_test.toml").run.dtype, schema::grid::Precision::F32);
}

#[test]
fn every_config_file_of_the_repository_is_valid() {
    // Those the list above leaves out too (the GPU sessions' and SLURM's), so that a new rule never refuses one.
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("config/")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    names.sort();
    assert!(names.len() >= 9 && names.iter().any(|n| n == "gpu_energy.toml"), "{names:?}");
    for name in names {
        assert!(!shipped(&name).cells().is_empty(), "{name}");
    }
}

#[test]
fn resolved_config_round_trips_through_toml() {
    let c = shipped("experiments.toml");
    assert_eq!(GridConfig::from_toml(&c.to_toml(), "resolved").expect("valid"), c);
}

const BASE: &str = r#"
[run]
name = "t"
dtype = "f32"
warmup = 1
repetitions = 2

[prompts]
source = "embedded"
count = 4

[grid]
seq_lengths = [64]
batch_sizes = [1, 2]
steps = [8, 16]
output_tokens = 32

[[models]]
kind = "llama"
id = "a/llama"

[[models]]
kind = "llada"
id = "b/llada"
"#;

fn refuse(edit: impl Fn(&str) -> String, field: &str, fix: &str) {
    let text = edit(BASE);
    let err = GridConfig::from_toml(&text, "my.toml").expect_err("must be refused");
    let msg = err.to_string();
    assert!(msg.starts_with("my.toml"), "names the file: {msg}");
    assert!(msg.contains(field), "names {field:?}: {msg}");
    assert!(msg.contains(fix), "says the fix {fix:?}: {msg}");
}

#[test]
fn base_is_valid() {
    GridConfig::from_toml(BASE, "my.toml").expect("valid");
}

#[test]
fn batch_size_zero() {
    refuse(|t| t.replace("batch_sizes = [1, 2]", "batch_sizes = [1, 0]"), "grid.batch_sizes[1]", "1 or more");
}

#[test]
fn steps_not_divisible_by_blocks() {
    refuse(
        |t| t.replace("output_tokens = 32", "output_tokens = 32\nblock_length = 8").replace("[8, 16]", "[8, 10]"),
        "grid.steps[1]",
        "multiples of 4",
    );
}

#[test]
fn block_length_not_dividing_output() {
    refuse(
        |t| t.replace("output_tokens = 32", "output_tokens = 32\nblock_length = 12"),
        "grid.block_length",
        "divides output_tokens",
    );
}

#[test]
fn unknown_model_kind() {
    let err =
        GridConfig::from_toml(&BASE.replace("kind = \"llama\"", "kind = \"gpt\""), "my.toml").expect_err("refused");
    let msg = err.to_string();
    assert!(matches!(err, ConfigError::Parse { .. }));
    assert!(msg.contains("my.toml") && msg.contains("gpt") && msg.contains("llama") && msg.contains("line"), "{msg}");
}

#[test]
fn unknown_field_is_a_typo_not_ignored() {
    let err = GridConfig::from_toml(&BASE.replace("warmup = 1", "warmpu = 1"), "my.toml").expect_err("refused");
    assert!(err.to_string().contains("warmpu"), "{err}");
    // In an optional table and in a list of tables: the path as the config writes it, no `?` for the option.
    let text = format!("{BASE}\n[quality]\nparity_metric = \"rouge_l_f1\"\nbootstrap_resampels = 10\n");
    let err = GridConfig::from_toml(&text, "my.toml").expect_err("refused");
    assert!(err.to_string().contains("unknown field `quality.bootstrap_resampels`"), "{err}");
    let text = BASE.replace("id = \"a/llama\"", "id = \"a/llama\"\nsynthetic = { preset = \"tiny\", layerz = 2 }");
    let err = GridConfig::from_toml(&text, "my.toml").expect_err("refused");
    assert!(err.to_string().contains("unknown field `models[0].synthetic.layerz`"), "{err}");
}

#[test]
fn a_value_of_the_wrong_type_says_what_the_field_takes() {
    for (from, to, takes) in [
        ("warmup = 1", "warmup = \"one\"", "a whole number such as 3, without quotes"),
        ("warmup = 1", "warmup = 1.5", "a whole number such as 3, without quotes"),
        ("warmup = 1", "warmup = -1", "a whole number from 0 to 4294967295"),
        ("repetitions = 2", "repetitions = [2]", "a whole number such as 3, without quotes"),
    ] {
        let text = BASE.replace(from, to);
        assert_ne!(text, BASE, "{from:?} not in BASE");
        let err = GridConfig::from_toml(&text, "my.toml").expect_err("refused").to_string();
        assert!(err.starts_with("my.toml: line ") && err.contains(to), "{err}");
        assert!(err.contains(&format!("\n  fix: write the value as {takes}; config/experiments.toml")), "{err}");
    }
    let lists = BASE.lines().find(|l| l.starts_with("seq_lengths")).expect("seq_lengths in BASE");
    let err = GridConfig::from_toml(&BASE.replace(lists, "seq_lengths = 48"), "my.toml").expect_err("refused");
    assert!(err.to_string().contains("fix: write the value as a list in brackets, such as [1, 4]"), "{err}");
}

#[test]
fn missing_section() {
    let text = BASE.replace("[prompts]\nsource = \"embedded\"\ncount = 4\n", "");
    let err = GridConfig::from_toml(&text, "my.toml").expect_err("refused");
    assert!(err.to_string().contains("prompts"), "{err}");
}

#[test]
fn zero_repetitions() {
    refuse(|t| t.replace("repetitions = 2", "repetitions = 0"), "run.repetitions", "1 or more");
}

#[test]
fn both_length_rules() {
    refuse(
        |t| t.replace("output_tokens = 32", "output_tokens = 32\nprompt_fraction = 0.5"),
        "grid.output_tokens",
        "prompt_fraction",
    );
}

#[test]
fn no_prompt_left() {
    refuse(
        |t| t.replace("seq_lengths = [64]", "seq_lengths = [64, 32]"),
        "grid.seq_lengths[1]",
        "at least output_tokens + 2",
    );
}

#[test]
fn a_prompt_of_bos_alone_is_refused() {
    // N = N_out + 1 leaves one prompt token: BOS, and no text to continue.
    refuse(
        |t| t.replace("seq_lengths = [64]", "seq_lengths = [64, 33]"),
        "grid.seq_lengths[1]",
        "output_tokens + 2 = 34",
    );
    assert!(refusal(|t| t.replace("seq_lengths = [64]", "seq_lengths = [33]")).contains("BOS alone"));
    let ok = BASE.replace("seq_lengths = [64]", "seq_lengths = [34]");
    GridConfig::from_toml(&ok, "my.toml").expect("BOS and one prompt token");
    // The same with prompt_fraction: round(3 x 0.2) = 1 prompt token.
    let fraction = |n: u32| {
        move |t: &str| {
            t.replace("seq_lengths = [64]", &format!("seq_lengths = [{n}]"))
                .replace("output_tokens = 32", "prompt_fraction = 0.2")
                .replace("steps = [8, 16]", "steps = [2]")
        }
    };
    refuse(fraction(3), "grid.seq_lengths[0]", "prompt_fraction nearer 0.5");
    assert!(refusal(fraction(3)).contains("BOS alone"), "{}", refusal(fraction(3)));
    GridConfig::from_toml(&fraction(8)(BASE), "my.toml").expect("2 prompt tokens of 8");
    // A rule for new runs: the config of a bundle written before it (which `validate` checks) stays valid.
    let mut c = GridConfig::from_toml(BASE, "my.toml").expect("valid");
    c.grid.seq_lengths = vec![33];
    c.validate("provenance.config").expect("an old bundle's config");
    assert!(c.check_used("again.toml").is_err());
}

#[test]
fn bad_device() {
    refuse(|t| t.replace("dtype = \"f32\"", "dtype = \"f32\"\ndevice = \"gpu0\""), "run.device", "cuda:N");
}

#[test]
fn bad_fraction() {
    refuse(|t| t.replace("output_tokens = 32", "prompt_fraction = 1.5"), "grid.prompt_fraction", "0.5");
}

#[test]
fn negative_temperature() {
    refuse(|t| t.replace("output_tokens = 32", "output_tokens = 32\ntemperature = -1.0"), "grid.temperature", "greedy");
}

#[test]
fn file_source_without_path() {
    refuse(|t| t.replace("source = \"embedded\"", "source = \"file\""), "prompts.path", "prompts.jsonl");
}

#[test]
fn no_models() {
    let text = format!("models = []\n{}", BASE.split("[[models]]").next().unwrap_or_default());
    refuse(|_| text.clone(), "field `models`", "kind = \"llama\"");
}

#[test]
fn duplicate_model() {
    refuse(|t| t.replace("id = \"b/llada\"", "id = \"a/llama\""), "models[1].id", "each model once");
}

#[test]
fn duplicate_axis_values_would_give_two_cells_one_key() {
    refuse(|t| t.replace("seq_lengths = [64]", "seq_lengths = [64, 64]"), "grid.seq_lengths[1]", "each value once");
    refuse(|t| t.replace("batch_sizes = [1, 2]", "batch_sizes = [1, 1]"), "grid.batch_sizes[1]", "each value once");
    refuse(|t| t.replace("steps = [8, 16]", "steps = [8, 16, 8]"), "grid.steps[2]", "each value once");
}

#[test]
fn one_model_id_at_two_revisions_is_refused() {
    let text = BASE.replace("id = \"b/llada\"", "id = \"a/llama\"\nrevision = \"other\"");
    let err = GridConfig::from_toml(&text, "my.toml").expect_err("two revisions share cell keys");
    assert!(err.to_string().contains("models[1].id"), "{err}");
}

#[test]
fn model_ids_and_revisions_are_hub_ids() {
    for bad in ["a/b/c", "a//b", "../x", "a/..", "with space", "nul\\u0000id", "tab\\tid", ""] {
        refuse(|t| t.replace("id = \"a/llama\"", &format!("id = \"{bad}\"")), "models[0].id", "hub id");
    }
    refuse(|t| t.replace("id = \"a/llama\"", &format!("id = \"a/{}\"", "x".repeat(300))), "models[0].id", "hub id");
    for bad in ["", "a b", "x\\u0000", "../../etc", "a//b"] {
        refuse(
            |t| t.replace("id = \"a/llama\"", &format!("id = \"a/llama\"\nrevision = \"{bad}\"")),
            "models[0].revision",
            "branch, tag or commit",
        );
    }
    // Real ids and revisions pass.
    let ok = BASE.replace("id = \"a/llama\"", "id = \"meta-llama/Meta-Llama-3.1-8B\"\nrevision = \"refs/pr/12\"");
    GridConfig::from_toml(&ok, "my.toml").expect("real hub id and revision");
}

#[test]
fn sizes_beyond_what_a_machine_holds_are_refused_naming_the_limit() {
    use schema::grid::limits;
    // K far beyond one step per token (it once aborted on a 34 GB allocation).
    refuse(|t| t.replace("steps = [8, 16]", "steps = [8, 4294967295]"), "grid.steps[1]", "at most 512 steps");
    refuse(|t| t.replace("seq_lengths = [64]", "seq_lengths = [4294967295]"), "grid.seq_lengths[0]", "smaller");
    refuse(|t| t.replace("batch_sizes = [1, 2]", "batch_sizes = [1, 100000]"), "grid.batch_sizes[1]", "smaller");
    refuse(|t| t.replace("repetitions = 2", "repetitions = 10000000"), "run.repetitions", "smaller");
    refuse(|t| t.replace("warmup = 1", "warmup = 4000000000"), "run.warmup", "smaller");
    refuse(|t| t.replace("count = 4", "count = 4294967295"), "prompts.count", "smaller count");
    refuse(
        |t| format!("{t}\n[quality]\nparity_metric = \"rouge_l_f1\"\nbootstrap_resamples = 4000000000\n"),
        "quality.bootstrap_resamples",
        "1000",
    );
    // The fix names the limit the rule checks.
    refuse(
        |t| format!("{t}\n[quality]\nparity_metric = \"rouge_l_f1\"\nbootstrap_resamples = 0\n"),
        "quality.bootstrap_resamples",
        &format!("from 1 to {}", limits::BOOTSTRAP_RESAMPLES),
    );
    refuse(
        |t| t.replace("output_tokens = 32", "output_tokens = 32\ntemperature = 1e308"),
        "grid.temperature",
        "at most",
    );
    refuse(|t| t.replace("name = \"t\"", &format!("name = \"{}\"", "n".repeat(300))), "run.name", "shorter");
    for (field, value) in [("hidden", 4_000_000_000u64), ("layers", 100_000), ("shards", 5000)] {
        refuse(
            |t| {
                t.replace(
                    "id = \"a/llama\"",
                    &format!("id = \"a/llama\"\nsynthetic = {{ preset = \"tiny\", {field} = {value} }}"),
                )
            },
            &format!("models[0].synthetic.{field}"),
            "smaller value",
        );
    }
    // The limits themselves are accepted.
    let at = BASE
        .replace("seq_lengths = [64]", &format!("seq_lengths = [{}]", limits::SEQ_LEN))
        .replace("batch_sizes = [1, 2]", &format!("batch_sizes = [{}]", limits::BATCH_SIZE))
        .replace("steps = [8, 16]", &format!("steps = [{}]", 32 * limits::STEPS_PER_OUTPUT_TOKEN));
    GridConfig::from_toml(&at, "my.toml").expect("values at the limits are valid");
}

#[test]
fn bootstrap_work_is_bounded_by_resamples_times_prompts() {
    // 1,000,000 resamples are allowed, but not over 1,000 prompts (10^9 draws: hours of report).
    let text = |resamples: u32| {
        format!("{BASE}\n[quality]\nparity_metric = \"rouge_l_f1\"\nbootstrap_resamples = {resamples}\n")
            .replace("count = 4", "count = 1000")
    };
    GridConfig::from_toml(&text(100_000), "my.toml").expect("10^8 draws are within the limit");
    let err = GridConfig::from_toml(&text(1_000_000), "my.toml").expect_err("10^9 draws");
    assert!(err.to_string().contains("draws"), "{err}");
}

// ---- sampler series (1.5)

#[test]
fn sampler_series_expand_per_k_and_per_threshold() {
    let text = BASE.replace(
        "output_tokens = 32",
        "output_tokens = 32\nblock_length = 8\nsamplers = [\"reference\", \"prefix\", \"dual+threshold\"]\nthresholds = [0.9, 0.5]",
    );
    let c = GridConfig::from_toml(&text, "my.toml").expect("valid");
    let cells = c.cells();
    // Per B: 1 AR + 2 K (reference) + 2 K (prefix) + 2 thresholds (dual+threshold).
    assert_eq!(cells.len(), 2 * 7);
    let series = |v: schema::grid::SamplerVariant| cells.iter().filter(|k| k.variant() == Some(v)).count();
    use schema::grid::SamplerVariant as V;
    assert_eq!((series(V::Reference), series(V::Prefix), series(V::DualThreshold)), (4, 4, 4));
    for k in cells.iter().filter(|k| k.variant() == Some(V::DualThreshold)) {
        assert_eq!((k.steps, k.cache), (None, Some(schema::grid::BlockCache::Dual)));
        assert!(matches!(k.threshold.map(|t| t.value()), Some(0.9 | 0.5)));
    }
    assert!(
        cells.iter().filter(|k| k.variant() == Some(V::Prefix)).all(|k| k.steps.is_some() && k.threshold.is_none())
    );
    // The default is written nowhere: a config without the fields keeps its resolved form (and its hash).
    assert!(!GridConfig::from_toml(BASE, "my.toml").expect("valid").to_toml().contains("samplers"));
    assert!(c.to_toml().contains("samplers"));
    assert_eq!(GridConfig::from_toml(&c.to_toml(), "resolved").expect("round trip"), c);
}

#[test]
fn threshold_series_need_thresholds_and_nothing_else() {
    refuse(
        |t| {
            t.replace("steps = [8, 16]\n", "")
                .replace("output_tokens = 32", "output_tokens = 32\nsamplers = [\"threshold\"]")
        },
        "grid.thresholds",
        "list thresholds",
    );
    refuse(
        |t| t.replace("output_tokens = 32", "output_tokens = 32\nthresholds = [0.9]"),
        "grid.thresholds",
        "add \"threshold\"",
    );
    refuse(
        |t| t.replace("output_tokens = 32", "output_tokens = 32\nsamplers = [\"threshold\"]\nthresholds = [0.9]"),
        "grid.steps",
        "remove steps",
    );
    refuse(
        |t| {
            t.replace("steps = [8, 16]\n", "").replace(
                "output_tokens = 32",
                "output_tokens = 32\nsamplers = [\"threshold\"]\nthresholds = [0.9, -1.0]",
            )
        },
        "grid.thresholds[1]",
        "confidence in [0, 1]",
    );
    refuse(
        |t| t.replace("output_tokens = 32", "output_tokens = 32\nsamplers = [\"prefix\", \"prefix\"]"),
        "grid.samplers[1]",
        "each series once",
    );
    refuse(|t| t.replace("output_tokens = 32", "output_tokens = 32\nsamplers = []"), "grid.samplers", "at least one");
    refuse(|t| t.replace("output_tokens = 32", "output_tokens = 0"), "grid.output_tokens", "positive number");
    // Sampler series without a LLaDA model would drive nothing.
    let ar_only =
        |t: &str| t.replace("[[models]]\nkind = \"llada\"\nid = \"b/llada\"\n", "").replace("steps = [8, 16]\n", "");
    GridConfig::from_toml(&ar_only(BASE), "my.toml").expect("an AR-only grid is valid");
    // (a grid line, on the Llama-only grid, the field refused, its fix)
    for (line, llama_only, field, fix) in [
        ("samplers = [\"prefix\"]", true, "grid.samplers", "add a LLaDA model"),
        ("steps = [8]", true, "grid.steps", "add a diffusion model"),
        ("dream_algs = [\"origin\"]", false, "grid.dream_algs", "add a Dream model"),
    ] {
        let with_line = |t: &str| t.replace("output_tokens = 32", &format!("output_tokens = 32\n{line}"));
        refuse(|t| if llama_only { ar_only(&with_line(t)) } else { with_line(t) }, field, fix);
    }
    refuse(|t| t.replace("count = 4", "count = 4\nseed = 3"), "prompts.seed", "source = \"wikitext\"");
    // LLaDA's sampler settings without a LLaDA model, Dream's nucleus filter without a Dream model.
    for (line, field, fix) in [
        ("cfg_scale = 2.0", "grid.cfg_scale", "remove cfg_scale, or add a LLaDA model"),
        ("block_length = 8", "grid.block_length", "remove block_length, or add a LLaDA model"),
        ("remasking = \"random\"", "grid.remasking", "remove remasking, or add a LLaDA model"),
        ("confidence = \"f64\"", "grid.confidence", "remove confidence, or add a LLaDA model"),
        ("gumbel_noise = \"host\"", "grid.gumbel_noise", "remove gumbel_noise, or add a LLaDA model"),
    ] {
        refuse(|t| ar_only(&t.replace("output_tokens = 32", &format!("output_tokens = 32\n{line}"))), field, fix);
        // A Dream model uses none of them either.
        let dream = |t: &str| {
            ar_only(t)
                .replace("id = \"a/llama\"\n", "id = \"a/llama\"\n\n[[models]]\nkind = \"dream\"\nid = \"c/dream\"\n")
        };
        let steps = |t: &str| t.replace("output_tokens = 32", &format!("steps = [8]\noutput_tokens = 32\n{line}"));
        refuse(|t| dream(&steps(t)), field, fix);
        // Nor is the default refused, nor a field a LLaDA model of the grid uses.
        // (The Gumbel noise is drawn at a temperature above 0 only.)
        let line = if line.starts_with("gumbel") { format!("{line}\ntemperature = 0.5") } else { line.to_string() };
        GridConfig::from_toml(&BASE.replace("output_tokens = 32", &format!("output_tokens = 32\n{line}")), "my.toml")
            .unwrap_or_else(|e| panic!("{line} with a LLaDA model: {e}"));
    }
    refuse(|t| t.replace("output_tokens = 32", "output_tokens = 32\ntop_p = 0.9"), "grid.top_p", "add a Dream model");
    // A temperature drives the diffusion samplers only (the AR model decodes greedily); the Gumbel noise's source
    // matters only above temperature 0; the behaviour at EOS is the AR model's.
    let ar_temp = |t: &str| ar_only(&t.replace("output_tokens = 32", "output_tokens = 32\ntemperature = 0.7"));
    refuse(ar_temp, "grid.temperature", "add a LLaDA or Dream model");
    refuse(
        |t| t.replace("output_tokens = 32", "output_tokens = 32\ngumbel_noise = \"host\""),
        "grid.gumbel_noise",
        "set a temperature above 0",
    );
    let no_llama = |t: &str| t.replace("kind = \"llama\"\nid = \"a/llama\"\n\n[[models]]\n", "");
    assert!(!no_llama(BASE).contains("a/llama"), "the edit removes the AR model");
    refuse(
        |t| no_llama(t).replace("output_tokens = 32", "output_tokens = 32\neos = \"suppress\""),
        "grid.eos",
        "add a llama-kind model",
    );
    let defaults = "cfg_scale = 0.0\nremasking = \"low_confidence\"\nconfidence = \"f32\"\ngumbel_noise = \"device\"";
    GridConfig::from_toml(
        &ar_only(&BASE.replace("output_tokens = 32", &format!("output_tokens = 32\n{defaults}"))),
        "my.toml",
    )
    .expect("the defaults, written out, on a Llama-only grid");
    // Threshold series alone need no steps.
    let only = BASE
        .replace("steps = [8, 16]\n", "")
        .replace("output_tokens = 32", "output_tokens = 32\nsamplers = [\"prefix+threshold\"]\nthresholds = [0.9]");
    let c = GridConfig::from_toml(&only, "my.toml").expect("valid");
    assert_eq!(c.cells().len(), 2 * 2);
}

// ---- messages

/// The message of a config refused, `edit` applied to [`BASE`].
fn refusal(edit: impl Fn(&str) -> String) -> String {
    GridConfig::from_toml(&edit(BASE), "my.toml").expect_err("must be refused").to_string()
}

#[test]
fn values_in_messages_are_written_as_the_config_writes_them() {
    // Not Rust's Debug names (`Small`, `Embedded`, `Llada`).
    let cases = [
        (refusal(|t| t.replace("count = 4", "count = 5\npreset = \"small\"")), "preset = \"small\" (8 prompts)"),
        (refusal(|t| t.replace("count = 4", "count = 4\npath = \"p.txt\"")), "(source is \"embedded\")"),
        (refusal(|t| t.replace("count = 4", "count = 4\ndataset = \"a/b\"")), "(source is \"embedded\")"),
        (
            refusal(|t| format!("{t}\n[quality]\n[[quality.evaluators]]\nid = \"b/llada\"\n")),
            "b/llada is a \"llada\" model",
        ),
    ];
    for (msg, want) in cases {
        assert!(msg.contains(want), "{want:?}: {msg}");
    }
}

/// The message of `text` refused, with its one fix.
fn refused_text(text: &str) -> String {
    let msg = GridConfig::from_toml(text, "my.toml").expect_err("must be refused").to_string();
    assert!(msg.starts_with("my.toml: "), "names the file: {msg}");
    assert_eq!(msg.matches("fix:").count(), 1, "one fix: {msg}");
    msg
}

#[test]
fn a_json_bundle_given_as_config_is_named_json_in_a_short_message() {
    // A result bundle, minified (one 50 KB line: its whole line was once quoted), or as written, after a BOM.
    let bundle = crate::util::fixture("v1.7/demo.json");
    let value: serde_json::Value = serde_json::from_str(&bundle).expect("json");
    for text in [value.to_string(), format!("\u{feff}{bundle}"), "[{\"a\": 1}]".to_string()] {
        let msg = refused_text(&text);
        assert!(msg.contains("this file is JSON (a result bundle?); a grid config is TOML"), "{msg}");
        assert!(msg.contains("fix: pass a TOML grid config such as config/experiments.toml"), "{msg}");
        assert!(msg.len() < 200, "{msg}");
    }
    // A quoted table header starts with `["` too, and is TOML.
    assert!(!refused_text("[\"run\"]\nname = 3\n").contains("JSON"));
}

#[test]
fn a_long_line_is_quoted_cut_around_the_column() {
    let line = format!("seq_lengths = [{}64 64, {}64]", "64, ".repeat(1000), "64, ".repeat(1000));
    let msg = refused_text(&BASE.replace("seq_lengths = [64]", &line));
    // `64 64` is the slip (a value the parser cannot read).
    let column = line.find("64 64").expect("the slip") + 1;
    assert!(msg.contains(&format!("line 13, column {column}")), "{msg}");
    let quoted = msg.split('`').nth(1).expect("the line quoted");
    assert!(quoted.starts_with('…') && quoted.ends_with('…') && quoted.contains("64 64"), "{quoted}");
    assert!(quoted.chars().count() <= 82, "{quoted}");
    // A value quoted in the parser's message is cut too.
    let msg = refused_text(&BASE.replace("warmup = 1", &format!("warmup = \"{}\"", "z".repeat(5000))));
    assert!(msg.len() < 500 && msg.contains("expected u32"), "{msg}");
}

#[test]
fn table_slips_are_named_at_their_line() {
    for (table, line) in [("grid", 12), ("run", 2), ("prompts", 8)] {
        let msg = refused_text(&BASE.replace(&format!("[{table}]"), &format!("[[{table}]]")));
        assert!(
            msg.contains(&format!("line {line}: `[[{table}]]` is a list of tables, but [{table}] is one table")),
            "{msg}"
        );
        assert!(msg.contains(&format!("fix: write [{table}], not [[{table}]]")), "{msg}");
    }
    let msg = refused_text(&BASE.replacen("[[models]]", "[models]", 1));
    assert!(msg.contains("line 18: `[models]` is one table, but `models` is a list of tables"), "{msg}");
    assert!(msg.contains("fix: write `[[models]]` (two brackets) before each entry"), "{msg}");
}

#[test]
fn missing_tables_and_empty_files_say_so() {
    let without = |table: &str| {
        let start = BASE.find(table).expect("table");
        let end = BASE[start + 1..].find("\n[").map_or(BASE.len(), |i| start + 1 + i);
        format!("{}{}", &BASE[..start], &BASE[end..])
    };
    for table in ["[run]", "[prompts]", "[grid]"] {
        let msg = refused_text(&without(table));
        assert!(msg.contains(&format!("my.toml: missing table {table}\n  fix: add {table}")), "{msg}");
    }
    let msg = refused_text(BASE.split("[[models]]").next().expect("base"));
    assert!(msg.contains("missing the [[models]] tables") && msg.contains("kind and id"), "{msg}");
    for (text, what) in
        [("", "the file is empty"), ("\u{feff}\n  \n", "the file is empty"), ("# x\n\n", "the file has only comments")]
    {
        let msg = refused_text(text);
        assert!(msg.contains(&format!("my.toml: {what}: a grid config needs the tables [run], [prompts]")), "{msg}");
    }
    // A field missing from a table: by its dotted path.
    let msg = refused_text(&BASE.replace("dtype = \"f32\"\n", ""));
    assert!(msg.contains("line 2, column 1: missing field `run.dtype`"), "{msg}");
    let msg = refused_text(&BASE.replace("id = \"b/llada\"\n", ""));
    assert!(msg.contains("missing field `models[1].id`"), "{msg}");
}

#[test]
fn unknown_tables_and_fields_are_named_at_their_line() {
    let line_of = |text: &str, needle: &str| text.lines().position(|l| l == needle).expect("the line") + 1;
    let text = format!("{BASE}\n[extra]\nx = 1\n");
    let msg = refused_text(&text);
    assert!(msg.contains(&format!("line {}: unknown field `extra`", line_of(&text, "[extra]"))), "{msg}");
    // `seed` is a field of [run], not of [grid]: the line of the one in [grid].
    let text = BASE
        .replace("repetitions = 2", "repetitions = 2\nseed = 1")
        .replace("steps = [8, 16]", "steps = [8, 16]\nseed = 1");
    let msg = refused_text(&text);
    assert!(msg.contains("line 17: unknown field `grid.seed`"), "{msg}");
    let text = BASE.replace("id = \"a/llama\"", "id = \"a/llama\"\nsynthetic = { preset = \"tiny\", layerz = 2 }");
    let msg = refused_text(&text);
    let line = line_of(&text, "synthetic = { preset = \"tiny\", layerz = 2 }");
    assert!(msg.contains(&format!("line {line}: unknown field `models[0].synthetic.layerz`")), "{msg}");
}

#[test]
fn an_unknown_field_a_slip_away_from_one_or_in_the_wrong_table_gets_its_fix() {
    let fix_of = |text: &str| match GridConfig::from_toml(text, "my.toml").expect_err("refused") {
        ConfigError::Parse { fix, .. } => fix,
        other => panic!("not a parse error: {other}"),
    };
    // A letter dropped, two swapped, a dash for an underscore: the field of that table.
    let fix = fix_of(&BASE.replace("repetitions = 2", "repetitons = 2"));
    assert!(fix.starts_with("did you mean `repetitions`? (the field of [run] nearest to `repetitons`)"), "{fix}");
    assert!(fix_of(&BASE.replace("warmup = 1", "warmpu = 1")).contains("`warmup`"));
    let fix =
        fix_of(&BASE.replace("id = \"a/llama\"", "id = \"a/llama\"\nsynthetic = { preset = \"tiny\", layerz = 2 }"));
    assert!(fix.contains("did you mean `layers`? (the field of [models.synthetic]"), "{fix}");
    // The right name in the wrong table.
    let fix = fix_of(&BASE.replace("steps = [8, 16]", "steps = [8, 16]\nseed = 1"));
    assert!(fix.starts_with("`seed` is a field of ") && fix.contains("[run]"), "{fix}");
    assert!(fix.contains("not of [grid]: move it to the one meant"), "{fix}");
    let fix = fix_of(&BASE.replace("dtype = \"f32\"", "dtype = \"f32\"\nseq_lengths = [64]"));
    assert!(fix.starts_with("`seq_lengths` is a field of [grid], not of [run]: move it there"), "{fix}");
    // Nothing near: the plain fix.
    let fix = fix_of(&BASE.replace("repetitions = 2", "repetitions = 2\nbananas = 2"));
    assert_eq!(fix, ConfigError::COMPARE);
}
