//! Prompt sets: Wikitext-103 validation read from a parquet file written here in the real dataset's layout (the
//! hub cache's `datasets--Salesforce--wikitext/...`, one optional string column `text`, snappy pages), through the
//! runner's own loader; the seeded selection; references from JSONL files; and the errors a user meets (missing
//! dataset, corrupt file, wrong column), each naming the file and the fix.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType, Int32Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use runner::prompts::PromptSet;
use runner::prompts::wikitext::{self, LineKind};
use schema::grid::{GridConfig, PromptConfig, PromptPreset, PromptSource};

use crate::assert_exit;
use crate::util::{Sandbox, stderr, stdout};

const COMMIT: &str = "b08601e04326c79dfdd32d625aee71d232d685c3";
const STRING_COLUMN: &str = "message schema { optional binary text (STRING); }";

/// Writes `rows` as a parquet file of one column (`message` names it), snappy-compressed like pyarrow's files,
/// in two row groups so that the reader's row-group loop is exercised.
fn write_parquet(path: &Path, message: &str, rows: &[Option<&str>]) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    let schema = Arc::new(parse_message_type(message).expect("schema"));
    let props = Arc::new(WriterProperties::builder().set_compression(Compression::SNAPPY).build());
    let mut w = SerializedFileWriter::new(File::create(path).expect("create"), schema, props).expect("writer");
    for half in rows.chunks(rows.len().div_ceil(2).max(1)) {
        let mut group = w.next_row_group().expect("row group");
        let mut col = group.next_column().expect("column").expect("one column");
        let values: Vec<ByteArray> = half.iter().flatten().map(|s| ByteArray::from(*s)).collect();
        let defs: Vec<i16> = half.iter().map(|r| i16::from(r.is_some())).collect();
        col.typed::<ByteArrayType>().write_batch(&values, Some(&defs), None).expect("write");
        col.close().expect("close column");
        group.close().expect("close row group");
    }
    w.close().expect("close file");
}

/// Wikitext-like rows: `articles` articles, each a title, `sections` sections of three paragraphs (the first
/// section without a heading, as in the real data), empty lines between, every line with the real files' leading
/// space and trailing newline; plus a null row. Paragraph `p` of article `a` starts with `A{a}P{p}`.
fn wikitext_rows(articles: usize, sections: usize) -> Vec<Option<String>> {
    let mut rows = vec![Some(String::new())];
    for a in 0..articles {
        rows.push(Some(format!(" = Article number {a} = \n")));
        rows.push(Some(String::new()));
        let mut p = 0;
        for s in 0..sections {
            if s > 0 {
                rows.push(Some(format!(" = = Section {s} of article {a} = = \n")));
                rows.push(Some(String::new()));
            }
            if s == 2 {
                rows.push(Some(format!(" = = = Subsection of {a} = = = \n")));
                rows.push(Some(String::new()));
            }
            for _ in 0..3 {
                let words: Vec<String> = (0..40 + (a * 7 + p * 13) % 60)
                    .map(|k| format!("w{}", (a * 7919 + p * 104_729 + k * 31) % 997))
                    .collect();
                rows.push(Some(format!(" A{a}P{p} {} , the <unk> @-@ like . \n", words.join(" "))));
                p += 1;
            }
            rows.push(if s == 1 { None } else { Some(String::new()) });
        }
    }
    rows
}

/// A hub cache in `dir` with the dataset at `refs/main` -> COMMIT, its split in `shards` files.
fn wikitext_cache(dir: &Path, rows: &[Option<String>], shards: usize) -> PathBuf {
    let cache = dir.join("hub");
    let repo = cache.join("datasets--Salesforce--wikitext");
    std::fs::create_dir_all(repo.join("refs")).expect("refs");
    std::fs::write(repo.join("refs/main"), COMMIT).expect("ref");
    let rows: Vec<Option<&str>> = rows.iter().map(|r| r.as_deref()).collect();
    for (i, part) in rows.chunks(rows.len().div_ceil(shards)).enumerate() {
        write_parquet(&shard_path(&cache, i, shards), STRING_COLUMN, part);
    }
    cache
}

fn shard_path(cache: &Path, i: usize, n: usize) -> PathBuf {
    cache.join(format!(
        "datasets--Salesforce--wikitext/snapshots/{COMMIT}/wikitext-103-v1/validation-{i:05}-of-{n:05}.parquet"
    ))
}

