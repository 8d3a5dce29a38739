//! Chat templates (`[prompts] chat_template = true`): templates read from real `tokenizer_config.json` files and
//! rendered against expected strings, the tokens around each prompt (one BOS, the whole rendering's ids), the
//! demo grid end to end on synthetic Instruct checkpoints, and the errors of a model without a template.

use std::path::{Path, PathBuf};

use runner::model::{ChatTemplate, LoadedModel, ModelError, ModelFiles};
use runner::synth::{Preset, SynthSpec, write_synthetic};
use schema::CellStatus;
use schema::grid::ModelKind;

use crate::assert_exit;
use crate::util::{Sandbox, stderr, stdout};

/// What Meta-Llama-3-8B-Instruct's template renders for one user message and the generation prompt.
const LLAMA3_RENDERED: &str = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello, world.<|eot_id|>\
                               <|start_header_id|>assistant<|end_header_id|>\n\n";
/// The same for LLaDA-8B-Instruct: Llama-3's format with LLaDA's BOS.
const LLADA_RENDERED: &str = "<|startoftext|><|start_header_id|>user<|end_header_id|>\n\nHello, world.<|eot_id|>\
                              <|start_header_id|>assistant<|end_header_id|>\n\n";

fn instruct(cache: &Path, kind: ModelKind, repo: &str) -> ModelFiles {
    let spec = SynthSpec { chat_template: true, ..SynthSpec::new(Preset::Tiny, 5) };
    write_synthetic(cache, repo, kind, &spec).expect("synthetic Instruct checkpoint");
    ModelFiles::from_hf_cache(cache, repo, "main").expect("files")
}

/// A `tokenizer_config.json` in its own folder with `chat_template` = `template` (a JSON value).
fn config_dir(template: serde_json::Value) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let json = serde_json::json!({
        "bos_token": {"content": "<|begin_of_text|>", "special": true},
        "eos_token": "<|eot_id|>",
        "chat_template": template,
    });
    std::fs::write(dir.path().join("tokenizer_config.json"), json.to_string()).expect("write");
    dir
}

fn message(e: ModelError) -> String {
    e.to_string()
}

#[test]
fn synthetic_instruct_templates_render_the_expected_strings() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (kind, repo, want) in [
        (ModelKind::Llama, "test/llama-instruct", LLAMA3_RENDERED),
        (ModelKind::Llada, "test/llada-instruct", LLADA_RENDERED),
    ] {
        let files = instruct(dir.path(), kind, repo);
        let t = ChatTemplate::read(&files.snapshot_dir).expect("template");
        assert_eq!(t.origin, "tokenizer_config.json chat_template");
        // The template trims the content, as the real ones do.
        assert_eq!(t.render("  Hello, world.\n").expect("render"), want, "{kind:?}");
        assert_eq!(t.sha256().len(), 64);
    }
}

#[test]
fn hub_style_templates_render_with_transformers_whitespace_rules() {
    // Written the way hub templates are: `{% set %}`, `+` concatenation, `loop.index0`, and block tags on their
    // own indented lines, which transformers' trim_blocks and lstrip_blocks keep out of the output.
    let template = "{% set loop_messages = messages %}\n\
                    {% for message in loop_messages %}\n\
                    \x20   {% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + \
                    message['content'] | trim + '<|eot_id|>' %}\n\
                    \x20   {% if loop.index0 == 0 %}\n\
                    \x20       {% set content = bos_token + content %}\n\
                    \x20   {% endif %}\n\
                    {{ content }}\n\
                    {% endfor %}\n\
                    {% if add_generation_prompt %}\n\
                    {{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n\
                    {% endif %}";
    let dir = config_dir(serde_json::json!(template));
    let t = ChatTemplate::read(dir.path()).expect("template");
    // `{{ content }}` and the generation prompt are each followed by a newline of the template's own (trim_blocks
    // removes only the newlines after block tags).
    let want = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello, world.<|eot_id|>\n\
                <|start_header_id|>assistant<|end_header_id|>\n\n\n";
    assert_eq!(t.render("Hello, world.").expect("render"), want);

    // The list form: the template named "default" is used.
    let dir = config_dir(serde_json::json!([
        {"name": "tool_use", "template": "{{ raise_exception('not this one') }}"},
        {"name": "default", "template": "{{ bos_token }}[{{ messages[0]['content'] }}]{{ eos_token }}"},
    ]));
    let t = ChatTemplate::read(dir.path()).expect("template");
    assert_eq!(t.origin, "tokenizer_config.json chat_template[\"default\"]");
    assert_eq!(t.render("hi").expect("render"), "<|begin_of_text|>[hi]<|eot_id|>");

    // transformers' raise_exception: the template's own message comes through.
    let dir = config_dir(serde_json::json!(
        "{% if messages[0]['role'] == 'user' %}{{ raise_exception('Conversation roles must alternate') }}{% endif %}"
    ));
    let err = message(ChatTemplate::read(dir.path()).expect("template").render("hi").expect_err("raises"));
    assert!(err.contains("Conversation roles must alternate") && err.contains("tokenizer_config.json"), "{err}");

    // A list without "default" names what it has.
    let dir = config_dir(serde_json::json!([{"name": "rag", "template": "x"}]));
    let err = message(ChatTemplate::read(dir.path()).expect_err("no default"));
    assert!(err.contains("no template named \"default\"") && err.contains("rag"), "{err}");
}

