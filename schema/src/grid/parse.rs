//! Reading a config from TOML (strict: an unknown field is an error) and writing the resolved config back.

use super::{ConfigError, GridConfig};

impl GridConfig {
    /// Parses and validates a TOML config. `file` names it in errors.
    ///
    /// A hand-written config is strict: a field this version does not know is a typo, and an error. (The config
    /// embedded in a bundle is read leniently instead, as provenance: a bundle of a newer minor version may carry
    /// fields this build does not know, and the minor-version promise is that it still reads.)
    pub fn from_toml(text: &str, file: &str) -> Result<GridConfig, ConfigError> {
        let parse_err = |e: toml::de::Error| ConfigError::Parse {
            file: file.to_string(),
            // `[models]` for `[[models]]` fails wherever toml or serde notices it (often at the later, correct
            // table): named at the table that is wrong.
            message: table_for_array(text).unwrap_or_else(|| parse_message(text, &e)),
        };
        let mut unknown = Vec::new();
        let de = toml::Deserializer::parse(text).map_err(parse_err)?;
        let parsed: Result<GridConfig, _> = serde_ignored::deserialize(de, |path| unknown.push(field_path(&path)));
        // An unknown field is reported first: a typo (`warmpu`) also makes its field missing.
        if let Some(path) = unknown.first() {
            let key = path.rsplit('.').next().unwrap_or(path);
            let line = text
                .lines()
                .position(|l| l.trim_start().trim_start_matches('"').starts_with(key))
                .map_or(String::new(), |i| format!("line {}: ", i + 1));
            return Err(ConfigError::Parse {
                file: file.to_string(),
                message: format!("{line}unknown field `{path}` (a typo, or a field of a newer dllm-bench)"),
            });
        }
        let mut config = parsed.map_err(parse_err)?;
        config.validate(file)?;
        config.check_used(file)?;
        // A preset is recorded as the count it stands for, so that every reader sees the number.
        config.prompts.count = config.prompts.prompt_count();
        Ok(config)
    }

    /// The TOML text of this config (the resolved form, overrides applied).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# config not representable as TOML: {e}"))
    }
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

/// The first `[name]` table header where `name` is a list of tables (`[[models]]`, `[[quality.evaluators]]`, or
/// any name the text also writes as `[[name]]`), as an error message naming its line; `None` when there is none.
fn table_for_array(text: &str) -> Option<String> {
    const ARRAYS: [&str; 2] = ["models", "quality.evaluators"];
    let header = |line: &str| line.split('#').next().unwrap_or("").trim().to_string();
    let headers: Vec<String> = text.lines().map(header).collect();
    headers.iter().enumerate().find_map(|(i, h)| {
        let name = h.strip_prefix('[')?.strip_suffix(']')?.trim();
        if name.starts_with('[') {
            return None;
        }
        let listed = ARRAYS.contains(&name) || headers.iter().any(|g| *g == format!("[[{name}]]"));
        listed.then(|| {
            format!(
                "line {}: `[{name}]` is one table, but `{name}` is a list of tables; fix: write `[[{name}]]` (two \
                 brackets) before each entry",
                i + 1
            )
        })
    })
}

/// A toml error as one line with its position.
fn parse_message(text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim().to_string();
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            let snippet = text.lines().nth(line - 1).unwrap_or("").trim();
            format!("line {line}, column {col}: {msg} (at `{snippet}`)")
        }
        None => msg,
    }
}
