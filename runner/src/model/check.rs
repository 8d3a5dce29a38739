//! Checks a checkpoint's tensors against its `config.json` before anything is loaded, so that a broken
//! checkpoint fails with the file and the tensor named instead of somewhere inside candle's loader.
//!
//! Reads only the safetensors headers (an 8-byte length and a JSON table of name -> dtype, shape, offsets), so
//! it costs milliseconds even for the 16 GB checkpoints. Checked: each file's table is what the safetensors crate
//! (which candle loads with) accepts: every tensor's bytes (`data_offsets`) hold exactly its shape x dtype size,
//! and the tensors tile the data after the header from 0 to the file's end with no gap or overlap; every tensor
//! the transformer needs is in the file the index names (or in one of the files), with the shape `config.json`
//! implies and a float dtype.

use std::collections::HashMap;
use std::io::{Read, Seek};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{ModelConfig, ModelError, ModelFiles, WeightNames};

/// Float dtypes candle converts from (safetensors names).
const FLOAT_DTYPES: [&str; 4] = ["F32", "BF16", "F16", "F64"];

/// Headers larger than this are refused (the 8B checkpoints' headers are well under 1 MB).
const MAX_HEADER: u64 = 100 << 20;

#[derive(Debug, Deserialize)]
struct Entry {
    dtype: String,
    shape: Vec<usize>,
    /// Start and end of the tensor's bytes after the header.
    #[serde(default)]
    data_offsets: Option<[u64; 2]>,
}

/// Bits per element of a safetensors dtype name (the safetensors crate's `Dtype::bitsize`); `None` for a name the
/// crate does not know.
fn dtype_bits(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "F4" => 4,
        "F6_E2M3" | "F6_E3M2" => 6,
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" | "F8_E4M3FNUZ" | "F8_E5M2FNUZ" => 8,
        "I16" | "U16" | "F16" | "BF16" => 16,
        "I32" | "U32" | "F32" => 32,
        "I64" | "U64" | "F64" | "C64" => 64,
        _ => return None,
    })
}

/// Whether `path` is a safetensors file whose header describes it as it is (what [`read_header`] checks).
pub(crate) fn safetensors_whole(path: &Path) -> bool {
    read_header(path, "").is_ok()
}

/// Tensor name -> (dtype, shape) of one safetensors file, from its header, after checking that the header's table
/// describes the file as the safetensors crate requires (see the module doc): otherwise candle refuses the file
/// only when the model loads, after other models' cells, naming neither the file nor the tensor. `again`: how the
/// checkpoint is made whole ([`ModelFiles::redo_fix`]).
fn read_header(path: &Path, again: &str) -> Result<HashMap<String, Entry>, ModelError> {
    let io = |error| ModelError::Io { path: path.to_path_buf(), error };
    let mut f = std::fs::File::open(path).map_err(io)?;
    let file_len = f.metadata().map_err(io)?.len();
    if file_len < 8 {
        return Err(ModelError::Corrupt {
            path: path.to_path_buf(),
            message: format!(
                "not a safetensors file: {file_len} bytes, less than its 8-byte header length; fix: the file is \
                 truncated or empty, {again}"
            ),
        });
    }
    let mut len = [0u8; 8];
    f.read_exact(&mut len).map_err(io)?;
    let len = u64::from_le_bytes(len);
    if len > MAX_HEADER || len + 8 > file_len {
        return Err(ModelError::Corrupt {
            path: path.to_path_buf(),
            message: format!(
                "not a safetensors file: its header length {len} does not fit the file ({file_len} bytes); fix: \
                 the file is truncated or not safetensors, {again}"
            ),
        });
    }
    let mut text = vec![0u8; len as usize];
    f.read_exact(&mut text).map_err(io)?;
    let value: serde_json::Value =
        serde_json::from_slice(&text).map_err(|error| ModelError::Json { path: path.to_path_buf(), error })?;
    let mut out = HashMap::new();
    if let serde_json::Value::Object(map) = value {
        for (name, v) in map {
            if name == "__metadata__" {
                continue;
            }
            let entry: Entry =
                serde_json::from_value(v).map_err(|error| ModelError::Json { path: path.to_path_buf(), error })?;
            // The tensor's bytes must be in the file: a download cut short is refused here, not read as garbage.
            if let Some([_, end]) = entry.data_offsets
                && end.saturating_add(8 + len) > file_len
            {
                return Err(ModelError::Corrupt {
                    path: path.to_path_buf(),
                    message: format!(
                        "truncated: tensor `{name}` ends at byte {} but the file has {file_len}; fix: {again}",
                        end.saturating_add(8 + len)
                    ),
                });
            }
            out.insert(name, entry);
        }
    }
    check_offsets(path, &out, file_len - 8 - len, again)?;
    Ok(out)
}

