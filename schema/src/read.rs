//! Reading and writing bundles: version dispatch, upgrades of older formats, and consistency checks.
//!
//! Older formats are upgraded as JSON, one version step at a time, before the typed parse, so each step is
//! a small documented transformation and the typed model only knows the current format.

use serde_json::Value;

use crate::bundle::{Bundle, CellStatus};
use crate::strict::Strict;
use crate::version::{SchemaVersion, VersionNumber};

/// Why a bundle cannot be read. The message says what is wrong and what to do.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BundleError {
    /// Not JSON at all.
    #[error("not a valid JSON file: {message} at line {line}, column {column}")]
    NotJson {
        /// Parser message.
        message: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
    },
    /// A NaN or Infinity where a number goes (Python's `json.dump` writes them unless `allow_nan=False`): not JSON.
    #[error(
        "not a valid JSON file: `{path}` holds NaN or Infinity at line {line}, column {column}, which JSON has no \
         place for (Python's json.dump writes them unless allow_nan=False)"
    )]
    NotFinite {
        /// The field, as a path (`cells[0].repetitions[0].e2e_ms`).
        path: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
    },
    /// JSON, but not an object with `schema_version`.
    #[error("not a dllm-bench bundle: {0}")]
    NotABundle(String),
    /// Written by a newer, incompatible major version of the format.
    #[error(
        "this bundle uses schema version {found}, but this build of dllm-bench reads versions up to {supported}; \
         fix: upgrade dllm-bench (or the explorer) to a release that reads schema {}.x",
        found.major
    )]
    NewerVersion {
        /// Version found in the file.
        found: VersionNumber,
        /// Newest version this build reads.
        supported: SchemaVersion,
    },
    /// A field is missing or has the wrong type.
    #[error("invalid bundle (schema {version}): {}: {message}", field_at(path))]
    Invalid {
        /// Version the file declared.
        version: VersionNumber,
        /// Path of the field, e.g. `cells[3].key.batch_size`; empty: the top level (a missing top-level field).
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Well-typed but self-contradictory.
    #[error("inconsistent bundle: {0}")]
    Inconsistent(String),
}

/// Where a [`BundleError::Invalid`] is: "field" and its path in backticks, or "at the top level".
fn field_at(path: &str) -> String {
    match path.is_empty() {
        true => "at the top level".into(),
        false => format!("field `{path}`"),
    }
}

impl BundleError {
    /// What to do about the error, for every reader to print after its message (`dllm-bench validate`, the
    /// explorer); empty for an error whose message names its own fix (a newer format: upgrade).
    pub fn fix(&self) -> &'static str {
        match self {
            BundleError::NotJson { .. } => {
                "repair the JSON at that line and column (a file cut short by a copy or a full disk? the runner \
                 writes whole files only), or use the file as the runner wrote it"
            }
            BundleError::NotFinite { .. } => {
                "write a finite number there, or leave the field out where nothing was measured (absent, never NaN)"
            }
            BundleError::NotABundle(_) => "pass a result bundle (a .json file that `dllm-bench run` or `merge` wrote)",
            BundleError::NewerVersion { .. } => "",
            BundleError::Invalid { .. } => {
                "give that field (or add it, where it is missing) a value of the type the format has for it \
                 (`dllm-bench schema` prints the JSON Schema), or use the file as the runner wrote it"
            }
            BundleError::Inconsistent(_) => {
                "make the fields named above agree (each rule is in the description of its field in `dllm-bench \
                 schema`), or use the file as the runner wrote it"
            }
        }
    }
}

/// A bundle as read, with what the reader had to do.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadBundle {
    /// The bundle, in the current format.
    pub bundle: Bundle,
    /// The version written in the file.
    pub file_version: VersionNumber,
    /// Repetitions whose `output_tokens` counted positions a diffusion model left masked (runners before the
    /// valid-token count; `committed_per_step` sums to less): read as the valid tokens, which T_gen counts.
    pub recounted_repetitions: usize,
}

impl ReadBundle {
    /// True when the file was an older format upgraded in memory.
    pub fn upgraded(&self) -> bool {
        self.file_version < SchemaVersion::CURRENT.number()
    }

    /// True when the file is a newer minor version: fields this build does not know were ignored.
    pub fn newer_minor(&self) -> bool {
        self.file_version > SchemaVersion::CURRENT.number()
    }
}

/// Reads a bundle of any supported version, upgrading it to the current one.
pub fn read_bundle(json: &str) -> Result<Bundle, BundleError> {
    read_bundle_detailed(json).map(|r| r.bundle)
}