fn wikitext_config(count: u32, seed: u64, min_chars: u32) -> PromptConfig {
    PromptConfig {
        source: PromptSource::Wikitext,
        count,
        preset: None,
        path: None,
        seed,
        dataset: None,
        revision: None,
        min_chars: Some(min_chars),
        chat_template: false,
    }
}

/// The fields no source but Wikitext uses, unset.
fn plain_config() -> PromptConfig {
    PromptConfig { min_chars: None, ..wikitext_config(0, 0, 1) }
}

fn load(cfg: &PromptConfig, cache: &Path) -> anyhow::Result<PromptSet> {
    PromptSet::load(cfg, Path::new("."), cache)
}

fn err_of(r: anyhow::Result<PromptSet>) -> String {
    let e = r.expect_err("must fail");
    assert_eq!(runner::exit_code(&e), 2, "a bad dataset is bad input: {e:#}");
    format!("{e:#}")
}

#[test]
fn wikitext_loads_documents_from_a_paragraph_to_the_end_of_the_article() {
    let dir = tempfile::tempdir().expect("tmp");
    let rows = wikitext_rows(12, 4);
    let cache = wikitext_cache(dir.path(), &rows, 1);
    let set = load(&wikitext_config(8, 0, 1500), &cache).expect("loads");
    assert_eq!(set.texts.len(), 8);
    assert_eq!(set.references, vec![None; 8], "a Wikitext prompt's reference is the rest of its own text");
    assert_eq!(set.source, format!("wikitext:Salesforce/wikitext:wikitext-103-v1:validation@{COMMIT}"));
    assert!(
        set.selection.starts_with("seeded sample of 8 of ") && set.selection.ends_with("seed 0"),
        "{}",
        set.selection
    );
    assert!(set.selection.contains(">= 1500 chars"), "{}", set.selection);
    for t in &set.texts {
        assert!(t.chars().count() >= 1500, "min_chars: {}", t.len());
        let first = t.lines().next().expect("a line");
        assert_eq!(wikitext::line_kind(first), LineKind::Paragraph, "starts at a paragraph: {first}");
        assert!(!t.lines().any(|l| wikitext::line_kind(l) == LineKind::Title), "one article only: {t}");
        assert!(t.lines().all(|l| !l.is_empty() && l.trim() == l), "trimmed lines, no empty ones");
        // To the end of its article: the article's last paragraph (A{a}P11 with 4 sections) ends it.
        let article = &first[1..first.find('P').expect("P")];
        let last = t.lines().last().expect("last");
        assert!(last.starts_with(&format!("A{article}P11 ")), "ends with the article: {last}");
    }
    assert!(set.texts.iter().any(|t| t.contains("\n= = Section 2 of article")), "section headings are kept");
    assert_eq!(set.sha256().len(), 64);
}

#[test]
fn wikitext_selection_is_seeded_and_presets_nest() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = wikitext_cache(dir.path(), &wikitext_rows(12, 4), 1);
    let a = load(&wikitext_config(8, 0, 300), &cache).expect("loads");
    let b = load(&wikitext_config(8, 0, 300), &cache).expect("loads");
    let c = load(&wikitext_config(8, 1, 300), &cache).expect("loads");
    assert_eq!(a.texts, b.texts, "same seed, same prompts");
    assert_eq!(a.sha256(), b.sha256());
    assert_ne!(a.texts, c.texts, "another seed, other prompts");
    assert_ne!(a.sha256(), c.sha256());
    let mut distinct = a.texts.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 8, "drawn without replacement");
    // Presets: 8 / 32 / 128, and the smaller sets are prefixes of the larger ones.
    let mut last: Vec<String> = Vec::new();
    for (preset, n) in [(PromptPreset::Small, 8), (PromptPreset::Medium, 32), (PromptPreset::Large, 128)] {
        let cfg = PromptConfig { count: 0, preset: Some(preset), ..wikitext_config(0, 0, 1) };
        let set = load(&cfg, &cache).expect("preset loads");
        assert_eq!(set.texts.len(), n, "{preset:?}");
        assert!(set.selection.starts_with(&format!("seeded sample of {n} of 144 documents")), "{}", set.selection);
        assert!(set.texts[..last.len()] == last[..], "{preset:?} extends the smaller preset");
        last = set.texts;
    }
    let small = load(&wikitext_config(8, 0, 1), &cache).expect("loads");
    assert!(last[..8] == small.texts[..], "count = 8 draws what preset small draws");
}

