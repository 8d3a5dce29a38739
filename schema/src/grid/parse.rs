//! Reading a config from TOML (strict: an unknown field is an error) and writing the resolved config back.
//!
//! A parse error names the line and what to do once: the slips a person makes (a JSON bundle passed as the config,
//! an empty file, `[models]` for `[[models]]` and `[[grid]]` for `[grid]`, a missing table) get their own message
//! and fix; anything else is the parser's message with the line quoted, cut to 80 characters.

use super::{ConfigError, GridConfig};

/// The most characters of the offending line quoted in a parse error (a minified file is one long line).
const SNIPPET_CHARS: usize = 80;

/// The most characters of the parser's own message (serde quotes a wrong value whole).
const MESSAGE_CHARS: usize = 240;

/// Tables written once (`[name]`), as opposed to the lists of tables in [`table_for_array`].
const ONE_TABLES: [&str; 8] = [
    "run",
    "prompts",
    "grid",
    "quality",
    "models.synthetic",
    "quality.evaluators.synthetic",
    "quality.bertscore",
    "quality.bertscore.synthetic",
];

impl GridConfig {
    /// Parses and validates a TOML config. `file` names it in errors.
    ///
    /// A hand-written config is strict: a field this version does not know is a typo, and an error. (The config
    /// embedded in a bundle is read leniently instead, as provenance: a bundle of a newer minor version may carry
    /// fields this build does not know, and the minor-version promise is that it still reads.)
    pub fn from_toml(text: &str, file: &str) -> Result<GridConfig, ConfigError> {
        let mut config = GridConfig::parse_toml(text, file)?;
        config.validate(file)?;
        config.check_used(file)?;
        // A preset is recorded as the count it stands for, so that every reader sees the number.
        config.prompts.count = config.prompts.prompt_count();
        // So is BERTScore's default layer (validation has made sure there is one).
        if let Some(b) = config.quality.as_mut().and_then(|q| q.bertscore.as_mut()) {
            b.layer = b.layer();
        }
        Ok(config)
    }

    /// Parses a TOML config as [`GridConfig::from_toml`] does (strictly: an unknown field is an error) without its
    /// rules ([`GridConfig::validate`], [`GridConfig::check_used`]) nor the preset's count: for a reader that applies
    /// command-line overrides first and then checks the result (the runner's `plan` and `run`), so that an override
    /// can mend what the file alone gets wrong (`--seq-len 34` for a file's N = 33).
    pub fn parse_toml(text: &str, file: &str) -> Result<GridConfig, ConfigError> {
        let parse_err = |e: toml::de::Error| {
            let (message, fix) = explain(text, &e);
            ConfigError::Parse { file: file.to_string(), message, fix }
        };
        let mut unknown = Vec::new();
        let de = toml::Deserializer::parse(text).map_err(parse_err)?;
        let parsed: Result<GridConfig, _> = serde_ignored::deserialize(de, |path| unknown.push(field_path(&path)));
        // An unknown field is reported first: a typo (`warmpu`) also makes its field missing.
        if let Some(path) = unknown.first() {
            let line = field_line(text, path).map_or(String::new(), |i| format!("line {}: ", i + 1));
            return Err(ConfigError::Parse {
                file: file.to_string(),
                message: format!("{line}unknown field `{path}` (a typo, or a field of a newer dllm-bench)"),
                fix: match suggest_field(path) {
                    Some(hint) => format!("{hint}; config/experiments.toml documents every field"),
                    None => ConfigError::COMPARE.to_string(),
                },
            });
        }
        parsed.map_err(parse_err)
    }

    /// The TOML text of this config (the resolved form, overrides applied).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# config not representable as TOML: {e}"))
    }
}

/// The fields a config can hold, as `(table, field)` pairs (`("run", "warmup")`, `("models[].synthetic",
/// "layers")`; the top level's table is `""`), read from the config's JSON Schema: the same names serde reads.
fn config_fields() -> Vec<(String, String)> {
    schema_fields(&serde_json::to_value(schemars::schema_for!(GridConfig)).unwrap_or_default())
}