#[test]
fn a_missing_template_names_the_file_and_the_fix() {
    let dir = tempfile::tempdir().expect("temp dir");
    let err = message(ChatTemplate::read(dir.path()).expect_err("no file"));
    assert!(err.contains("tokenizer_config.json") && err.contains("Instruct checkpoint"), "{err}");
    std::fs::write(dir.path().join("tokenizer_config.json"), r#"{"bos_token": "<s>"}"#).expect("write");
    let err = message(ChatTemplate::read(dir.path()).expect_err("no template"));
    assert!(err.contains("field `chat_template` is missing"), "{err}");
    assert!(err.contains("chat_template = false") && err.contains("[prompts]"), "the fix: {err}");
}

#[test]
fn the_frame_has_one_bos_and_the_ids_of_the_whole_rendering() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (kind, repo) in [(ModelKind::Llama, "test/llama-instruct"), (ModelKind::Llada, "test/llada-instruct")] {
        let files = instruct(dir.path(), kind, repo);
        let model = LoadedModel::load(&files, kind, &candle_core::Device::Cpu, candle_core::DType::F32).expect("load");
        let (tok, bos) = (&model.tokenizer, model.special.bos);
        let t = ChatTemplate::read(&files.snapshot_dir).expect("template");
        let frame = t.frame(tok, bos).expect("frame");
        assert!(frame.rendered.starts_with(&t.bos_token) && frame.rendered.contains("\n\n{prompt}<|eot_id|>"));
        let text = "The quick brown fox jumps over the lazy dog, and the cat watches";
        let content = tok.encode(text, false).expect("encode").get_ids().to_vec();
        let row = frame.wrap(&content);
        assert_eq!(row.len(), frame.len() + content.len());
        // The rendering begins with the BOS token string: the tokenizer maps it to BOS, and no second one is added.
        assert_eq!(row[0], bos, "{kind:?}");
        assert_eq!(row.iter().filter(|&&id| id == bos).count(), 1, "{kind:?}: one BOS: {row:?}");
        // The special token strings are single ids, and the row is the whole rendering's tokens.
        let whole = tok.encode(t.render(text).expect("render").as_str(), false).expect("encode");
        assert_eq!(row, whole.get_ids(), "{kind:?}");
        for special in ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"] {
            let id = tok.token_to_id(special).expect("special token in the synthetic tokenizer");
            assert!(frame.before.contains(&id) || frame.after.contains(&id), "{kind:?}: {special}");
        }
    }
    // A template that does not emit BOS gets it prepended (every prompt starts with BOS), once.
    let files = instruct(dir.path(), ModelKind::Llama, "test/llama-instruct");
    let model =
        LoadedModel::load(&files, ModelKind::Llama, &candle_core::Device::Cpu, candle_core::DType::F32).expect("load");
    let no_bos = config_dir(serde_json::json!("<|start_header_id|>user<|end_header_id|>{{ messages[0]['content'] }}"));
    let frame = ChatTemplate::read(no_bos.path()).expect("template").frame(&model.tokenizer, model.special.bos);
    let frame = frame.expect("frame");
    assert_eq!(frame.before.first(), Some(&model.special.bos));
    assert_eq!(frame.before.iter().filter(|&&id| id == model.special.bos).count(), 1);
    // A BOS string the tokenizer does not know would be text, not BOS: refused.
    let foreign = tempfile::tempdir().expect("temp dir");
    let json = serde_json::json!({"bos_token": "<s>", "chat_template": "{{ bos_token }}{{ messages[0]['content'] }}"});
    std::fs::write(foreign.path().join("tokenizer_config.json"), json.to_string()).expect("write");
    let err = ChatTemplate::read(foreign.path()).expect("template").frame(&model.tokenizer, model.special.bos);
    let err = message(err.expect_err("foreign BOS"));
    assert!(err.contains("bos_token \"<s>\"") && err.contains("does not map to the BOS id"), "{err}");
    // A template that drops the content cannot frame a prompt.
    let dropped = config_dir(serde_json::json!("{{ bos_token }}no content"));
    let err = ChatTemplate::read(dropped.path()).expect("template").frame(&model.tokenizer, model.special.bos);
    assert!(message(err.expect_err("no content")).contains("exactly once"));
}