#[test]
fn wikitext_min_chars_filters_and_too_few_documents_is_an_error() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = wikitext_cache(dir.path(), &wikitext_rows(12, 4), 1);
    let long = load(&wikitext_config(4, 0, 4000), &cache).expect("loads");
    assert!(long.texts.iter().all(|t| t.chars().count() >= 4000));
    let err = err_of(load(&wikitext_config(8, 0, 1_000_000), &cache));
    assert!(err.contains("8 prompts asked, but only 0 of its 144 documents have at least 1000000 characters"), "{err}");
    assert!(err.contains("validation-00000-of-00001.parquet") && err.contains("fix: lower prompts.min_chars"), "{err}");
}

#[test]
fn wikitext_shards_are_read_in_order_as_one_split() {
    let dir = tempfile::tempdir().expect("tmp");
    let rows = wikitext_rows(12, 4);
    let one = load(&wikitext_config(16, 3, 500), &wikitext_cache(&dir.path().join("one"), &rows, 1)).expect("one");
    let three =
        load(&wikitext_config(16, 3, 500), &wikitext_cache(&dir.path().join("three"), &rows, 3)).expect("three");
    assert_eq!(one.texts, three.texts);
    assert_eq!(one.selection, three.selection);
}

#[test]
fn wikitext_dataset_and_revision_are_configurable() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = wikitext_cache(dir.path(), &wikitext_rows(3, 4), 1);
    // The dataset's former id, at a commit with no ref: the same layout under datasets--wikitext.
    let old = cache.join("datasets--wikitext/snapshots").join(COMMIT);
    std::fs::create_dir_all(&old).expect("mkdir");
    std::fs::rename(
        cache.join("datasets--Salesforce--wikitext/snapshots").join(COMMIT).join("wikitext-103-v1"),
        old.join("wikitext-103-v1"),
    )
    .expect("move");
    let cfg =
        PromptConfig { dataset: Some("wikitext".into()), revision: Some(COMMIT.into()), ..wikitext_config(2, 0, 100) };
    let set = load(&cfg, &cache).expect("loads");
    assert_eq!(set.source, format!("wikitext:wikitext:wikitext-103-v1:validation@{COMMIT}"));
}

#[test]
fn missing_dataset_names_the_path_and_the_fetch_command() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = dir.path().join("hub");
    let err = err_of(load(&wikitext_config(8, 0, 100), &cache));
    assert!(err.contains(&cache.join("datasets--Salesforce--wikitext").display().to_string()), "{err}");
    assert!(err.contains("dllm-bench fetch --config") && err.contains("--repo-type dataset"), "{err}");
    // The folder but no ref; then the ref but no shard: each names what it looked for.
    std::fs::create_dir_all(cache.join("datasets--Salesforce--wikitext/snapshots")).expect("mkdir");
    let err = err_of(load(&wikitext_config(8, 0, 100), &cache));
    assert!(err.contains("refs/main") && err.contains("fix:"), "{err}");
    let cache = wikitext_cache(dir.path(), &wikitext_rows(1, 1), 1);
    std::fs::remove_file(shard_path(&cache, 0, 1)).expect("rm");
    let err = err_of(load(&wikitext_config(8, 0, 100), &cache));
    assert!(
        err.contains("wikitext-103-v1/validation-00000-of-00001.parquet") && err.contains("dllm-bench fetch"),
        "{err}"
    );
}

#[test]
fn corrupt_or_wrong_layout_files_name_the_file_and_the_text_column() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = wikitext_cache(dir.path(), &wikitext_rows(2, 2), 1);
    let shard = shard_path(&cache, 0, 1);
    let shown = shard.display().to_string();
    // Random bytes.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let noise: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(&shard, noise).expect("write");
    let err = err_of(load(&wikitext_config(1, 0, 10), &cache));
    assert!(err.contains(&shown) && err.contains("not a readable parquet file"), "{err}");
    assert!(err.contains("string column `text`"), "{err}");
    // A truncated real file: its footer is gone.
    write_parquet(&shard, STRING_COLUMN, &[Some(" = T = \n"), Some(" a paragraph \n")]);
    let bytes = std::fs::read(&shard).expect("read");
    std::fs::write(&shard, &bytes[..bytes.len() / 2]).expect("truncate");
    let err = err_of(load(&wikitext_config(1, 0, 10), &cache));
    assert!(err.contains(&shown) && err.contains("`text`"), "{err}");
    // A well-formed file with another column name.
    write_parquet(&shard, "message schema { optional binary content (STRING); }", &[Some(" a paragraph \n")]);
    let err = err_of(load(&wikitext_config(1, 0, 10), &cache));
    assert!(err.contains(&shown) && err.contains("no column `text` (its columns: `content`)"), "{err}");
    // A column `text` that is not a string.
    {
        let schema = Arc::new(parse_message_type("message schema { required int32 text; }").expect("schema"));
        let mut w =
            SerializedFileWriter::new(File::create(&shard).expect("create"), schema, Default::default()).expect("w");
        let mut group = w.next_row_group().expect("rg");
        let mut col = group.next_column().expect("col").expect("one");
        col.typed::<Int32Type>().write_batch(&[1, 2, 3], None, None).expect("write");
        col.close().expect("close");
        group.close().expect("close");
        w.close().expect("close");
    }
    let err = err_of(load(&wikitext_config(1, 0, 10), &cache));
    assert!(err.contains(&shown) && err.contains("column `text` is not a string column"), "{err}");
}

