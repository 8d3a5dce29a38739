//! Chat templates of Instruct checkpoints (`[prompts] chat_template = true`): read from the checkpoint's
//! `tokenizer_config.json`, rendered with minijinja (a Jinja2 implementation: the templates are Jinja, written for
//! transformers' `apply_chat_template`), and turned into the tokens that wrap every prompt.
//!
//! A prompt becomes one user message (`messages = [{"role": "user", "content": PROMPT}]`) followed by the
//! generation prompt (`add_generation_prompt = true`), with `bos_token` and `eos_token` from the same file and
//! transformers' `raise_exception`. The environment is set up as transformers sets up its own (`trim_blocks`,
//! `lstrip_blocks`, loop controls), so a template renders to the same text.
//!
//! The template is rendered once per model with a placeholder as the message content and split there: the text
//! before and after it are tokenized with the model's tokenizer (special token strings such as `<|eot_id|>` map to
//! their ids), and each prompt row is the tokens before, the first tokens of the prompt text, and the tokens after
//! ([`ChatFrame::wrap`]). The prompt is cut in tokens, as without a template, so a row is exactly the cell's
//! `prompt_tokens` long; rendering the cut text and tokenizing the whole gives the same ids (the tests check it on
//! the synthetic tokenizers) except where the template edits the content itself (Llama-3's `| trim` drops
//! whitespace that ends a cut) or a token would merge across the boundary. A rendered template that begins with
//! the BOS token is not given a second one; one that does not begin with it gets it prepended, as every prompt
//! without a template starts with BOS.
//!
//! Where a prompt's text ends and how the template's tokens count in N is the sweep's business
//! (`sweep::tokens`).

use std::path::{Path, PathBuf};

use minijinja::{Environment, Error as JinjaError, ErrorKind, context};
use sha2::{Digest, Sha256};

use super::ModelError;

/// What stands for the message content while the frame is rendered: private-use characters no template edits
/// (trimming, escaping) and no prompt contains.
const PLACEHOLDER: &str = "\u{E000}dllm-bench-prompt\u{E001}";

/// How the recorded rendering (`rendered` in the bundle) shows where the prompt goes.
pub const PROMPT_SLOT: &str = "{prompt}";

/// The fix of a model without a chat template.
const NO_TEMPLATE_FIX: &str = "use the model's Instruct checkpoint (a base model has no chat template), add a \
                               `chat_template` to its tokenizer_config.json, or set `chat_template = false` in \
                               the config's [prompts]";

/// A checkpoint's chat template as read from its `tokenizer_config.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatTemplate {
    /// The Jinja source.
    pub text: String,
    /// Where it was read: `tokenizer_config.json chat_template` or `... chat_template["default"]`.
    pub origin: String,
    /// The `tokenizer_config.json` it came from.
    pub path: PathBuf,
    /// `bos_token` of the file (a string, or an object with `content`); empty when absent.
    pub bos_token: String,
    /// `eos_token` of the file; empty when absent.
    pub eos_token: String,
}