fn demo_with(edit: impl Fn(String) -> String) -> String {
    let demo =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config/demo.toml")).expect("demo");
    let cfg = demo.replacen("[prompts]\n", "[prompts]\nchat_template = true\n", 1);
    assert!(cfg.contains("chat_template = true"));
    edit(cfg)
}

fn bundle_of(out: &std::process::Output) -> schema::Bundle {
    let text = std::fs::read_to_string(stdout(out).trim()).expect("bundle");
    schema::read_bundle(&text).expect("valid bundle")
}

#[test]
fn demo_grid_with_chat_templates_runs_end_to_end() {
    let sb = Sandbox::new();
    let results = sb.results();
    let cfg = sb.write("chat.toml", &demo_with(|c| c));
    let quick =
        ["--seq-len", "64", "--batch-size", "1,2", "--steps", "4", "--samplers", "reference", "--repetitions", "1"];
    let run = |config: &Path| {
        let mut args = vec!["run", "--config", config.to_str().expect("utf8")];
        args.extend(["--output-dir", results.to_str().expect("utf8")]);
        args.extend(quick);
        sb.cmd(&args)
    };
    let out = run(&cfg);
    assert_exit!(out, 0);
    let b = bundle_of(&out);
    assert!(b.provenance.config.prompts.chat_template, "the resolved config says the prompts were wrapped");
    for (id, bos) in [
        ("dllm-bench/synthetic-llama-tiny", "<|begin_of_text|>"),
        ("dllm-bench/synthetic-llada-tiny", "<|startoftext|>"),
    ] {
        let m = b.models.iter().find(|m| m.id == id).expect("model");
        let chat = m.chat_template.as_ref().unwrap_or_else(|| panic!("{id}: the template is recorded"));
        assert_eq!(chat.source, "tokenizer_config.json chat_template");
        assert!(chat.rendered.starts_with(&format!("{bos}<|start_header_id|>user<|end_header_id|>\n\n{{prompt}}")));
        assert!(chat.frame_tokens > 6 && chat.frame_tokens < 32, "{id}: {}", chat.frame_tokens);
    }
    let evaluator = b.models.iter().find(|m| m.id == "dllm-bench/synthetic-evaluator-tiny").expect("evaluator");
    assert!(evaluator.chat_template.is_none(), "evaluators score plain text");
    let report = sb.cmd(&["report", stdout(&out).trim()]);
    assert_exit!(report, 0);
    let chat = b.models[0].chat_template.as_ref().expect("template");
    let line =
        format!("wrapped in the model's chat template: dllm-bench/synthetic-llama-tiny ({} tokens", chat.frame_tokens);
    assert!(stdout(&report).contains(&line), "{}", stdout(&report));
    assert_eq!(b.cells.len(), 2 * 2);
    for cell in &b.cells {
        assert_eq!(cell.status, CellStatus::Ok, "{}", cell.key);
        assert_eq!(cell.key.prompt_tokens + cell.key.output_tokens, 64, "N is every token the model is given");
    }

    // The same grid without templates: the prompt text's share of the row is larger by the template's tokens, so
    // the cut of each prompt (where its true continuation starts) is later.
    let plain = sb.write("plain.toml", &demo_with(|c| c.replacen("chat_template = true\n", "", 1)));
    let out = run(&plain);
    assert_exit!(out, 0);
    let p = bundle_of(&out);
    assert!(p.models.iter().all(|m| m.chat_template.is_none()));
    assert!(!p.provenance.config.prompts.chat_template);
    let cut = |b: &schema::Bundle, model: &str| -> Vec<u32> {
        let cell = b.cells.iter().find(|c| c.key.model == model && c.key.batch_size == 2).expect("cell");
        cell.generations.iter().map(|g| g.prompt_bytes).collect()
    };
    for model in ["dllm-bench/synthetic-llama-tiny", "dllm-bench/synthetic-llada-tiny"] {
        let (chat, plain) = (cut(&b, model), cut(&p, model));
        assert_eq!(chat.len(), plain.len());
        assert!(chat.iter().zip(&plain).all(|(c, p)| 0 < *c && c < p), "{model}: {chat:?} vs {plain:?}");
    }
}