/// The fields of a JSON Schema's objects as `(table, field)` pairs, as [`config_fields`] (any root type).
pub(crate) fn schema_fields(schema: &serde_json::Value) -> Vec<(String, String)> {
    let defs = schema.get("$defs").cloned().unwrap_or_default();
    let mut out = Vec::new();
    walk_fields(schema, &defs, String::new(), &mut out, 0);
    out
}

fn walk_fields(
    node: &serde_json::Value,
    defs: &serde_json::Value,
    table: String,
    out: &mut Vec<(String, String)>,
    depth: usize,
) {
    // A bundle nests a few objects deep (a cell's repetitions, its config's tables); the bound keeps a recursive
    // type from looping.
    if depth > 24 {
        return;
    }
    if let Some(name) = node.get("$ref").and_then(|r| r.as_str()).and_then(|r| r.strip_prefix("#/$defs/")) {
        if let Some(def) = defs.get(name) {
            walk_fields(def, defs, table, out, depth + 1);
        }
        return;
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        for alt in node.get(key).and_then(|a| a.as_array()).into_iter().flatten() {
            walk_fields(alt, defs, table.clone(), out, depth + 1);
        }
    }
    if let Some(items) = node.get("items") {
        walk_fields(items, defs, format!("{table}[]"), out, depth + 1);
    }
    for (field, value) in node.get("properties").and_then(|p| p.as_object()).into_iter().flatten() {
        if !out.iter().any(|(t, f)| *t == table && f == field) {
            out.push((table.clone(), field.clone()));
        }
        let inner = if table.is_empty() { field.clone() } else { format!("{table}.{field}") };
        walk_fields(value, defs, inner, out, depth + 1);
    }
}

/// What an unknown field most likely meant: a field of its table a slip away (`repetitons`: `repetitions`),
/// or the same name in another table (`seed` in [grid]: `seed belongs in [run]`); `None` when nothing is near.
fn suggest_field(path: &str) -> Option<String> {
    suggest_in(&config_fields(), path).map(|s| s.text(true))
}

/// What [`suggest_in`] found for an unknown field.
pub(crate) enum Suggestion {
    /// A field of the same table a slip away.
    Near {
        /// The field meant.
        field: String,
        /// The unknown field as written.
        given: String,
        /// The table, in words (`[run]`, `the top level`).
        place: String,
    },
    /// The same name is a field of other tables.
    Elsewhere {
        /// The unknown field as written.
        given: String,
        /// The tables that have it (`[run]`).
        tables: Vec<String>,
        /// Where it was written.
        place: String,
    },
}

impl Suggestion {
    /// In words; `with_place`: a near field's table too (`(the field of [run] nearest to `repetitons`)`), which a
    /// config's reader says and a bundle's, whose objects are no tables, does not.
    pub(crate) fn text(&self, with_place: bool) -> String {
        match self {
            Suggestion::Near { field, given, place } if with_place => {
                format!("did you mean `{field}`? (the field of {place} nearest to `{given}`)")
            }
            Suggestion::Near { field, .. } => format!("did you mean `{field}`?"),
            Suggestion::Elsewhere { given, tables, place } => match tables.as_slice() {
                [one] => format!("`{given}` is a field of {one}, not of {place}: move it there"),
                [many @ .., last] => format!(
                    "`{given}` is a field of {} and {last}, not of {place}: move it to the one meant",
                    many.join(", ")
                ),
                [] => String::new(),
            },
        }
    }
}