#[test]
fn line_kinds_and_shard_names() {
    assert_eq!(wikitext::line_kind(" = Valkyria Chronicles III = \n"), LineKind::Title);
    assert_eq!(wikitext::line_kind(" = = Gameplay = = \n"), LineKind::Section);
    assert_eq!(wikitext::line_kind(" = = = 2000 – 2005 = = = \n"), LineKind::Section);
    assert_eq!(wikitext::line_kind(" \n"), LineKind::Empty);
    assert_eq!(wikitext::line_kind(" The game = fun , by all = accounts \n"), LineKind::Paragraph);
    assert_eq!(wikitext::line_kind(" = = unbalanced = \n"), LineKind::Paragraph);
    assert!(wikitext::is_shard("wikitext-103-v1/validation-00000-of-00001.parquet"));
    assert!(wikitext::is_shard("wikitext-103-v1/validation/0000.parquet"), "the refs/convert/parquet layout");
    assert!(!wikitext::is_shard("wikitext-103-v1/train-00000-of-00002.parquet"));
    assert!(!wikitext::is_shard("wikitext-103-raw-v1/validation-00000-of-00001.parquet"));
    assert!(!wikitext::is_shard("wikitext-103-v1/validation-00000-of-00001.json"));
}

#[test]
fn jsonl_references_are_kept_and_hashed_and_plain_sets_keep_their_hash() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = |name: &str, text: &str, count: u32| {
        std::fs::write(dir.path().join(name), text).expect("write");
        let cfg = PromptConfig { source: PromptSource::File, count, path: Some(name.into()), ..plain_config() };
        PromptSet::load(&cfg, dir.path(), dir.path())
    };
    let with = file(
        "with.jsonl",
        "{\"prompt\": \"The river\", \"reference\": \" runs to the sea.\"}\n\n{\"prompt\": \"A hill\"}\n",
        2,
    )
    .expect("loads");
    assert_eq!(with.texts, ["The river", "A hill"]);
    assert_eq!(with.references, [Some(" runs to the sea.".to_string()), None]);
    let without =
        file("without.jsonl", "{\"prompt\": \"The river\"}\n{\"prompt\": \"A hill\", \"reference\": null}\n", 2)
            .expect("loads");
    assert_eq!(without.references, [None, None]);
    assert_ne!(with.sha256(), without.sha256(), "references are part of the set's identity");
    let plain = file("plain.txt", "The river\n\nA hill\n", 2).expect("loads");
    assert_eq!(plain.references, [None, None]);
    assert_eq!(plain.sha256(), without.sha256(), "no references: the texts alone are hashed, as before");
    // A byte-order mark before JSONL is not text; other fields are ignored, a misspelt one is refused; a .jsonl
    // file is JSONL or refused.
    let bom = file("bom.jsonl", "\u{feff}{\"prompt\": \"The river\", \"id\": 7}\n{\"prompt\": \"A hill\"}\n", 2)
        .expect("loads");
    assert_eq!(bom.texts, ["The river", "A hill"]);
    // Near names of fields the line has, or that are not strings, are other fields.
    let near = file(
        "near.jsonl",
        "{\"prompt\": \"x\", \"reference\": \"y\", \"preference\": \"z\", \"references\": [\"a\"]}\n",
        1,
    )
    .expect("loads");
    assert_eq!(near.references, [Some("y".to_string())]);
    let typo = file("typo.jsonl", "{\"prompt\": \"x\", \"refrence\": \"y\"}\n", 1).expect_err("refused");
    assert!(format!("{typo:#}").contains("line 1: field \"refrence\" is not read"), "{typo:#}");
    assert!(format!("{typo:#}").contains("name it \"reference\""), "{typo:#}");
    let plain = file("plain.jsonl", "The river\n\n{\"prompt\": \"A hill\"}\n", 1).expect_err("refused");
    assert!(format!("{plain:#}").contains("plain.jsonl: line 1: not a JSON object"), "{plain:#}");
    // An empty file (or only blank lines) says so, JSONL or plain text.
    for (name, text) in [("empty.jsonl", ""), ("blank.txt", "\n  \n"), ("bom.txt", "\u{feff}")] {
        let empty = file(name, text, 1).expect_err("refused");
        assert!(format!("{empty:#}").contains(&format!("{name} is empty: no prompt in it")), "{empty:#}");
    }
    // An empty prompt would fail every cell of the run later ("0 tokens"): refused here, naming its line.
    let empty = file("empty-prompt.jsonl", "{\"prompt\": \"x\"}\n{\"prompt\": \" \"}\n", 2).expect_err("refused");
    assert!(format!("{empty:#}").contains("empty-prompt.jsonl: line 2: \"prompt\" is empty"), "{empty:#}");
    let bad = file("bad.jsonl", "{\"prompt\": \"x\", \"reference\": 3}\n", 1).expect_err("refused");
    assert!(format!("{bad:#}").contains("bad.jsonl: line 1: \"reference\" is 3, not a string"), "{bad:#}");

    // The embedded demo set hashes as it always has (bundles of format 1.0 record this value).
    let demo = PromptConfig { source: PromptSource::Embedded, count: 8, ..plain_config() };
    let demo = PromptSet::load(&demo, dir.path(), dir.path()).expect("embedded");
    assert_eq!(demo.sha256(), "e1c110d49cd978a5edb1a9dde917c96a817a132de606830266cceb5cb2e8f1ba");
}