/// Like [`read_bundle`], also saying which version the file had.
pub fn read_bundle_detailed(json: &str) -> Result<ReadBundle, BundleError> {
    // A byte-order mark (editors on some systems write one) is not part of the JSON.
    let json = json.strip_prefix('\u{feff}').unwrap_or(json);
    // First pass: only `schema_version` (everything else is skipped without allocating).
    #[derive(serde::Deserialize)]
    struct Header {
        #[serde(default)]
        schema_version: Option<Value>,
    }
    if !json.trim_start().starts_with('{') {
        return Err(match serde_json::from_str::<serde::de::IgnoredAny>(json) {
            Ok(_) => BundleError::NotABundle("the top level is not a JSON object".into()),
            Err(e) => not_json_in(json, &e),
        });
    }
    // Bundles this crate writes start with `schema_version`: read it without a pass over the whole text (the
    // typed parse below reports syntax errors as such). Anything else takes the full header pass.
    let schema_version = match leading_version(json) {
        Some(v) => Some(Value::String(v.to_string())),
        None => serde_json::from_str::<Header>(json).map_err(|e| not_json_in(json, &e))?.schema_version,
    };
    let raw = match schema_version {
        Some(Value::String(s)) => s,
        Some(other) => {
            return Err(BundleError::NotABundle(format!(
                "`schema_version` must be a string like \"1.0\", found {other}"
            )));
        }
        None => return Err(BundleError::NotABundle("the field `schema_version` is missing".into())),
    };
    let file_version = VersionNumber::parse(&raw).ok_or_else(|| {
        BundleError::NotABundle(format!("`schema_version` {raw:?} is not MAJOR.MINOR (e.g. \"1.0\")"))
    })?;
    let Some(version) = SchemaVersion::latest_of_major(file_version.major) else {
        return Err(BundleError::NewerVersion { found: file_version, supported: SchemaVersion::CURRENT });
    };
    let invalid = |path: String, message: String| BundleError::Invalid { version: file_version, path, message };
    // Older majors are upgraded as JSON, one version step at a time, and written back to text, so the typed
    // parse below exists once (from text, no intermediate tree: large bundles load fast, the wasm stays small).
    let upgraded;
    let text = if version == SchemaVersion::CURRENT {
        json
    } else {
        let mut value: Value = serde_json::from_str(json).map_err(|e| not_json_in(json, &e))?;
        let mut at = version;
        while at != SchemaVersion::CURRENT {
            at = upgrade_step(at, &mut value).map_err(|(path, message)| invalid(path, message))?;
        }
        upgraded = value.to_string();
        upgraded.as_str()
    };
    // A plain typed parse (one monomorphization of the bundle's deserializer: fast, and small in wasm), every struct
    // from an object only ([`Strict`]: serde would read one from an array of its values, by position); when it
    // fails, the field is named from where in the text the parser stopped.
    let mut bundle: Bundle = strict_from_str(text).map_err(|e| {
        let at = byte_offset(text, e.line(), e.column());
        if e.is_syntax() && e.to_string().starts_with("number out of range") {
            return invalid(
                json_path_at(text, at),
                "a number outside f64's range (such as 1e999, which would read as infinity): write a finite number, \
                 or leave the field out where nothing was measured"
                    .into(),
            );
        }
        if e.is_syntax() || e.is_eof() {
            // serde_json reports a value of the wrong JSON type where a name is expected (`"sampler": null`, a
            // number) as a syntax error: the text is JSON all the same, and the field is named.
            if serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() {
                return invalid(
                    json_path_at(text, at),
                    "a value of the wrong type: this field takes one of the names in quotes that \
                     schema/bundle.schema.json lists for it"
                        .into(),
                );
            }
            return not_json_in(text, &e);
        }
        let message = message_of(&e);
        // An array where an object goes ([`Strict`]): said in the format's words.
        match message.strip_prefix("invalid type: sequence, expected struct ") {
            Some(name) => invalid(
                json_path_at(text, at),
                format!(
                    "an array where an object goes (a {name}): its values would be read into the fields by position, \
                     which no writer of the format does; write it as an object with named fields"
                ),
            ),
            None => invalid(json_path_at(text, at), message),
        }
    })?;
    if file_version < SchemaVersion::V1_4.number() {
        // Runners before 1.4 ranked LLaDA's positions in f64 and drew Gumbel noise on the host, and their
        // embedded configs do not say so: the defaults of today's runner would misstate them.
        let g = &mut bundle.provenance.config.grid;
        g.confidence = crate::grid::Confidence::F64;
        g.gumbel_noise = crate::grid::GumbelNoise::Host;
    }
    let recounted_repetitions = recount_valid_tokens(&mut bundle);
    check(&bundle)?;
    Ok(ReadBundle { bundle, file_version, recounted_repetitions })
}

/// What a reader says of a bundle with [`ReadBundle::recounted_repetitions`] > 0.
pub fn recount_note(repetitions: usize) -> String {
    format!(
        "{repetitions} repetition(s) of an older runner counted positions left masked in output_tokens: read as the \
         valid tokens committed_per_step sums to, which throughput counts"
    )
}

/// Runners before the valid-token count (bundles of 1.5 to 1.7 written before it, with no version of their own)
/// counted in `output_tokens` the positions a diffusion model left masked, which generated no token; their
/// `committed_per_step` sums to the valid tokens (less). Those repetitions are read with that sum, so that every
/// reader's throughput counts valid tokens only (the study's T_gen); returns how many there were. A sum above
/// `output_tokens` is left for [`check`] to refuse.
fn recount_valid_tokens(bundle: &mut Bundle) -> usize {
    let mut recounted = 0;
    for r in bundle.cells.iter_mut().flat_map(|c| c.repetitions.iter_mut()) {
        if let Some(c) = &r.committed_per_step {
            let total: u64 = c.iter().map(|&n| u64::from(n)).sum();
            if total < r.output_tokens {
                r.output_tokens = total;
                recounted += 1;
            }
        }
    }
    recounted
}

/// The fields of a bundle's text that no reader knows, each by its path (`cells[0].repetitions[1].prefil_ms`): every
/// reader ignores them (a newer minor's fields; in a file of this version or an older one, a misspelling, whose
/// value is lost). Native readers only: `validate` warns of them.
#[cfg(not(target_arch = "wasm32"))]
pub fn unknown_fields(json: &str) -> Vec<String> {
    let json = json.strip_prefix('\u{feff}').unwrap_or(json);
    let mut unknown = Vec::new();
    let mut de = serde_json::Deserializer::from_str(json);
    let _: Result<Bundle, _> =
        serde_ignored::deserialize(&mut de, |p| unknown.push(crate::grid::parse::field_path(&p)));
    unknown
}

/// What an unknown field of a bundle ([`unknown_fields`]'s path) most likely meant, as the config's reader says it
/// (`did you mean `prefill_ms`? ...`, or the object it belongs to); `None` when no field is near. Native readers
/// only.
#[cfg(not(target_arch = "wasm32"))]
pub fn unknown_field_hint(path: &str) -> Option<String> {
    // The bundle's fields, from its JSON Schema, once per process (validate asks for every unknown field).
    static FIELDS: std::sync::LazyLock<Vec<(String, String)>> = std::sync::LazyLock::new(|| {
        crate::grid::parse::schema_fields(&serde_json::to_value(schemars::schema_for!(Bundle)).unwrap_or_default())
    });
    // A bundle's objects are no config tables: the question alone (`did you mean `prefill_ms`?`).
    crate::grid::parse::suggest_in(&FIELDS, path).map(|s| s.text(false))
}