/// Checks that each tensor's `data_offsets` span exactly its shape x dtype size, and that the spans, sorted, tile
/// `0..data_len` (the bytes after the header) without a gap or an overlap, as the safetensors crate does.
fn check_offsets(path: &Path, entries: &HashMap<String, Entry>, data_len: u64, again: &str) -> Result<(), ModelError> {
    let corrupt = |name: &str, what: String| ModelError::Corrupt {
        path: path.to_path_buf(),
        message: format!(
            "tensor `{name}` {what}, so the file cannot be read as safetensors; fix: the file is damaged or was \
             written wrongly, {again}"
        ),
    };
    let mut spans = Vec::with_capacity(entries.len());
    for (name, e) in entries {
        let Some([start, end]) = e.data_offsets else {
            return Err(corrupt(name, "has no `data_offsets`".to_string()));
        };
        let Some(bits) = dtype_bits(&e.dtype) else {
            return Err(corrupt(name, format!("has dtype {:?}, which is not a safetensors dtype", e.dtype)));
        };
        let bytes = e
            .shape
            .iter()
            .try_fold(bits, |n, &d| n.checked_mul(d as u64))
            .filter(|b| b % 8 == 0)
            .map(|b| b / 8)
            .ok_or_else(|| {
                corrupt(name, format!("of shape {:?} and dtype {} is not a whole number of bytes", e.shape, e.dtype))
            })?;
        if end < start || end - start != bytes {
            return Err(corrupt(
                name,
                format!(
                    "has data_offsets [{start}, {end}] ({} bytes) but its shape {:?} of {} takes {bytes} bytes",
                    end as i128 - start as i128,
                    e.shape,
                    e.dtype
                ),
            ));
        }
        spans.push((start, end, name.as_str()));
    }
    spans.sort_unstable();
    let mut at = 0;
    for (start, end, name) in spans {
        if start != at {
            let what = if start > at { "a gap of" } else { "an overlap of" };
            return Err(corrupt(
                name,
                format!(
                    "starts at data byte {start} but the tensor before it ends at {at} ({what} {} bytes)",
                    start.abs_diff(at)
                ),
            ));
        }
        at = end;
    }
    if at != data_len {
        return Err(ModelError::Corrupt {
            path: path.to_path_buf(),
            message: format!(
                "its tensors end at data byte {at} but the file holds {data_len} bytes of data after its header, so \
                 the file cannot be read as safetensors; fix: the file is damaged or was written wrongly, {again}"
            ),
        });
    }
    Ok(())
}

/// The shard the index assigns to each tensor (sharded checkpoints).
fn index_map(index: &Path) -> Result<HashMap<String, String>, ModelError> {
    let text = std::fs::read_to_string(index).map_err(|error| ModelError::Io { path: index.to_path_buf(), error })?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|error| ModelError::Json { path: index.to_path_buf(), error })?;
    Ok(json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
        .unwrap_or_default())
}

/// Whether two tensors of safetensors files hold the same dtype, shape and bytes (read in 1 MiB pieces).
fn same_bytes((pa, a): (&Path, &Entry), (pb, b): (&Path, &Entry)) -> Result<bool, ModelError> {
    let (Some(oa), Some(ob)) = (a.data_offsets, b.data_offsets) else { return Ok(false) };
    if a.dtype != b.dtype || a.shape != b.shape || oa[1] - oa[0] != ob[1] - ob[0] {
        return Ok(false);
    }
    let open = |path: &Path, off: [u64; 2]| -> std::io::Result<std::io::Take<std::fs::File>> {
        let mut f = std::fs::File::open(path)?;
        let mut len = [0u8; 8];
        f.read_exact(&mut len)?;
        f.seek(std::io::SeekFrom::Start(8 + u64::from_le_bytes(len) + off[0]))?;
        Ok(f.take(off[1] - off[0]))
    };
    fn io(path: &Path) -> impl Fn(std::io::Error) -> ModelError + '_ {
        move |error| ModelError::Io { path: path.to_path_buf(), error }
    }
    let (mut ra, mut rb) = (open(pa, oa).map_err(io(pa))?, open(pb, ob).map_err(io(pb))?);
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = ra.read(&mut ba).map_err(io(pa))?;
        if n == 0 {
            return Ok(true);
        }
        rb.read_exact(&mut bb[..n]).map_err(io(pb))?;
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
    }
}