impl ChatTemplate {
    /// Reads the template of the snapshot at `snapshot`: `chat_template` as a string, or the list form
    /// `[{"name": ..., "template": ...}]`, whose entry named `default` is used. A missing file or template is an
    /// error that says how to fix it.
    pub fn read(snapshot: &Path) -> Result<Self, ModelError> {
        let path = snapshot.join("tokenizer_config.json");
        if !path.is_file() {
            return Err(ModelError::MissingFile {
                path,
                fix: format!("{NO_TEMPLATE_FIX} (the chat template is read from this file)"),
            });
        }
        let text = std::fs::read_to_string(&path).map_err(|error| ModelError::Io { path: path.clone(), error })?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|error| ModelError::Json { path: path.clone(), error })?;
        Self::from_json(&json, &path)
    }

    /// The template of a parsed `tokenizer_config.json` (`path` is for messages).
    pub fn from_json(json: &serde_json::Value, path: &Path) -> Result<Self, ModelError> {
        let bad = |message: String| ModelError::ChatTemplate { path: path.to_path_buf(), message };
        let (text, origin) = match json.get("chat_template") {
            None | Some(serde_json::Value::Null) => {
                return Err(ModelError::MissingField {
                    path: path.to_path_buf(),
                    field: "chat_template".into(),
                    fix: NO_TEMPLATE_FIX.into(),
                });
            }
            Some(serde_json::Value::String(t)) => (t.clone(), "tokenizer_config.json chat_template".to_string()),
            Some(serde_json::Value::Array(list)) => {
                let named = |e: &serde_json::Value| e.get("name").and_then(|n| n.as_str()) == Some("default");
                let names: Vec<&str> = list.iter().filter_map(|e| e.get("name").and_then(|n| n.as_str())).collect();
                let entry = list.iter().find(|e| named(e)).ok_or_else(|| {
                    bad(format!(
                        "the chat_template list has no template named \"default\" (it has {names:?}); fix: name the \
                         one to use \"default\""
                    ))
                })?;
                let t = entry.get("template").and_then(|t| t.as_str()).ok_or_else(|| {
                    bad("the chat_template named \"default\" has no string `template`; fix: use the model's own \
                         tokenizer_config.json"
                        .into())
                })?;
                (t.to_string(), "tokenizer_config.json chat_template[\"default\"]".to_string())
            }
            Some(other) => {
                return Err(bad(format!(
                    "chat_template is neither a string nor a list of {{name, template}} but {other}; fix: use the \
                     model's own tokenizer_config.json"
                )));
            }
        };
        let token = |field: &str| {
            json.get(field)
                .and_then(|v| v.as_str().or_else(|| v.get("content").and_then(|c| c.as_str())))
                .unwrap_or_default()
                .to_string()
        };
        Ok(Self {
            text,
            origin,
            path: path.to_path_buf(),
            bos_token: token("bos_token"),
            eos_token: token("eos_token"),
        })
    }

    /// SHA-256 (hex) of the template's text.
    pub fn sha256(&self) -> String {
        Sha256::digest(self.text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The template rendered for one user message with this `content`, and the generation prompt.
    pub fn render(&self, content: &str) -> Result<String, ModelError> {
        let mut env = Environment::new();
        // transformers renders with trim_blocks and lstrip_blocks, and the loop controls extension.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.add_function("raise_exception", |message: String| -> Result<String, JinjaError> {
            Err(JinjaError::new(ErrorKind::InvalidOperation, message))
        });
        let bad = |e: JinjaError| ModelError::ChatTemplate {
            path: self.path.clone(),
            message: format!(
                "{}: {e:#}; fix: use the model's own tokenizer_config.json (a template that calls Python methods \
                 such as .strip() cannot be rendered), or set `chat_template = false` in the config's [prompts]",
                self.origin
            ),
        };
        let template = env.template_from_named_str("chat_template", &self.text).map_err(bad)?;
        template
            .render(context! {
                messages => vec![context! { role => "user", content => content }],
                add_generation_prompt => true,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
            })
            .map_err(bad)
    }

    /// The tokens around every prompt: the template rendered around a placeholder, split there, each side
    /// tokenized (special tokens recognised). BOS is prepended unless the rendering starts with it.
    pub fn frame(&self, tokenizer: &tokenizers::Tokenizer, bos: u32) -> Result<ChatFrame, ModelError> {
        let rendered = self.render(PLACEHOLDER)?;
        let mut parts = rendered.split(PLACEHOLDER);
        let (Some(before), Some(after), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(ModelError::ChatTemplate {
                path: self.path.clone(),
                message: format!(
                    "{}: the rendered template does not hold the message content exactly once, as written; fix: \
                     use a template that places the user message's content verbatim, or set `chat_template = \
                     false` in the config's [prompts]",
                    self.origin
                ),
            });
        };
        let encode = |text: &str| {
            tokenizer.encode(text, false).map(|e| e.get_ids().to_vec()).map_err(|e| ModelError::Tokenizer {
                path: self.path.clone(),
                message: format!("tokenizing the rendered chat template: {e}"),
            })
        };
        let mut before_ids = encode(before)?;
        if !self.bos_token.is_empty() && before.starts_with(&self.bos_token) && before_ids.first() != Some(&bos) {
            return Err(ModelError::ChatTemplate {
                path: self.path.clone(),
                message: format!(
                    "the rendering begins with bos_token {:?}, which the tokenizer does not map to the BOS id {bos}; \
                     fix: use the model's own tokenizer files",
                    self.bos_token
                ),
            });
        }
        if before_ids.first() != Some(&bos) {
            before_ids.insert(0, bos);
        }
        Ok(ChatFrame {
            before: before_ids,
            after: encode(after)?,
            rendered: rendered.replace(PLACEHOLDER, PROMPT_SLOT),
        })
    }
}

/// The tokens a chat template puts around every prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatFrame {
    /// BOS, then the template's tokens before the message content.
    pub before: Vec<u32>,
    /// The template's tokens after the content, the generation prompt included.
    pub after: Vec<u32>,
    /// The rendering with [`PROMPT_SLOT`] where the content goes.
    pub rendered: String,
}

impl ChatFrame {
    /// Tokens of the template in every prompt row (BOS included).
    pub fn len(&self) -> usize {
        self.before.len() + self.after.len()
    }

    /// Whether the template adds no token at all (never: BOS is always there).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A prompt row: the tokens before, `content` (the prompt text's first tokens), the tokens after.
    pub fn wrap(&self, content: &[u32]) -> Vec<u32> {
        let mut row = Vec::with_capacity(self.len() + content.len());
        row.extend_from_slice(&self.before);
        row.extend_from_slice(content);
        row.extend_from_slice(&self.after);
        row
    }
}