/// `serde_json::from_str` through [`Strict`]: the value, then nothing but whitespace.
fn strict_from_str<'a, T: serde::Deserialize<'a>>(text: &'a str) -> Result<T, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = T::deserialize(Strict(&mut de))?;
    de.end()?;
    Ok(value)
}

/// The value of `schema_version` when it is the object's first member and a plain string (no escapes).
fn leading_version(json: &str) -> Option<&str> {
    let rest = json.trim_start().strip_prefix('{')?.trim_start().strip_prefix("\"schema_version\"")?;
    let rest = rest.trim_start().strip_prefix(':')?.trim_start().strip_prefix('"')?;
    let end = rest.find(['"', '\\'])?;
    rest[end..].starts_with('"').then(|| &rest[..end])
}

/// The parser's message without its ` at line L column C` suffix.
fn message_of(e: &serde_json::Error) -> String {
    e.to_string().split(" at line").next().unwrap_or_default().to_string()
}

/// The byte offset of 1-based `line` and `column` (in bytes, as serde_json counts them) in `text`.
fn byte_offset(text: &str, line: usize, column: usize) -> usize {
    let start: usize = text.split_inclusive('\n').take(line.saturating_sub(1)).map(str::len).sum();
    (start + column).min(text.len())
}

/// The path (`cells[2].key.batch_size`) of the value the JSON text is in at byte `offset`: the arrays and
/// objects open there, each object by the key read last in it. The text is valid JSON (checked before), so
/// a plain scan suffices. Where the parser stops after a value (a wrong type, an unknown variant) this names
/// that value; where it stops at the end of an object (a missing field), the object.
fn json_path_at(text: &str, offset: usize) -> String {
    enum Frame<'a> {
        Object { key: Option<&'a str>, expect_key: bool },
        Array { index: usize },
    }
    let bytes = text.as_bytes();
    let end = offset.min(bytes.len());
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    while i < end {
        match bytes[i] {
            b'{' => stack.push(Frame::Object { key: None, expect_key: true }),
            b'[' => stack.push(Frame::Array { index: 0 }),
            b'}' | b']' => {
                stack.pop();
            }
            b',' => match stack.last_mut() {
                Some(Frame::Object { expect_key, .. }) => *expect_key = true,
                Some(Frame::Array { index }) => *index += 1,
                None => {}
            },
            b'"' => {
                let start = i + 1;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                if let Some(Frame::Object { key, expect_key: expect @ true }) = stack.last_mut() {
                    *key = text.get(start..i.min(text.len()));
                    *expect = false;
                }
            }
            _ => {}
        }
        i += 1;
    }
    let mut path = String::new();
    for f in &stack {
        match f {
            Frame::Object { key: Some(k), .. } => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
            }
            Frame::Object { key: None, .. } => {}
            Frame::Array { index } => {
                path.push('[');
                path.push_str(&index.to_string());
                path.push(']');
            }
        }
    }
    path
}

/// A number in a message: as written for everyday magnitudes, in exponent form for the huge and the tiny (`1e300`
/// has 301 digits written out).
fn number_text(v: f64) -> String {
    match v.abs() {
        a if a == 0.0 || (1e-4..1e12).contains(&a) || !a.is_finite() => format!("{v}"),
        _ => format!("{v:e}"),
    }
}

fn not_json(e: &serde_json::Error) -> BundleError {
    BundleError::NotJson { message: message_of(e), line: e.line(), column: e.column() }
}

/// [`not_json`] for an error in `text`, saying so where the parser stopped at `NaN` or `Infinity` (what Python's
/// `json.dump` writes for a float that is not finite unless `allow_nan=False`), with the field.
fn not_json_in(text: &str, e: &serde_json::Error) -> BundleError {
    let at = byte_offset(text, e.line(), e.column());
    let near = text.get(at.saturating_sub(2)..(at + 9).min(text.len())).unwrap_or_default();
    if near.contains("NaN") || near.contains("Infinity") {
        let start = at.saturating_sub(2) + near.find(['N', 'I', '-']).unwrap_or(0);
        return BundleError::NotFinite { path: json_path_at(text, start), line: e.line(), column: e.column() };
    }
    not_json(e)
}

