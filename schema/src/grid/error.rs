//! The error of a config that cannot be used.

/// A config that cannot be used, with the file, the field and the fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// Not TOML, or a field of the wrong type, unknown, or missing.
    #[error("{file}: {message}\n  fix: {fix}")]
    Parse {
        /// The file (or `--flag` / `embedded:NAME`).
        file: String,
        /// The parser's message, with line, column and key.
        message: String,
        /// What to do: for most slips, [`ConfigError::COMPARE`].
        fix: String,
    },
    /// Parsed, but a value is not allowed.
    #[error("{file}: field `{field}`: {problem}\n  fix: {fix}")]
    Invalid {
        /// The file (or `--flag` / `embedded:NAME`).
        file: String,
        /// Dotted path of the field, e.g. `grid.steps`.
        field: String,
        /// What is wrong, with the value.
        problem: String,
        /// What to do.
        fix: String,
    },
}

impl ConfigError {
    /// The fix of a parse error with no more specific one.
    pub const COMPARE: &str = "compare with config/experiments.toml, which documents every field";
}
