//! The device's ceilings: its copy bandwidth and matmul rate, probed by `bench-kernels` at the sizes it is given
//! and by every run at its start ([`probe_peaks`], recorded in the bundle).

use anyhow::{Context, Result};
use candle_core::{DType, Device, Tensor};
use metrics::rng::SplitMix64;
use schema::grid::Precision;

use super::timing::Stopwatch;

/// How many unmeasured (warm-up) and measured repetitions a timing takes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reps {
    pub(crate) warmup: usize,
    pub(crate) measured: usize,
}

/// Median of `reps.measured` timings of `f` (each returns milliseconds) after `reps.warmup` unmeasured ones.
pub(crate) fn median_ms(reps: Reps, mut f: impl FnMut() -> Result<f64>) -> Result<f64> {
    for _ in 0..reps.warmup {
        f()?;
    }
    let v = (0..reps.measured).map(|_| f()).collect::<Result<Vec<f64>>>()?;
    metrics::derive::summarize(&v).map(|s| s.median).context("no measured repetition (--repetitions must be >= 1)")
}

/// Bytes read + written per second by a device-to-device copy into an existing buffer.
pub(crate) fn copy_bandwidth(device: &Device, bytes: usize, reps: Reps) -> Result<f64> {
    let n = (bytes / 4).max(1);
    let src = Tensor::arange(0u32, n as u32, device)?.to_dtype(DType::F32)?;
    let dst = Tensor::zeros(n, DType::F32, device)?;
    let ms = median_ms(reps, || {
        let sw = Stopwatch::start(device)?;
        dst.slice_set(&src, 0, 0)?;
        Ok(sw.elapsed_ms()?)
    })?;
    Ok(2.0 * (n * 4) as f64 / (ms / 1e3))
}

/// The device's ceilings a run records at its start ([`schema::bundle::DevicePeaks`]): the same copy and matmul
/// probes as `bench-kernels` at its default sizes (1 GiB and 8192 on CUDA, 256 MiB and 1024 on the CPU), one
/// warm-up and three measured repetitions each (about a second on an H100, a quarter of one on two CPU cores).
pub fn probe_peaks(device: &Device, precision: Precision) -> Result<schema::bundle::DevicePeaks> {
    let cuda = device.is_cuda();
    let reps = Reps { warmup: 1, measured: 3 };
    let copy_bytes = if cuda { 1usize << 30 } else { 256 << 20 };
    let matmul_size = if cuda { 8192 } else { 1024 };
    let dtype = super::dtype_of(precision);
    // On the CPU an allocation that fails aborts the process: check first (the run then records no peaks).
    let matrices = 3 * (matmul_size * matmul_size * dtype.size_in_bytes()) as u64;
    super::check_host_memory(device, (2 * copy_bytes) as u64 + matrices).context("device probes")?;
    let copy_bytes_per_s = copy_bandwidth(device, copy_bytes, reps).context("copy bandwidth probe")?;
    let matmul_flops_per_s = matmul_rate(device, dtype, matmul_size, 0, reps).context("matmul rate probe")?;
    super::release(device);
    Ok(schema::bundle::DevicePeaks {
        copy_bytes_per_s,
        copy_bytes: copy_bytes as u64,
        matmul_flops_per_s,
        matmul_size: matmul_size as u32,
        dtype: precision,
        repetitions: reps.measured as u32,
    })
}

/// FLOP/s of a square `size` matmul in `dtype`.
pub(crate) fn matmul_rate(device: &Device, dtype: DType, size: usize, seed: u64, reps: Reps) -> Result<f64> {
    let a = random(device, &[size, size], 0.0, 1.0, seed)?.to_dtype(dtype)?;
    let b = random(device, &[size, size], 0.0, 1.0, seed.wrapping_add(1))?.to_dtype(dtype)?;
    let ms = median_ms(reps, || {
        let sw = Stopwatch::start(device)?;
        let c = a.matmul(&b)?;
        let ms = sw.elapsed_ms()?;
        drop(c);
        Ok(ms)
    })?;
    Ok(2.0 * (size as f64).powi(3) / (ms / 1e3))
}

/// Normal values with `mean` and `std` on `device`: seeded on the host for the CPU, curand on CUDA (fast at
/// the 8B shapes).
pub(crate) fn random(device: &Device, shape: &[usize], mean: f32, std: f32, seed: u64) -> Result<Tensor> {
    if device.is_cuda() {
        return Ok(Tensor::randn(mean, std, shape, device)?);
    }
    let mut v = vec![0f32; shape.iter().product()];
    SplitMix64::new(seed).fill_normal(&mut v, mean, std);
    Ok(Tensor::from_vec(v, shape, device)?)
}