/// Writes a bundle as pretty JSON in the current version.
pub fn write_bundle(bundle: &Bundle) -> String {
    let mut b = bundle.clone();
    b.schema_version = SchemaVersion::CURRENT;
    // Serializing these types cannot fail: no maps with non-string keys, no non-finite floats reach here
    // because `check` refuses them on read and the runner never records them.
    serde_json::to_string_pretty(&b).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// One upgrade step: transforms `value` from `from` to the next version, returned.
fn upgrade_step(from: SchemaVersion, value: &mut Value) -> Result<SchemaVersion, (String, String)> {
    match from {
        SchemaVersion::V0_1 => {
            // 0.1 -> 1.0: seconds became milliseconds with unit-suffixed names; provenance gained
            // `attention`; the prompt set gained `selection` (its `sha256` stays absent: nothing hashed it).
            let root = value.as_object_mut().ok_or(("".to_string(), "not an object".to_string()))?;
            root.insert("schema_version".into(), Value::String("1.0".into()));
            if let Some(Value::Object(p)) = root.get_mut("provenance") {
                p.entry("attention").or_insert(Value::String("unrecorded (schema 0.1)".into()));
            }
            if let Some(Value::Object(p)) = root.get_mut("prompt_set") {
                p.entry("selection").or_insert(Value::String("unrecorded (schema 0.1)".into()));
            }
            if let Some(Value::Array(cells)) = root.get_mut("cells") {
                for (i, cell) in cells.iter_mut().enumerate() {
                    let Some(Value::Array(reps)) = cell.get_mut("repetitions") else { continue };
                    for (j, rep) in reps.iter_mut().enumerate() {
                        let Some(rep) = rep.as_object_mut() else { continue };
                        for (old, new) in [("latency_s", "e2e_ms"), ("prefill_s", "prefill_ms")] {
                            if let Some(v) = rep.remove(old) {
                                let secs = v.as_f64().ok_or((
                                    format!("cells[{i}].repetitions[{j}].{old}"),
                                    format!("expected seconds as a number, found {v}"),
                                ))?;
                                rep.insert(new.into(), serde_json::json!(secs * 1000.0));
                            }
                        }
                        rep.entry("prompt_indices").or_insert(Value::Array(vec![]));
                    }
                }
            }
            Ok(SchemaVersion::V1_0)
        }
        // 1.0 -> 1.1 only added optional fields: nothing to transform.
        SchemaVersion::V1_0 => Ok(SchemaVersion::V1_1),
        // 1.1 -> 1.2, 1.2 -> 1.3, 1.3 -> 1.4, 1.4 -> 1.5, 1.5 -> 1.6, 1.6 -> 1.7, 1.7 -> 1.8 and 1.8 -> 1.9
        // likewise.
        SchemaVersion::V1_1 => Ok(SchemaVersion::V1_2),
        SchemaVersion::V1_2 => Ok(SchemaVersion::V1_3),
        SchemaVersion::V1_3 => Ok(SchemaVersion::V1_4),
        SchemaVersion::V1_4 => Ok(SchemaVersion::V1_5),
        SchemaVersion::V1_5 => Ok(SchemaVersion::V1_6),
        SchemaVersion::V1_6 => Ok(SchemaVersion::V1_7),
        SchemaVersion::V1_7 => Ok(SchemaVersion::V1_8),
        SchemaVersion::V1_8 => Ok(SchemaVersion::V1_9),
        SchemaVersion::V1_9 => Ok(SchemaVersion::V1_9),
    }
}

/// Checks the consistency rules a bundle must keep beyond its types (what [`read_bundle`] checks after parsing):
/// writers call it before a bundle replaces anything on disk, so that no bundle is written that a reader refuses.
pub fn check_bundle(b: &Bundle) -> Result<(), BundleError> {
    check(b)
}

/// Whether `s` is an RFC 3339 date-time: `2025-01-31T12:00:00Z`, with optional fractional seconds and a `Z` or
/// `+HH:MM` / `-HH:MM` offset (a real calendar date, hours to 23, minutes to 59, seconds to 60).
pub fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |from: usize, to: usize| b.get(from..to).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let at = |i: usize, c: u8| b.get(i).is_some_and(|x| x.eq_ignore_ascii_case(&c));
    let shape = digits(0, 4)
        && at(4, b'-')
        && digits(5, 7)
        && at(7, b'-')
        && digits(8, 10)
        && at(10, b'T')
        && digits(11, 13)
        && at(13, b':')
        && digits(14, 16)
        && at(16, b':')
        && digits(17, 19);
    if !shape {
        return false;
    }
    // ASCII digits: these slices are on character boundaries and parse.
    let num = |from: usize, to: usize| s[from..to].parse::<u32>().unwrap_or(u32::MAX);
    let (year, month, day) = (num(0, 4), num(5, 7), num(8, 10));
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    if day == 0 || day > days || num(11, 13) > 23 || num(14, 16) > 59 || num(17, 19) > 60 {
        return false;
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        rest = &frac[n..];
    }
    match rest.as_bytes() {
        [b'Z' | b'z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] if [h1, h2, m1, m2].iter().all(|d| d.is_ascii_digit()) => {
            (h1 - b'0') * 10 + (h2 - b'0') <= 23 && (m1 - b'0') * 10 + (m2 - b'0') <= 59
        }
        _ => false,
    }
}