/// [`suggest_field`] among `fields` ([`schema_fields`]).
pub(crate) fn suggest_in(fields: &[(String, String)], path: &str) -> Option<Suggestion> {
    // `models[0].synthetic.layerz`: the table `models[].synthetic`, the field `layerz`.
    let (table, field) = path.rsplit_once('.').unwrap_or(("", path));
    let mut table_key = String::new();
    for (i, part) in table.split('.').filter(|p| !p.is_empty()).enumerate() {
        if i > 0 {
            table_key.push('.');
        }
        match part.split_once('[') {
            Some((name, _)) => {
                table_key.push_str(name);
                table_key.push_str("[]");
            }
            None => table_key.push_str(part),
        }
    }
    let in_words =
        |t: &str| if t.is_empty() { "the top level".to_string() } else { format!("[{}]", t.replace("[]", "")) };
    let norm = |s: &str| s.to_ascii_lowercase().replace('-', "_");
    let wanted = norm(field);
    let here: Vec<&str> = fields.iter().filter(|(t, _)| *t == table_key).map(|(_, f)| f.as_str()).collect();
    // A slip: a letter or two off, or two letters swapped; a short name only one off.
    let most = if wanted.chars().count() >= 5 { 2 } else { 1 };
    let near =
        here.iter().map(|f| (edit_distance(&wanted, &norm(f)), *f)).filter(|(d, _)| *d <= most).min_by_key(|(d, _)| *d);
    if let Some((_, f)) = near {
        return Some(Suggestion::Near { field: f.to_string(), given: field.to_string(), place: in_words(&table_key) });
    }
    let tables: Vec<String> = fields
        .iter()
        .filter(|(t, f)| *t != table_key && norm(f) == wanted && !t.is_empty())
        .map(|(t, _)| in_words(t))
        .collect();
    (!tables.is_empty()).then(|| Suggestion::Elsewhere {
        given: field.to_string(),
        tables,
        place: in_words(&table_key),
    })
}

/// Edits (insert, delete, replace, swap two neighbours) from `a` to `b` (optimal string alignment).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    d[0] = (0..=b.len()).collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// An ignored field's path as the config's tables name it (`models[0].synthetic.layerz`): serde_ignored's own
/// display writes `?` for every optional table on the way (`models.0.synthetic.?.layerz`).
pub(crate) fn field_path(path: &serde_ignored::Path) -> String {
    use serde_ignored::Path as P;
    match path {
        P::Root => String::new(),
        P::Seq { parent, index } => format!("{}[{index}]", field_path(parent)),
        P::Map { parent, key } => match field_path(parent) {
            p if p.is_empty() => key.clone(),
            p => format!("{p}.{key}"),
        },
        P::Some { parent } | P::NewtypeStruct { parent } | P::NewtypeVariant { parent } => field_path(parent),
    }
}

/// A parse error of `text` as `(message, fix)`: the slip it is when one is recognised, else the parser's message
/// at its line.
fn explain(text: &str, e: &toml::de::Error) -> (String, String) {
    json_instead(text)
        .or_else(|| empty(text))
        // `[models]` for `[[models]]` (and the reverse) fails wherever toml or serde notices it (often at the later,
        // correct table): named at the table that is wrong.
        .or_else(|| table_for_array(text))
        .or_else(|| array_for_table(text))
        .or_else(|| missing_table(e))
        .or_else(|| wrong_type(e).map(|fix| (parse_message(text, e), fix)))
        .unwrap_or_else(|| (parse_message(text, e), ConfigError::COMPARE.to_string()))
}

/// The fix of a value of the wrong type (`invalid type: string "one", expected u32`): what the field takes, in
/// words a config's writer knows (`a whole number such as 3, without quotes`); `None` for another error, or a type
/// with no plainer name.
fn wrong_type(e: &toml::de::Error) -> Option<String> {
    let msg = e.message().trim();
    // A number out of the field's range (`invalid value: integer `-1`, expected u32`): the range in words.
    if let Some((_, expected)) = msg.strip_prefix("invalid value: integer ").and_then(|m| m.split_once("expected ")) {
        let most = match expected.trim() {
            "u8" => u64::from(u8::MAX),
            "u16" => u64::from(u16::MAX),
            "u32" => u64::from(u32::MAX),
            "u64" | "usize" => u64::MAX,
            _ => return None,
        };
        return Some(format!(
            "write the value as a whole number from 0 to {most}; \
             config/experiments.toml documents every field"
        ));
    }
    let expected = msg.strip_prefix("invalid type: ")?.split_once(", expected ")?.1.trim();
    let what = match expected {
        "u8" | "u16" | "u32" | "u64" | "usize" | "i8" | "i16" | "i32" | "i64" | "isize" => {
            "a whole number such as 3, without quotes"
        }
        "f32" | "f64" => "a number such as 0.5, without quotes",
        "a boolean" => "true or false, without quotes",
        "a string" | "a borrowed string" => "text in double quotes, such as \"bf16\"",
        "a sequence" => "a list in brackets, such as [1, 4]",
        "a map" => "a table (its own [header], or { key = value, ... })",
        _ => return None,
    };
    Some(format!("write the value as {what}; config/experiments.toml documents every field"))
}