#[test]
fn a_grid_too_short_for_the_template_is_refused_before_anything_runs() {
    let sb = Sandbox::new();
    let cfg = sb.write("chat.toml", &demo_with(|c| c.split("\n[quality]").next().expect("config").to_string()));
    let results = sb.results();
    let args = ["run", "--config", cfg.to_str().expect("utf8"), "--output-dir", results.to_str().expect("utf8")];
    let mut args = args.to_vec();
    args.extend(["--seq-len", "40", "--batch-size", "1", "--steps", "4", "--repetitions", "1", "--warmup", "0"]);
    let out = sb.cmd(&args);
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(err.contains("chat template takes") && err.contains("fix: longer sequence"), "{err}");
    assert!(!err.contains("[1/"), "nothing measured: {err}");
}

#[test]
fn a_model_without_a_template_is_refused_before_anything_runs() {
    let sb = Sandbox::new();
    // A synthetic base checkpoint in a grid that wraps its prompts.
    let cfg = demo_with(|c| {
        c.replacen("preset = \"tiny\"\nseed = 2\n", "preset = \"tiny\"\nseed = 2\nchat_template = false\n", 1)
    });
    let cfg = sb.write("chat.toml", &cfg);
    let out = sb.cmd(&["run", "--config", cfg.to_str().expect("utf8"), "--output-dir", "results"]);
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(err.contains("model dllm-bench/synthetic-llada-tiny"), "names the model: {err}");
    assert!(err.contains("tokenizer_config.json"), "names the file: {err}");
    assert!(err.contains("chat_template = false"), "carries the fix: {err}");
    assert!(!err.contains("[1/"), "nothing measured: {err}");

    // A cached base model (no synthetic table): `fetch` names the file the template lives in, `run` refuses.
    let base = sb.cmd(&["synth", "--kind", "llama", "--repo-id", "org/llama"]);
    assert_exit!(base, 0);
    let inst = sb.cmd(&["synth", "--kind", "llada", "--repo-id", "org/llada-instruct", "--chat-template"]);
    assert_exit!(inst, 0);
    let inst_snap = PathBuf::from(stdout(&inst).trim());
    assert!(inst_snap.join("tokenizer_config.json").is_file(), "--chat-template writes the file");
    let cfg = demo_with(|c| {
        c.replacen(
            "id = \"dllm-bench/synthetic-llama-tiny\"\n\n[models.synthetic]\npreset = \"tiny\"\nseed = 1\n",
            "id = \"org/llama\"\n",
            1,
        )
        .replacen(
            "id = \"dllm-bench/synthetic-llada-tiny\"\n\n[models.synthetic]\npreset = \"tiny\"\nseed = 2\n",
            "id = \"org/llada-instruct\"\n",
            1,
        )
        .split("\n[quality]")
        .next()
        .expect("config")
        .to_string()
    });
    let cfg = sb.write("cached.toml", &cfg);
    let cfg_s = cfg.to_str().expect("utf8");
    let out = sb.cmd(&["fetch", "--config", cfg_s, "--local-files-only"]);
    assert_exit!(out, 1);
    let listing = stdout(&out);
    let missing: Vec<&str> = listing.lines().filter(|l| l.starts_with("missing")).map(|l| l.trim()).collect();
    assert_eq!(missing.len(), 1, "{}", stdout(&out));
    assert!(missing[0].contains("models--org--llama") && missing[0].contains("tokenizer_config.json"), "{missing:?}");
    let out = sb.cmd(&["run", "--config", cfg_s, "--output-dir", "results"]);
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(err.contains("model org/llama") && err.contains("tokenizer_config.json"), "{err}");
}