/// Consistency rules the types cannot express: the embedded config is a valid one, every number is within the
/// limits the runner keeps, and the numbers of a cell do not contradict each other.
fn check(b: &Bundle) -> Result<(), BundleError> {
    let inconsistent = |s: String| Err(BundleError::Inconsistent(s));
    // The config a bundle embeds must be one the runner accepts (its limits bound what the runner's readers
    // allocate: `report`'s bootstrap, `merge`). The explorer only draws the numbers and leaves this out of its
    // wasm (the config validator's messages are about 8 KB gzipped); every number below it checks as well.
    #[cfg(not(target_arch = "wasm32"))]
    if let Err(e) = b.provenance.config.validate("provenance.config") {
        return inconsistent(format!("{e}"));
    }
    // Times are RFC 3339 (readers sort and compare them: `merge` keeps the earliest, `serve` lists the newest first).
    let times = std::iter::once(("provenance.created_at".to_string(), &b.provenance.created_at)).chain(
        b.provenance
            .executions
            .iter()
            .enumerate()
            .map(|(i, e)| (format!("provenance.executions[{i}].started_at"), &e.started_at)),
    );
    for (field, t) in times {
        if !is_rfc3339(t) {
            return inconsistent(format!(
                "{field} is {t:?}, not an RFC 3339 date-time; fix: write it as e.g. \"2025-01-31T12:00:00Z\" (UTC)"
            ));
        }
    }
    let prompts = b.prompt_set.count;
    if prompts > crate::grid::limits::PROMPTS {
        return inconsistent(format!(
            "prompt_set.count is {prompts}, more than the limit {}",
            crate::grid::limits::PROMPTS
        ));
    }
    if let Some(q) = &b.provenance.config.quality {
        let draws = u64::from(q.bootstrap_resamples) * u64::from(prompts);
        if draws > crate::grid::limits::BOOTSTRAP_DRAWS {
            return inconsistent(format!(
                "quality.bootstrap_resamples {} x prompt_set.count {prompts} = {draws} bootstrap draws, more than the \
                 limit {}",
                q.bootstrap_resamples,
                crate::grid::limits::BOOTSTRAP_DRAWS
            ));
        }
    }
    let shards = std::iter::once(("provenance.shard".to_string(), b.provenance.shard)).chain(
        b.provenance.executions.iter().enumerate().map(|(i, e)| (format!("provenance.executions[{i}].shard"), e.shard)),
    );
    for (field, s) in shards {
        if let Some(s) = s
            && (s.count == 0 || s.index >= s.count || s.count > crate::grid::limits::SHARDS)
        {
            return inconsistent(format!("{field} is {}/{}: not a shard (0 <= index < count)", s.index, s.count));
        }
    }
    if let Some((i, m)) = b.models.iter().enumerate().find(|(_, m)| m.generation != m.kind.generation()) {
        return inconsistent(format!(
            "models[{i}].generation is {:?} but its kind {:?} generates {:?}; fix: set generation to {:?}",
            m.generation,
            m.kind.name(),
            m.kind.generation(),
            m.kind.generation()
        ));
    }
    // Every reader labels a bundle's numbers synthetic from `provenance.synthetic_weights`: a hand edit that clears
    // it beside a synthetic model would show random weights' numbers unlabelled.
    if !b.provenance.synthetic_weights
        && let Some((i, m)) = b.models.iter().enumerate().find(|(_, m)| m.synthetic)
    {
        return inconsistent(format!(
            "provenance.synthetic_weights is false but models[{i}] ({}) has `synthetic: true`: its numbers come from \
             random weights and every reader would show them unlabelled; fix: set provenance.synthetic_weights to \
             true (or models[{i}].synthetic to false if its weights are real)",
            m.id
        ));
    }
    let mut seen = std::collections::HashSet::with_capacity_and_hasher(b.cells.len(), KeyHasherBuild::default());
    for (i, e) in b.provenance.executions.iter().enumerate() {
        if let Some(p) = &e.device_peaks {
            let rate_ok = |v: f64| v.is_finite() && v > 0.0;
            if !(rate_ok(p.copy_bytes_per_s) && rate_ok(p.matmul_flops_per_s))
                || p.copy_bytes == 0
                || p.matmul_size == 0
                || p.repetitions == 0
            {
                return inconsistent(format!(
                    "provenance.executions[{i}].device_peaks: rates must be finite and > 0 and the probe sizes and \
                     repetitions >= 1 (copy {} B/s over {} bytes, matmul {} FLOP/s at {}, {} repetitions)",
                    p.copy_bytes_per_s, p.copy_bytes, p.matmul_flops_per_s, p.matmul_size, p.repetitions
                ));
            }
        }
        if let Some(m) = &e.energy {
            let at = |what: &str| inconsistent(format!("provenance.executions[{i}].energy: {what}"));
            if m.source.is_some() == m.unavailable.is_some() {
                return at(
                    "names either the counter read (`source`) or why there was none (`unavailable`), one of them",
                );
            }
            for (field, v) in [("idle_energy_j", m.idle_energy_j), ("idle_window_ms", m.idle_window_ms)] {
                if let Some(v) = v.filter(|v| !(v.is_finite() && *v >= 0.0)) {
                    return at(&format!("{field} is {}: it must be finite and >= 0", number_text(v)));
                }
            }
            if m.idle_energy_j.is_some() != m.idle_window_ms.is_some()
                || (m.idle_energy_j.is_some() && m.source.is_none())
            {
                return at("idle_energy_j and idle_window_ms come together, and only with the counter that read them \
                           (`source`)");
            }
        }
    }
    for (i, cell) in b.cells.iter().enumerate() {
        if let Some(q) = cell.quality.iter().find(|q| !q.value.is_finite()) {
            return Err(BundleError::Inconsistent(format!(
                "cells[{i}].quality: {} is {}: quality values must be finite (leave a metric out when it was \
                 not measured)",
                q.metric, q.value
            )));
        }
        let Some(model) = b.model(&cell.key.model) else {
            return Err(BundleError::Inconsistent(format!(
                "cells[{i}] refers to model {:?}, which is not in `models`",
                cell.key.model
            )));
        };
        if model.kind != cell.key.sampler.kind() {
            return Err(BundleError::Inconsistent(format!(
                "cells[{i}] runs sampler {} on {} model {}: key.sampler must be a sampler of that kind of model",
                cell.key.sampler.name(),
                model.generation,
                model.id
            )));
        }
        if !seen.insert(&cell.key) {
            return Err(BundleError::Inconsistent(format!(
                "cells[{i}] repeats the key of an earlier cell ({})",
                cell.key
            )));
        }
        if let Some(e) = cell.execution
            && e as usize >= b.provenance.executions.len()
        {
            return Err(BundleError::Inconsistent(format!(
                "cells[{i}].execution is {e}, but provenance.executions has {} entries",
                b.provenance.executions.len()
            )));
        }
        if cell.status == CellStatus::Ok && cell.repetitions.is_empty() {
            return Err(BundleError::Inconsistent(format!("cells[{i}] is `ok` but has no repetitions")));
        }
        let k = &cell.key;
        if k.prompt_tokens.checked_add(k.output_tokens) != Some(k.seq_len) || k.output_tokens == 0 {
            return inconsistent(format!(
                "cells[{i}].key: prompt_tokens {} + output_tokens {} is not seq_len {} (or no output tokens)",
                k.prompt_tokens, k.output_tokens, k.seq_len
            ));
        }
        if k.batch_size == 0 {
            return inconsistent(format!("cells[{i}].key.batch_size is 0"));
        }
        let diffusion = model.kind.generation() == "diffusion";
        if diffusion != (k.steps.is_some() || k.threshold.is_some()) || diffusion != k.block_length.is_some() {
            return inconsistent(format!(
                "cells[{i}].key: steps (or threshold) and block_length are set for diffusion cells and only for them"
            ));
        }
        if k.steps.is_some() && k.threshold.is_some() {
            return inconsistent(format!(
                "cells[{i}].key: both steps and threshold are set: a threshold series' steps are measured, not set"
            ));
        }
        if !diffusion && k.cache.is_some() {
            return inconsistent(format!("cells[{i}].key: a block cache is set on an autoregressive cell"));
        }
        if model.kind == crate::grid::ModelKind::Dream
            && (k.steps.is_none() || k.cache.is_some() || k.block_length != Some(k.output_tokens))
        {
            return inconsistent(format!(
                "cells[{i}].key: a Dream cell has steps, no block cache or threshold, and one block of all its \
                 output tokens"
            ));
        }
        if let Some(t) = k.threshold.filter(|t| !(t.value().is_finite() && t.value() >= 0.0)) {
            return inconsistent(format!("cells[{i}].key.threshold is {t}: it must be a finite number >= 0"));
        }
        // The energy counter of the execution that measured the cell (its index was checked above).
        let meter = cell.execution.and_then(|e| b.provenance.executions[e as usize].energy.as_ref().map(|m| (e, m)));
        for (j, r) in cell.repetitions.iter().enumerate() {
            let at = |what: String| inconsistent(format!("cells[{i}].repetitions[{j}]: {what}"));
            // Fields where 0 cannot be a measurement: a process always has resident memory, a KV cache is written
            // only where there is one (absent without: a LLaDA run without a block cache), and every forward reads
            // weights. Not measured is absent, never 0.
            for (field, v, why) in [
                ("peak_rss_bytes", r.peak_rss_bytes, "a process's resident set is never 0 bytes"),
                ("peak_allocated_bytes", r.peak_allocated_bytes, "a run's device memory holds at least the weights"),
                ("peak_reserved_bytes", r.peak_reserved_bytes, "a run's device memory holds at least the weights"),
                ("flop_count", r.flop_count, "every forward pass computes"),
                ("kv_cache_bytes", r.kv_cache_bytes, "a run without a KV cache has no kv_cache_bytes at all"),
                ("weights_read_bytes", r.weights_read_bytes, "every forward pass reads the model's weights"),
            ] {
                if v == Some(0) {
                    return inconsistent(format!(
                        "cells[{i}].repetitions[{j}].{field} is 0 ({}): {why}; fix: remove the field (a value not \
                         measured is absent, never 0)",
                        cell.key
                    ));
                }
            }
            if let (Some(e_j), Some((e, m))) = (r.energy_j, meter)
                && m.source.is_none()
            {
                return inconsistent(format!(
                    "cells[{i}].repetitions[{j}].energy_j is {e_j} but provenance.executions[{e}].energy says energy \
                     was unavailable ({}); fix: remove energy_j (and energy_window_ms), or record the counter that \
                     measured it in provenance.executions[{e}].energy.source",
                    m.unavailable.as_deref().unwrap_or("no counter")
                ));
            }
            // Every read of every bundle passes here (the explorer's too): the field is named only once one is bad.
            let bad = |t: &f64| !(t.is_finite() && *t >= 0.0);
            let named =
                [("e2e_ms", Some(r.e2e_ms)), ("prefill_ms", r.prefill_ms), ("first_block_ms", r.first_block_ms)];
            if let Some((field, t)) = named.into_iter().find_map(|(f, t)| t.filter(bad).map(|t| (f.to_string(), t))) {
                return at(format!("{field} is {} ms: times must be finite and >= 0", number_text(t)));
            }
            if let Some((k, &t)) = r.step_ms.iter().flatten().enumerate().find(|(_, t)| bad(t)) {
                return at(format!("step_ms[{k}] is {} ms: times must be finite and >= 0", number_text(t)));
            }
            for (name, part) in [("prefill_ms", r.prefill_ms), ("first_block_ms", r.first_block_ms)] {
                if let Some(p) = part.filter(|&p| p > r.e2e_ms) {
                    return at(format!(
                        "{name} {p} is more than e2e_ms {}: a part of a run cannot outlast it",
                        r.e2e_ms
                    ));
                }
            }
            if let Some(e) = r.energy_j.filter(|e| !(e.is_finite() && *e >= 0.0)) {
                return at(format!(
                    "energy_j is {}: energy must be finite and >= 0 (absent when not measured)",
                    number_text(e)
                ));
            }
            if let Some(w) = r.energy_window_ms.filter(|w| !(w.is_finite() && *w >= 0.0)) {
                return at(format!("energy_window_ms is {}: a window must be finite and >= 0", number_text(w)));
            }
            if r.energy_j.is_some() != r.energy_window_ms.is_some() {
                return at("energy_j and energy_window_ms come together (the joules and the window they cover): \
                           remove the one left, or both"
                    .into());
            }
            if r.forward_passes == Some(0) {
                return at("forward_passes is 0: every run evaluates the network at least once".into());
            }
            // A diffusion step is one forward (two with classifier-free guidance), and a K-driven sampler runs at
            // most K steps (fewer where a cached block ends when full).
            if let (false, Some(f), Some(steps)) =
                (k.sampler == crate::bundle::Sampler::ArGreedy, r.forward_passes, r.step_ms.as_ref())
            {
                let n = steps.len() as u64;
                if u64::from(f) < n || u64::from(f) > 2 * n {
                    return at(format!(
                        "forward_passes {f} but step_ms has {n} steps: a diffusion step is one forward (two with \
                         classifier-free guidance)"
                    ));
                }
                if let Some(kk) = k.steps.filter(|&kk| n > u64::from(kk)) {
                    return at(format!("step_ms has {n} steps, more than the cell's K = {kk}"));
                }
            }
            if let Some(c) = &r.committed_per_step {
                let total: u64 = c.iter().map(|&n| u64::from(n)).sum();
                // Equal (an older runner's larger count was read as this sum: `recount_valid_tokens`), never more.
                if total > r.output_tokens {
                    return at(format!(
                        "committed_per_step sums to {total} tokens, more than output_tokens {}: each position is \
                         committed once",
                        r.output_tokens
                    ));
                }
                if let Some(s) = r.step_ms.as_ref().filter(|s| s.len() != c.len()) {
                    return at(format!(
                        "committed_per_step has {} steps but step_ms has {}: one entry per step each",
                        c.len(),
                        s.len()
                    ));
                }
            }
            if let Some(&p) = r.prompt_indices.iter().find(|&&p| p >= prompts) {
                return at(format!("prompt index {p} is outside the prompt set of {prompts} prompts"));
            }
            // A run generates at most B x N_out tokens; an AR run at least two per row where N_out has two (the
            // inter-token latency is derived from the key's N_out, which a run of fewer tokens contradicts), a
            // diffusion run possibly none (a position left masked generated no token).
            let (b, n_out) = (u64::from(k.batch_size), u64::from(k.output_tokens));
            let least = if k.sampler == crate::bundle::Sampler::ArGreedy { b * n_out.min(2) } else { 0 };
            if r.output_tokens > b * n_out || r.output_tokens < least {
                return at(format!(
                    "output_tokens {} is not between {least} and batch_size x output_tokens = {} of the cell's key",
                    r.output_tokens,
                    b * n_out
                ));
            }
            if let Some((a, res)) = r.peak_allocated_bytes.zip(r.peak_reserved_bytes).filter(|(a, res)| a > res) {
                return at(format!(
                    "peak_allocated_bytes {a} is more than peak_reserved_bytes {res}: the pool holds what is allocated"
                ));
            }
        }
        if let Some(g) = cell.generations.iter().find(|g| g.prompt >= prompts) {
            return inconsistent(format!(
                "cells[{i}].generations: prompt {} is outside the prompt set of {prompts} prompts",
                g.prompt
            ));
        }
        for q in &cell.quality {
            if let Some(p) = q.per_prompt.iter().find(|p| p.prompt >= prompts || !p.value.is_finite()) {
                return inconsistent(format!(
                    "cells[{i}].quality {}: per-prompt value {} of prompt {} (outside the set of {prompts}, or not \
                     finite)",
                    q.label(),
                    p.value,
                    p.prompt
                ));
            }
        }
        if let Some(p) = cell.stalled_prompts.iter().find(|&&p| p >= prompts) {
            return inconsistent(format!(
                "cells[{i}].stalled_prompts names prompt {p}, outside the set of {prompts} (prompt_set.count)"
            ));
        }
        // The runner's readers (validate, report, merge) refuse impossible values; the explorer leaves these checks
        // out of its wasm (it draws what the bundle holds; its download budget is tight).
        #[cfg(not(target_arch = "wasm32"))]
        for (j, q) in cell.quality.iter().enumerate() {
            check_quality(i, j, cell, q)?;
        }
        #[cfg(not(target_arch = "wasm32"))]
        check_against_config(b, i, cell)?;
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        if let Some(j) = (1..b.models.len()).find(|&j| b.models[..j].iter().any(|m| m.id == b.models[j].id)) {
            return inconsistent(format!("models[{j}]: {} is listed twice", b.models[j].id));
        }
        if let Some(p) = b.provenance.planned_cells.filter(|&p| (p as usize) < b.cells.len()) {
            return inconsistent(format!(
                "provenance.planned_cells is {p}, fewer than the {} cells the bundle holds",
                b.cells.len()
            ));
        }
        let mut missing = std::collections::HashSet::with_capacity_and_hasher(
            b.provenance.missing_cells.len(),
            KeyHasherBuild::default(),
        );
        for (j, k) in b.provenance.missing_cells.iter().enumerate() {
            if seen.contains(k) {
                return inconsistent(format!("provenance.missing_cells[{j}] ({k}) is a cell the bundle holds"));
            }
            if !missing.insert(k) {
                return inconsistent(format!("provenance.missing_cells[{j}] ({k}) is listed twice"));
            }
        }
    }
    Ok(())
}

