//! Reading and writing bundles: version dispatch, upgrades of older formats, and consistency checks.
//!
//! Older formats are upgraded as JSON, one version step at a time, before the typed parse, so each step is
//! a small documented transformation and the typed model only knows the current format.

use serde_json::Value;

use crate::bundle::{Bundle, CellStatus};
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
    /// JSON, but not an object with `schema_version`.
    #[error("not a dllm-bench bundle: {0}")]
    NotABundle(String),
    /// Written by a newer, incompatible major version of the format.
    #[error(
        "this bundle uses schema version {found}, but this build of dllm-bench reads versions up to {supported}: \
         upgrade dllm-bench (or the explorer) to a release that reads schema {}.x",
        found.major
    )]
    NewerVersion {
        /// Version found in the file.
        found: VersionNumber,
        /// Newest version this build reads.
        supported: SchemaVersion,
    },
    /// A field is missing or has the wrong type.
    #[error("invalid bundle (schema {version}): field `{path}`: {message}")]
    Invalid {
        /// Version the file declared.
        version: VersionNumber,
        /// Path of the field, e.g. `cells[3].key.batch_size`.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Well-typed but self-contradictory.
    #[error("inconsistent bundle: {0}")]
    Inconsistent(String),
}

/// A bundle as read, with what the reader had to do.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadBundle {
    /// The bundle, in the current format.
    pub bundle: Bundle,
    /// The version written in the file.
    pub file_version: VersionNumber,
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
    // First pass: only `schema_version` (everything else is skipped without allocating).
    #[derive(serde::Deserialize)]
    struct Header {
        #[serde(default)]
        schema_version: Option<Value>,
    }
    if !json.trim_start().starts_with('{') {
        return Err(match serde_json::from_str::<serde::de::IgnoredAny>(json) {
            Ok(_) => BundleError::NotABundle("the top level is not a JSON object".into()),
            Err(e) => not_json(&e),
        });
    }
    let header: Header = serde_json::from_str(json).map_err(|e| not_json(&e))?;
    let raw = match header.schema_version {
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
        let mut value: Value = serde_json::from_str(json).map_err(|e| not_json(&e))?;
        let mut at = version;
        while at != SchemaVersion::CURRENT {
            at = upgrade_step(at, &mut value).map_err(|(path, message)| invalid(path, message))?;
        }
        upgraded = value.to_string();
        upgraded.as_str()
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let bundle: Bundle =
        serde_path_to_error::deserialize(&mut de).map_err(|e| invalid(e.path().to_string(), e.inner().to_string()))?;
    check(&bundle)?;
    Ok(ReadBundle { bundle, file_version })
}

fn not_json(e: &serde_json::Error) -> BundleError {
    BundleError::NotJson {
        message: e.to_string().split(" at line").next().unwrap_or_default().to_string(),
        line: e.line(),
        column: e.column(),
    }
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
            // `attention`; the prompt set gained `selection` and `sha256`.
            let root = value.as_object_mut().ok_or(("".to_string(), "not an object".to_string()))?;
            root.insert("schema_version".into(), Value::String("1.0".into()));
            if let Some(Value::Object(p)) = root.get_mut("provenance") {
                p.entry("attention").or_insert(Value::String("unrecorded (schema 0.1)".into()));
            }
            if let Some(Value::Object(p)) = root.get_mut("prompt_set") {
                p.entry("selection").or_insert(Value::String("unrecorded (schema 0.1)".into()));
                p.entry("sha256").or_insert(Value::String(String::new()));
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
        // 1.1 -> 1.2 likewise.
        SchemaVersion::V1_1 => Ok(SchemaVersion::V1_2),
        SchemaVersion::V1_2 => Ok(SchemaVersion::V1_2),
    }
}

/// Consistency rules the types cannot express.
fn check(b: &Bundle) -> Result<(), BundleError> {
    let mut seen = std::collections::HashSet::new();
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
                "cells[{i}] runs sampler {:?} on {} model {:?}",
                cell.key.sampler, model.generation, model.id
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
        for (j, r) in cell.repetitions.iter().enumerate() {
            let times = [Some(r.e2e_ms), r.prefill_ms, r.first_block_ms].into_iter().flatten();
            let steps = r.step_ms.iter().flatten().copied();
            if let Some(t) = times.chain(steps).find(|t| !(t.is_finite() && *t >= 0.0)) {
                return Err(BundleError::Inconsistent(format!(
                    "cells[{i}].repetitions[{j}] has a time of {t} ms: times must be finite and >= 0"
                )));
            }
        }
    }
    Ok(())
}
