//! Streaming safetensors writer for random weights.
//!
//! The header (names, dtypes, shapes, offsets) is known before any data, so each tensor is generated chunk by
//! chunk straight into the file: memory stays at a few chunks even for the 8B `real` preset. Every chunk has its
//! own PRNG stream derived from (seed, tensor name, chunk index), so chunks are generated on all cores and the
//! bytes do not depend on the thread count.

use std::io::Write;

use schema::grid::Precision;
use sha2::{Digest, Sha256};

use super::rng::{SplitMix64, mix64, stream_seed};

/// Element size in bytes of a weight precision.
pub fn dtype_size(dtype: Precision) -> usize {
    match dtype {
        Precision::F32 => 4,
        Precision::Bf16 | Precision::F16 => 2,
    }
}

fn safetensors_name(dtype: Precision) -> &'static str {
    match dtype {
        Precision::F32 => "F32",
        Precision::Bf16 => "BF16",
        Precision::F16 => "F16",
    }
}

/// The `torch_dtype` string of `config.json`.
pub fn torch_name(dtype: Precision) -> &'static str {
    match dtype {
        Precision::F32 => "float32",
        Precision::Bf16 => "bfloat16",
        Precision::F16 => "float16",
    }
}

/// How a tensor's values are drawn.
#[derive(Debug, Clone, Copy)]
pub struct Init {
    pub mean: f32,
    pub std: f32,
}

/// One tensor to write.
#[derive(Debug, Clone)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub init: Init,
}

impl TensorSpec {
    pub fn elems(&self) -> usize {
        self.shape.iter().product()
    }
}

const CHUNK: usize = 1 << 16;

fn chunk_bytes(seed: u64, chunk: usize, n: usize, init: Init, dtype: Precision) -> Vec<u8> {
    let mut vals = vec![0f32; n];
    SplitMix64::new(mix64(seed ^ (chunk as u64).wrapping_mul(0xA24B_AED4_963E_E407)))
        .fill_normal(&mut vals, init.mean, init.std);
    match dtype {
        Precision::F32 => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        Precision::Bf16 => vals.iter().flat_map(|v| half::bf16::from_f32(*v).to_le_bytes()).collect(),
        Precision::F16 => vals.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect(),
    }
}

/// A writer that hashes what passes through (the blob name is the content's sha256, as hf-hub's LFS blobs).
pub struct HashWriter<W: Write> {
    pub inner: W,
    pub hasher: Sha256,
}

impl<W: Write> Write for HashWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // A stop signal (run and synth install the handlers) ends the file at its next chunk; the writer removes
        // what it wrote (not `ErrorKind::Interrupted`, which `write_all` retries).
        if crate::signals::interrupted() {
            return Err(std::io::Error::other("stopped by a signal"));
        }
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The JSON header of a safetensors file of `tensors` (in the given order), padded to a multiple of 8 bytes.
fn safetensors_header(tensors: &[TensorSpec], dtype: Precision) -> String {
    let mut header = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
    let mut offset = 0usize;
    for t in tensors {
        let bytes = t.elems() * dtype_size(dtype);
        let shape: Vec<String> = t.shape.iter().map(usize::to_string).collect();
        header.push_str(&format!(
            ",\"{}\":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
            t.name,
            safetensors_name(dtype),
            shape.join(","),
            offset,
            offset + bytes
        ));
        offset += bytes;
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    header
}

/// The size in bytes of the safetensors file [`write_safetensors`] writes for `tensors`.
pub fn safetensors_len(tensors: &[TensorSpec], dtype: Precision) -> u64 {
    let data: usize = tensors.iter().map(|t| t.elems() * dtype_size(dtype)).sum();
    (8 + safetensors_header(tensors, dtype).len() + data) as u64
}

/// Writes `tensors` as one safetensors file (in the given order) with random values from `seed`.
pub fn write_safetensors<W: Write + ?Sized>(
    out: &mut W,
    tensors: &[TensorSpec],
    dtype: Precision,
    seed: u64,
) -> std::io::Result<()> {
    let header = safetensors_header(tensors, dtype);
    out.write_all(&(header.len() as u64).to_le_bytes())?;
    out.write_all(header.as_bytes())?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    for t in tensors {
        let seed = stream_seed(seed, &t.name);
        let n = t.elems();
        let n_chunks = n.div_ceil(CHUNK);
        let group = threads * 4;
        let mut c0 = 0;
        while c0 < n_chunks {
            let c1 = (c0 + group).min(n_chunks);
            let parts: Vec<Vec<u8>> = if c1 - c0 == 1 {
                vec![chunk_bytes(seed, c0, (n - c0 * CHUNK).min(CHUNK), t.init, dtype)]
            } else {
                std::thread::scope(|s| {
                    let per = (c1 - c0).div_ceil(threads);
                    let handles: Vec<_> = (c0..c1)
                        .step_by(per)
                        .map(|start| {
                            let end = (start + per).min(c1);
                            let init = t.init;
                            s.spawn(move || {
                                (start..end)
                                    .map(|c| chunk_bytes(seed, c, (n - c * CHUNK).min(CHUNK), init, dtype))
                                    .collect::<Vec<_>>()
                            })
                        })
                        .collect();
                    let mut parts = Vec::with_capacity(c1 - c0);
                    for h in handles {
                        let chunk =
                            h.join().map_err(|_| std::io::Error::other("a weight generation thread panicked"))?;
                        parts.extend(chunk);
                    }
                    Ok::<_, std::io::Error>(parts)
                })?
            };
            for p in &parts {
                out.write_all(p)?;
            }
            c0 = c1;
        }
    }
    Ok(())
}