/// A cell against the config its bundle embeds (native readers only, as [`check_quality`]): its N, B, K,
/// threshold and LLaDA block length are the grid's, it has at most the config's repetitions and warm-ups, each repetition's prompts are B when recorded,
/// and its step times fit in its end-to-end time.
#[cfg(not(target_arch = "wasm32"))]
fn check_against_config(b: &Bundle, i: usize, cell: &crate::Cell) -> Result<(), BundleError> {
    let inconsistent = |s: String| Err(BundleError::Inconsistent(s));
    let (cfg, k) = (&b.provenance.config, &cell.key);
    if !cfg.grid.seq_lengths.contains(&k.seq_len) || !cfg.grid.batch_sizes.contains(&k.batch_size) {
        return inconsistent(format!(
            "cells[{i}] is at N = {}, B = {}, which provenance.config's grid (seq_lengths {:?}, batch_sizes {:?}) does \
             not have",
            k.seq_len, k.batch_size, cfg.grid.seq_lengths, cfg.grid.batch_sizes
        ));
    }
    // Its K, its threshold and a LLaDA cell's block length are the grid's too; a parity search adds K values
    // below the grid's largest (between an S_parity and the K below it, or 0).
    let searched = cfg.quality.as_ref().is_some_and(|q| q.parity_search);
    let top = cfg.grid.steps.iter().copied().max().unwrap_or(0);
    let in_grid = |s: &u32| cfg.grid.steps.contains(s) || (searched && *s <= top);
    if let Some(s) = k.steps.filter(|s| !in_grid(s)) {
        return inconsistent(format!(
            "cells[{i}] is at K = {s}, which provenance.config's grid (steps {:?}{}) does not have",
            cfg.grid.steps,
            if searched { ", and a parity search's K below the largest of them" } else { "" }
        ));
    }
    if let Some(t) = k.threshold.filter(|t| !cfg.grid.thresholds.contains(&t.0)) {
        return inconsistent(format!(
            "cells[{i}] is at threshold {}, which provenance.config's grid (thresholds {:?}) does not have",
            t.0, cfg.grid.thresholds
        ));
    }
    let block = cfg.grid.block_length.unwrap_or(k.output_tokens);
    if let Some(b) = k.block_length.filter(|&b| k.sampler.kind() == crate::grid::ModelKind::Llada && b != block) {
        return inconsistent(format!(
            "cells[{i}] has block_length {b}, where provenance.config's grid gives {block} ({})",
            match cfg.grid.block_length {
                Some(_) => "its block_length".to_string(),
                None => format!("no block_length: the cell's whole output, output_tokens {}", k.output_tokens),
            }
        ));
    }
    if cell.repetitions.len() > cfg.run.repetitions as usize || cell.warmup_runs > cfg.run.warmup {
        return inconsistent(format!(
            "cells[{i}] has {} repetitions and {} warm-ups, more than provenance.config's {} and {}",
            cell.repetitions.len(),
            cell.warmup_runs,
            cfg.run.repetitions,
            cfg.run.warmup
        ));
    }
    for (j, r) in cell.repetitions.iter().enumerate() {
        if !r.prompt_indices.is_empty() && r.prompt_indices.len() != k.batch_size as usize {
            return inconsistent(format!(
                "cells[{i}].repetitions[{j}] has {} prompt indices for B = {}",
                r.prompt_indices.len(),
                k.batch_size
            ));
        }
        let steps: f64 = r.step_ms.iter().flatten().sum();
        if steps > r.e2e_ms * (1.0 + 1e-6) + 1e-3 {
            return inconsistent(format!(
                "cells[{i}].repetitions[{j}]: its step times add up to {steps} ms, more than its e2e_ms {}: the steps \
                 are parts of the run",
                r.e2e_ms
            ));
        }
    }
    Ok(())
}