/// The text without a byte-order mark and leading whitespace.
fn body(text: &str) -> &str {
    text.trim_start_matches(|c: char| c == '\u{feff}' || c.is_whitespace())
}

/// A JSON document (a result bundle given as `--config`) instead of TOML: `{` or `[` then `"` or `{`. (TOML
/// starts neither way, except a quoted table header such as `["run"]`, which is left to the parser.)
fn json_instead(text: &str) -> Option<(String, String)> {
    let body = body(text);
    let mut chars = body.chars();
    let open = chars.next()?;
    let next = chars.as_str().trim_start().chars().next()?;
    let header = || body.lines().next().is_some_and(|l| l.split('#').next().unwrap_or("").trim().ends_with(']'));
    let json = match open {
        '{' => next == '"' || next == '{',
        '[' => next == '{' || (next == '"' && !header()),
        _ => false,
    };
    json.then(|| {
        (
            "this file is JSON (a result bundle?); a grid config is TOML".to_string(),
            "pass a TOML grid config such as config/experiments.toml".to_string(),
        )
    })
}

/// A file with nothing but blank lines and comments.
fn empty(text: &str) -> Option<(String, String)> {
    let body = body(text);
    body.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')).then(|| {
        let what = if body.is_empty() { "the file is empty" } else { "the file has only comments" };
        (
            format!("{what}: a grid config needs the tables [run], [prompts], [grid] and [[models]]"),
            "start from config/experiments.toml, which documents every field".to_string(),
        )
    })
}

/// The table headers of `text`, one per line (`""` for a line that is not one), comments cut.
fn headers(text: &str) -> Vec<String> {
    text.lines().map(|line| line.split('#').next().unwrap_or("").trim().to_string()).collect()
}

/// The first `[name]` table header where `name` is a list of tables (`[[models]]`, `[[quality.evaluators]]`, or
/// any name the text also writes as `[[name]]`), as `(message naming its line, fix)`; `None` when there is none.
fn table_for_array(text: &str) -> Option<(String, String)> {
    const ARRAYS: [&str; 2] = ["models", "quality.evaluators"];
    let headers = headers(text);
    headers.iter().enumerate().find_map(|(i, h)| {
        let name = h.strip_prefix('[')?.strip_suffix(']')?.trim();
        if name.starts_with('[') {
            return None;
        }
        let listed = ARRAYS.contains(&name) || headers.iter().any(|g| *g == format!("[[{name}]]"));
        listed.then(|| {
            (
                format!("line {}: `[{name}]` is one table, but `{name}` is a list of tables", i + 1),
                format!("write `[[{name}]]` (two brackets) before each entry"),
            )
        })
    })
}

/// The first `[[name]]` header where `name` is one table (`[grid]`), as `(message naming its line, fix)`.
fn array_for_table(text: &str) -> Option<(String, String)> {
    headers(text).iter().enumerate().find_map(|(i, h)| {
        let name = h.strip_prefix("[[")?.strip_suffix("]]")?.trim();
        ONE_TABLES.contains(&name).then(|| {
            (
                format!("line {}: `[[{name}]]` is a list of tables, but [{name}] is one table", i + 1),
                format!("write [{name}], not [[{name}]]"),
            )
        })
    })
}

/// A top-level table the file lacks (serde's "missing field `grid`", placed at the start of the file).
fn missing_table(e: &toml::de::Error) -> Option<(String, String)> {
    let name = e.message().trim().strip_prefix("missing field `")?.strip_suffix('`')?;
    match name {
        "models" => Some((
            "missing the [[models]] tables".to_string(),
            "add a [[models]] table with kind and id for each model, as config/experiments.toml does".to_string(),
        )),
        "run" | "prompts" | "grid" => Some((
            format!("missing table [{name}]"),
            format!("add [{name}], as config/experiments.toml does (it documents every field)"),
        )),
        _ => None,
    }
}