/// A `[prompts]` table in an otherwise valid config.
fn config_with_prompts(prompts: &str) -> Result<GridConfig, schema::ConfigError> {
    let text = format!(
        "[run]\nname = \"t\"\ndtype = \"f32\"\nwarmup = 0\nrepetitions = 1\n\n[prompts]\n{prompts}\n\n[grid]\n\
         seq_lengths = [64]\nbatch_sizes = [1]\noutput_tokens = 16\n\n[[models]]\nkind = \"llama\"\n\
         id = \"org/llama\"\n"
    );
    GridConfig::from_toml(&text, "my.toml")
}

#[test]
fn prompt_config_validation_names_the_field_and_the_fix() {
    let ok = config_with_prompts("source = \"wikitext\"\npreset = \"medium\"").expect("valid");
    assert_eq!((ok.prompts.count, ok.prompts.prompt_count()), (32, 32), "the resolved config carries the count");
    assert_eq!(GridConfig::from_toml(&ok.to_toml(), "resolved").expect("round trip"), ok);
    assert_eq!(ok.prompts.dataset(), "Salesforce/wikitext");
    assert_eq!((ok.prompts.revision(), ok.prompts.min_chars()), ("main", 6000));
    let cases = [
        ("source = \"wikitext\"", "field `prompts.count`", "preset = \"small\""),
        ("source = \"wikitext\"\ncount = 0", "field `prompts.count`", "preset = \"small\""),
        ("source = \"wikitext\"\ncount = 10\npreset = \"small\"", "field `prompts.preset`", "keep one of them"),
        ("source = \"embedded\"\ncount = 8\ndataset = \"x/y\"", "field `prompts.dataset`", "source = \"wikitext\""),
        ("source = \"file\"\ncount = 8\npath = \"p.txt\"\nmin_chars = 10", "field `prompts.min_chars`", "remove it"),
        ("source = \"wikitext\"\ncount = 8\npath = \"p.txt\"", "field `prompts.path`", "remove path"),
        ("source = \"wikitext\"\ncount = 8\ndataset = \"a/b/c\"", "field `prompts.dataset`", "ORG/NAME"),
        ("source = \"wikitext\"\ncount = 8\nmin_chars = 0", "field `prompts.min_chars`", "6000"),
        ("source = \"wikitext\"\npreset = \"huge\"", "unknown variant `huge`", "experiments.toml"),
    ];
    for (table, field, fix) in cases {
        let err = config_with_prompts(table).expect_err(table).to_string();
        assert!(err.contains("my.toml") && err.contains(field) && err.contains(fix), "{table}: {err}");
    }
}