/// Checks every tensor of `cfg`'s layout in `files` (see the module doc).
pub fn check_weights(files: &ModelFiles, cfg: &ModelConfig) -> Result<(), ModelError> {
    let again = files.redo_fix(cfg.kind);
    let headers: Vec<(PathBuf, HashMap<String, Entry>)> =
        files.weights.iter().map(|p| Ok((p.clone(), read_header(p, &again)?))).collect::<Result<_, ModelError>>()?;
    let names = WeightNames::for_kind(cfg.kind);
    let needed = names.tensors(cfg);
    for (name, shape) in needed.iter().cloned() {
        let found = headers.iter().find_map(|(p, h)| h.get(&name).map(|e| (p, e)));
        let Some((path, entry)) = found else {
            // Name the file that should hold it: the index's shard (the index is read only now), or the single file.
            let (path, fix) = match &files.index {
                Some(ipath) => match index_map(ipath)?.get(&name) {
                    Some(shard) => (
                        files.snapshot_dir.join(shard),
                        format!("{} assigns it to this shard but the shard lacks it", ipath.display()),
                    ),
                    None => (ipath.clone(), "the index does not list it".to_string()),
                },
                None => (files.weights[0].clone(), "the file does not hold it".to_string()),
            };
            return Err(ModelError::MissingTensor {
                path,
                tensor: name,
                fix: format!(
                    "{fix}; the {:?} layout needs it (config.json: {} layers): the checkpoint is incomplete or of \
                     another architecture, {again}",
                    cfg.kind, cfg.num_layers
                ),
            });
        };
        if !FLOAT_DTYPES.contains(&entry.dtype.as_str()) {
            return Err(ModelError::TensorDtype { path: path.clone(), tensor: name, dtype: entry.dtype.clone() });
        }
        if entry.shape != shape {
            return Err(ModelError::TensorShape {
                path: path.clone(),
                tensor: name,
                message: format!(
                    "has shape {:?} but {} implies {shape:?}; fix: the weights and config.json are of different \
                     models (or sizes): {again}",
                    entry.shape,
                    files.config.display()
                ),
            });
        }
    }
    // Layers beyond config.json's count would be ignored: a config that says fewer layers than the weights hold
    // loads a truncated model.
    let prefix = format!("{}.", WeightNames::for_kind(cfg.kind).layers);
    for (path, h) in &headers {
        let extra = h.keys().filter_map(|n| n.strip_prefix(&prefix)?.split('.').next()?.parse::<usize>().ok());
        if let Some(layer) = extra.filter(|&l| l >= cfg.num_layers).max() {
            return Err(ModelError::Corrupt {
                path: path.clone(),
                message: format!(
                    "holds layer {layer} but {} says {} layers, so the model would load truncated; fix: the weights \
                     and config.json are of different models (or sizes): {again}",
                    files.config.display(),
                    cfg.num_layers
                ),
            });
        }
    }
    // A parameter the layout does not read would be dropped without a word (a norm's bias, an MLP bias the
    // config does not announce): the model would run, computing something else than its own code does. Buffers
    // (e.g. old checkpoints' `rotary_emb.inv_freq`) are not parameters and are left alone.
    let tied_head = format!("{}.weight", names.lm_head);
    for (path, h) in &headers {
        let mut unused: Vec<&String> = h
            .keys()
            .filter(|n| n.ends_with(".weight") || n.ends_with(".bias"))
            .filter(|n| !(needed.iter().any(|(name, _)| name == *n) || cfg.tied_lm_head && **n == tied_head))
            .collect();
        unused.sort();
        if let Some(first) = unused.first() {
            return Err(ModelError::Corrupt {
                path: path.clone(),
                message: format!(
                    "holds {} tensor(s) the {:?} layout of {} does not use, e.g. `{first}`: the model would run \
                     without them, computing something other than the checkpoint's own code; fix: the weights \
                     and config.json are of different models, or config.json leaves out a feature they need \
                     (biases, another norm): this checkpoint cannot be measured as it is",
                    unused.len(),
                    cfg.kind,
                    files.config.display()
                ),
            });
        }
    }
    // A tied config whose file also holds a head of its own: transformers 4 ties them, transformers 5 uses the
    // stored head, so the two read different models unless the head is the embedding, byte for byte.
    let find = |name: &str| headers.iter().find_map(|(p, h)| h.get(name).map(|e| (p.as_path(), e)));
    if cfg.tied_lm_head
        && let (Some(head), Some(embed)) = (find(&tied_head), find(&format!("{}.weight", names.embed)))
        && !same_bytes(head, embed)?
    {
        return Err(ModelError::Corrupt {
            path: head.0.to_path_buf(),
            message: format!(
                "holds `{tied_head}`, other than the embedding, while {} ties the LM head to the embedding \
                 (`tie_word_embeddings` / `weight_tying`); transformers 4 and 5 read such a file as different \
                 models; fix: set it to false in config.json to use that head, or remove the tensor to tie them",
                files.config.display()
            ),
        });
    }
    Ok(())
}