/// The line (0-based) that writes the field at `path` (`grid.seed`, `models[0].synthetic.layerz`, `extra`): a
/// table header naming it, a key in its table, or a key of an inline table there.
fn field_line(text: &str, path: &str) -> Option<usize> {
    let unquote = |k: &str| k.trim().trim_matches(|c| c == '"' || c == '\'').to_string();
    let want: Vec<String> = path.split('.').map(|k| k.split('[').next().unwrap_or(k).to_string()).collect();
    let last = want.last()?;
    let mut table: Vec<String> = Vec::new();
    for (i, line) in headers(text).iter().enumerate() {
        let line = line.trim_start_matches('\u{feff}');
        if line.starts_with('[') {
            table = line.trim_matches(|c| c == '[' || c == ']').split('.').map(unquote).collect();
            if table == want {
                return Some(i);
            }
        } else if let Some((key, value)) = line.split_once('=') {
            let full: Vec<String> = table.iter().cloned().chain(key.split('.').map(unquote)).collect();
            let inline = value.contains('{')
                && want.len() > full.len()
                && want.starts_with(&full)
                && value.split(['{', ',']).any(|kv| kv.split('=').next().map(unquote).as_ref() == Some(last));
            if full == want || inline {
                return Some(i);
            }
        }
    }
    None
}

/// A toml error as one line with its position, the line quoted (cut to [`SNIPPET_CHARS`] around the column).
fn parse_message(text: &str, e: &toml::de::Error) -> String {
    let msg = clip_middle(e.message().trim(), MESSAGE_CHARS);
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            let msg = table_path(text, line - 1)
                .and_then(|table| {
                    let field = msg.strip_prefix("missing field `")?.strip_suffix('`')?;
                    Some(format!("missing field `{table}.{field}`"))
                })
                .unwrap_or(msg);
            let snippet = snippet(text.lines().nth(line - 1).unwrap_or(""), col);
            format!("line {line}, column {col}: {msg} (at `{snippet}`)")
        }
        None => msg,
    }
}

/// The dotted path of the table whose header is line `index` (0-based), with the entry's index in a list of
/// tables (`run`, `models[1]`, `models[1].synthetic`); `None` when that line is not a table header.
fn table_path(text: &str, index: usize) -> Option<String> {
    let headers = headers(text);
    let header = headers.get(index)?.trim_start_matches('\u{feff}');
    let names: Vec<&str> =
        header.strip_prefix('[')?.trim_matches(|c| c == '[' || c == ']').split('.').map(str::trim).collect();
    let mut path = String::new();
    for (j, name) in names.iter().enumerate() {
        if j > 0 {
            path.push('.');
        }
        path.push_str(name.trim_matches('"'));
        let list = format!("[[{}]]", names[..=j].join("."));
        match headers[..=index].iter().filter(|h| **h == list).count() {
            0 => {}
            n => path.push_str(&format!("[{}]", n - 1)),
        }
    }
    Some(path)
}

/// `line` trimmed, or when longer than [`SNIPPET_CHARS`] the stretch of it around `col` (1-based, in characters)
/// with `…` where it is cut.
fn snippet(line: &str, col: usize) -> String {
    let line = line.trim_start_matches('\u{feff}');
    let chars: Vec<char> = line.chars().collect();
    if chars.len() <= SNIPPET_CHARS {
        return line.trim().to_string();
    }
    let start = col.saturating_sub(1 + SNIPPET_CHARS / 2).min(chars.len() - SNIPPET_CHARS);
    let end = start + SNIPPET_CHARS;
    let cut: String = chars[start..end].iter().collect();
    let (head, tail) = (if start > 0 { "…" } else { "" }, if end < chars.len() { "…" } else { "" });
    format!("{head}{}{tail}", if start > 0 { cut.as_str() } else { cut.trim_start() })
}

/// `msg`, or when longer than `most` characters its start and end with `…` between.
fn clip_middle(msg: &str, most: usize) -> String {
    let chars: Vec<char> = msg.chars().collect();
    if chars.len() <= most {
        return msg.to_string();
    }
    let half = most / 2;
    let (head, tail): (String, String) = (chars[..half].iter().collect(), chars[chars.len() - half..].iter().collect());
    format!("{head}…{tail}")
}