/// The quality rules of [`check`] the explorer's wasm leaves out: a metric listed once per evaluator, the runner's
/// metrics within their ranges, a pooled value within its prompts' values.
#[cfg(not(target_arch = "wasm32"))]
fn check_quality(i: usize, j: usize, cell: &crate::Cell, q: &crate::bundle::QualityValue) -> Result<(), BundleError> {
    let inconsistent = |s: String| Err(BundleError::Inconsistent(s));
    if cell.quality[..j].iter().any(|o| o.metric == q.metric && o.evaluator == q.evaluator) {
        return inconsistent(format!("cells[{i}].quality: {} is listed twice", q.label()));
    }
    // The metrics the runner computes have a range; other names (a newer writer's) are not checked.
    let range = match q.metric.as_str() {
        "perplexity" => Some((1.0, f64::INFINITY, "at least 1 (the exponential of a mean negative log-likelihood)")),
        "unigram_entropy" => Some((0.0, f64::INFINITY, "at least 0")),
        "distinct_1" | "distinct_2" | "token_f1" | "rouge_l_f1" => Some((0.0, 1.0, "between 0 and 1")),
        _ => None,
    };
    let values = std::iter::once(q.value).chain(q.per_prompt.iter().map(|p| p.value));
    if let Some((lo, hi, what)) = range
        && let Some(v) = values.into_iter().find(|v| !(lo - 1e-9..=hi + 1e-9).contains(v))
    {
        return inconsistent(format!("cells[{i}].quality {}: {v} is not a possible value: it is {what}", q.label()));
    }
    // Pooled (a mean, or the token-weighted perplexity), the value lies within its prompts' values.
    let (min, max) =
        q.per_prompt.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| (a.min(p.value), b.max(p.value)));
    let slack = 1e-9 * q.value.abs().max(1.0);
    if !q.per_prompt.is_empty() && !(min - slack..=max + slack).contains(&q.value) {
        return inconsistent(format!(
            "cells[{i}].quality {}: the value {} is outside its per-prompt values' range {min}..{max}: a \
             pooled value lies within them",
            q.label(),
            q.value
        ));
    }
    Ok(())
}