/// A tiny synthetic grid (both architectures, 2 cells) on Wikitext prompts.
const WIKITEXT_GRID: &str = r#"
[run]
name = "wikitext"
device = "cpu"
dtype = "f32"
warmup = 0
repetitions = 1

[prompts]
source = "wikitext"
preset = "small"
min_chars = 1000
seed = 7

[grid]
seq_lengths = [40]
batch_sizes = [2]
steps = [4]
output_tokens = 32

[[models]]
kind = "llama"
id = "dllm-bench/synthetic-llama-tiny"

[models.synthetic]
preset = "tiny"
seed = 1

[[models]]
kind = "llada"
id = "dllm-bench/synthetic-llada-tiny"

[models.synthetic]
preset = "tiny"
seed = 2
"#;

#[test]
fn a_run_with_wikitext_prompts_records_the_set_and_max_prompts_cuts_a_preset() {
    let sb = Sandbox::new();
    let cfg = sb.write("wikitext.toml", WIKITEXT_GRID);
    let cfg_s = cfg.to_str().expect("utf8");
    // Without the dataset: exit 2 before any model is touched, naming the cache path and the fetch command.
    let out = sb.cmd(&["run", "--config", cfg_s]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("datasets--Salesforce--wikitext") && stderr(&out).contains("dllm-bench fetch"));
    let check = sb.cmd(&["fetch", "--config", cfg_s, "--local-files-only"]);
    assert_exit!(check, 1);
    assert!(stdout(&check).contains("missing  ") && stdout(&check).contains("datasets--Salesforce--wikitext"));

    wikitext_cache(sb.path(), &wikitext_rows(12, 4), 1);
    let check = sb.cmd(&["fetch", "--config", cfg_s, "--local-files-only"]);
    assert_exit!(check, 0);
    assert!(stdout(&check).contains(&format!("ok       {}", shard_path(&sb.cache(), 0, 1).display())));
    let results = sb.results();
    let out =
        sb.cmd(&["run", "--config", cfg_s, "--output-dir", results.to_str().expect("utf8"), "--max-prompts", "4"]);
    assert_exit!(out, 0);
    let b = schema::read_bundle(&std::fs::read_to_string(stdout(&out).trim()).expect("bundle")).expect("valid");
    assert_eq!(b.prompt_set.source, format!("wikitext:Salesforce/wikitext:wikitext-103-v1:validation@{COMMIT}"));
    assert_eq!(b.prompt_set.count, 4);
    assert!(b.prompt_set.selection.starts_with("seeded sample of 4 of "), "{}", b.prompt_set.selection);
    assert_eq!((b.provenance.config.prompts.count, b.provenance.config.prompts.preset), (4, None));
    let cache = sb.cache();
    let expected = load(&wikitext_config(4, 7, 1000), &cache).expect("loads");
    assert_eq!(b.prompt_set.sha256, Some(expected.sha256()), "the bundle hashes the prompts the runner used");
    assert!(b.cells.iter().all(|c| c.status == schema::CellStatus::Ok), "every cell ran");
}

#[test]
fn plan_reads_a_prompt_file_as_run_does() {
    // `plan` is the check before jobs are queued (jobs/submit.sh runs it): a prompt file that `run` would refuse
    // is refused there too, with run's message.
    let sb = crate::util::Sandbox::new();
    let demo = include_str!("../../config/demo.toml")
        .replace("source = \"embedded\"\ncount = 8", "source = \"file\"\npath = \"prompts.txt\"\ncount = 2");
    assert!(demo.contains("path = \"prompts.txt\""), "the demo's [prompts] changed: adapt this test");
    sb.write("grid.toml", &demo);
    let out = sb.cmd(&["plan", "--config", "grid.toml"]);
    crate::assert_exit!(out, 2);
    let err = crate::util::stderr(&out);
    assert!(err.contains("grid.toml: prompts.path: the prompt file") && err.contains("prompts.txt"), "{err}");
    sb.write("prompts.txt", "Only one prompt here.\n");
    let out = sb.cmd(&["plan", "--config", "grid.toml"]);
    crate::assert_exit!(out, 2);
    let err = crate::util::stderr(&out);
    assert!(err.contains("grid.toml: field `prompts.count`: 2 prompts, but file:prompts.txt has only 1\n"), "{err}");
    assert!(err.contains("\n  fix: lower prompts.count"), "{err}");
    sb.write("prompts.txt", "The first prompt.\n\nThe second prompt.\n");
    crate::assert_exit!(sb.cmd(&["plan", "--config", "grid.toml"]), 0);
}