/// A cheap hasher for the duplicate-key check (FxHash's multiply-rotate; the default SipHash was a tenth of the
/// time to read a 10,000-cell bundle). Keys come from the file being read, so flooding resistance buys nothing.
#[derive(Default)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.write_u64(u64::from_le_bytes(c.try_into().unwrap_or_default()));
        }
        for &b in chunks.remainder() {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type KeyHasherBuild = std::hash::BuildHasherDefault<KeyHasher>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_version_only_takes_a_plain_first_member() {
        assert_eq!(leading_version(" {\n  \"schema_version\" : \"1.2\", \"x\": 1}"), Some("1.2"));
        assert_eq!(leading_version("{\"provenance\": {}, \"schema_version\": \"1.2\"}"), None);
        assert_eq!(leading_version("{\"schema_version\": \"1\\u002e2\"}"), None);
        assert_eq!(leading_version("{\"schema_version\": 1.2}"), None);
    }

    #[test]
    fn json_paths_from_offsets() {
        let t = r#"{"a": [1, {"b": "x"}], "c": {"d": 2}}"#;
        let at = |s: &str| t.find(s).expect("in text") + s.len();
        assert_eq!(json_path_at(t, at("\"x\"")), "a[1].b");
        assert_eq!(json_path_at(t, at("\"d\": 2")), "c.d");
        assert_eq!(json_path_at(t, at("2}")), "c");
    }

    #[test]
    fn syntax_errors_after_a_leading_version_are_not_json() {
        let e = read_bundle("{\"schema_version\": \"1.2\", \"provenance\": ").expect_err("refused");
        assert!(matches!(e, BundleError::NotJson { .. }), "{e:?}");
    }
}
