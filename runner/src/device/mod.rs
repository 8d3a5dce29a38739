//! The device: choosing and opening it, timing on it, its memory peaks, and what an out-of-memory failure
//! looks like. Every line of CUDA code of the runner sits behind this module (in `cuda.rs`, compiled with the
//! `cuda` feature); a build without CUDA compiles `no_cuda.rs` instead, whose functions are never reached
//! because candle cannot create a CUDA device there, and [`open`] says "built without CUDA".
//!
//! What the rest of the runner sees is device-neutral: [`open`], [`timing::Stopwatch`] (CUDA events on
//! candle's stream, or the monotonic clock on the CPU), [`reset_peaks`] / [`read_peaks`] (the CUDA memory
//! pool's high-water marks, or the process's peak resident set on the CPU), [`release`] after a failure, and
//! [`is_out_of_memory`], [`energy`]'s counters around a measured run (NVML on CUDA, RAPL on the CPU), and the
//! device's ceilings ([`peaks`]: copy bandwidth and matmul rate). The measurement method is described in `runner/PERF.md`.

use anyhow::{Context, Result};
use candle_core::{DType, Device};
use schema::grid::{DeviceSpec, Precision};

use crate::{InputError, sysinfo};

pub mod energy;
pub mod peaks;
pub mod timing;

#[cfg_attr(feature = "cuda", path = "cuda.rs")]
#[cfg_attr(not(feature = "cuda"), path = "no_cuda.rs")]
mod imp;

pub(crate) use imp::{EventClock, EventMark};
/// CUDA-graph capture and replay ([`Graph`]) and the upload cache a capture needs ([`GraphParams`]); without
/// CUDA both refuse.
pub use imp::{Graph, GraphParams};

/// Test-only fault injection: a cell whose description (`CellKey`'s Display, e.g.
/// `org/model N=48 B=2 K=8`) contains this variable's value fails its first measured run with a CUDA
/// out-of-memory error, so that tests without a GPU can check that the cell is recorded as `oom` and the grid
/// goes on; with the prefix `warmup:` it fails the cell's first warm-up instead. Not for users; unset or empty: no
/// effect.
pub const INJECT_OOM_ENV: &str = "DLLM_BENCH_INJECT_OOM";

/// Whether this binary can open the device at all: a CPU-only build refuses CUDA with the rebuild command (no GPU
/// is needed to tell, so `plan --check` asks this on a login node before a job is queued).
pub fn check_build(spec: DeviceSpec) -> Result<(), InputError> {
    match spec {
        DeviceSpec::Cuda(i) if !candle_core::utils::cuda_is_available() => Err(InputError(format!(
            "device cuda:{i} (`--device`, or `run.device` in the config): this dllm-bench was built without CUDA; \
             fix: rebuild with `cargo build --release -p runner --features cuda` (CUDA 12 or 13 toolkit; see the \
             README), or run with --device cpu"
        ))),
        _ => Ok(()),
    }
}

/// Opens the device a config asks for, saying which and why on the log. A CPU-only build refuses CUDA with the
/// rebuild command instead of failing obscurely. On CUDA the memory pool is set to keep what it reserved
/// (release threshold u64::MAX), so its reserved peak is the run's and not the driver's trimming policy.
pub fn open(spec: DeviceSpec) -> Result<Device> {
    open_with(spec, false)
}

/// [`open`], and with `for_graphs` a CUDA device on a stream of its own (candle's default is the per-thread
/// default stream) with candle's per-tensor event tracking off: the plain stream a CUDA-graph capture expects
/// (`run.cuda_graphs`), with no event recorded per op. Every op still runs on that one stream.
pub fn open_with(spec: DeviceSpec, for_graphs: bool) -> Result<Device> {
    match spec {
        DeviceSpec::Cpu => {
            tracing::info!(threads = candle_core::utils::get_num_threads(), "device: cpu (asked for)");
            Ok(Device::Cpu)
        }
        DeviceSpec::Cuda(i) => {
            check_build(spec)?;
            let device = if for_graphs {
                let d = Device::new_cuda_with_stream(i).with_context(|| format!("cannot open CUDA device {i}"))?;
                imp::single_stream(&d).with_context(|| format!("cannot configure CUDA device {i}'s stream"))?;
                d
            } else {
                Device::new_cuda(i).with_context(|| format!("cannot open CUDA device {i}"))?
            };
            imp::prepare(&device).with_context(|| format!("cannot configure the memory pool of CUDA device {i}"))?;
            tracing::info!(ordinal = i, "device: cuda (asked for); timing with CUDA events, memory from the pool");
            Ok(device)
        }
    }
}

/// Memory high-water marks of one measured run; what the device cannot tell is `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryPeaks {
    /// CUDA: peak bytes in use by allocations of the memory pool (like `torch.cuda.max_memory_allocated`).
    pub allocated: Option<u64>,
    /// CUDA: peak bytes the pool reserved from the driver (like `torch.cuda.max_memory_reserved`).
    pub reserved: Option<u64>,
    /// CUDA: device-wide used memory (total - free) when read: context, cuBLAS workspaces and other processes
    /// included.
    pub device_used: Option<u64>,
    /// CPU: the process's peak resident set since the last reset.
    pub rss: Option<u64>,
}

/// Which memory high-water marks a measured run's window could reset (see [`reset_peaks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeakWindow {
    /// The CUDA pool's marks (allocated, reserved); true on the CPU, which has none.
    pub pool: bool,
    /// The process's peak RSS (`/proc/self/clear_refs`, often read-only in containers).
    pub rss: bool,
}

impl MemoryPeaks {
    /// The peaks that belong to the window: a mark that could not be reset would be an earlier run's, so it is
    /// left absent. The pool's marks do not depend on the RSS reset, nor the other way round.
    pub fn within(self, w: PeakWindow) -> MemoryPeaks {
        MemoryPeaks {
            allocated: self.allocated.filter(|_| w.pool),
            reserved: self.reserved.filter(|_| w.pool),
            device_used: self.device_used,
            rss: self.rss.filter(|_| w.rss),
        }
    }
}

/// Starts a measured run's memory window: the pool's high-water marks (CUDA) and the process's peak RSS are
/// reset to the current use, each on its own. A mark that cannot be reset is logged once; its peak is then absent
/// ([`MemoryPeaks::within`]), the others are kept.
pub fn reset_peaks(device: &Device) -> PeakWindow {
    let pool = match device {
        Device::Cuda(_) => imp::reset_peaks(device).map_err(|e| tracing::warn!("cannot reset the memory peaks: {e}")),
        _ => Ok(()),
    }
    .is_ok();
    // The CPU side is reset on every device: host memory of a CUDA run is not reported, but costs nothing.
    let rss = sysinfo::reset_peak_rss();
    if !rss {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            tracing::warn!(
                "cannot write /proc/self/clear_refs (read-only in many containers): peak RSS is left out of the \
                 bundle; the device's memory peaks are kept"
            )
        });
    }
    PeakWindow { pool, rss }
}

/// The peaks since [`reset_peaks`], after the device has finished the queued work.
pub fn read_peaks(device: &Device) -> MemoryPeaks {
    match device {
        Device::Cuda(_) => imp::read_peaks(device).unwrap_or_else(|e| {
            tracing::warn!("cannot read the memory peaks: {e}");
            MemoryPeaks::default()
        }),
        _ => MemoryPeaks { rss: sysinfo::peak_rss_bytes(), ..MemoryPeaks::default() },
    }
}

/// Waits for the device and returns the memory pool's free memory to the driver, so that what follows starts from
/// what is allocated (the weights): at each cell's start, and after a failed run (its tensors already dropped). A
/// no-op on the CPU.
pub fn release(device: &Device) {
    if let Device::Cuda(_) = device
        && let Err(e) = imp::release(device)
    {
        tracing::warn!("cannot release the device's free memory: {e}");
    }
}

/// On the CPU, refuses a run that needs more than the memory the system has available (`MemAvailable` of
/// `/proc/meminfo`), with an "out of memory" error that makes the cell `oom` as on CUDA: an allocation that
/// fails would abort the whole process, with no status for the cell. Nothing is checked on CUDA (its allocator
/// reports out-of-memory itself) or where the available memory cannot be read.
pub fn check_host_memory(device: &Device, bytes: u64) -> anyhow::Result<()> {
    if !matches!(device, Device::Cpu) {
        return Ok(());
    }
    let Some(available) = sysinfo::available_memory_bytes() else { return Ok(()) };
    if bytes > available {
        anyhow::bail!(
            "out of memory (checked before allocating): the run needs at least {:.2} GB beyond the weights and the \
             system has {:.2} GB available",
            bytes as f64 / 1e9,
            available as f64 / 1e9
        );
    }
    Ok(())
}

/// True when an error chain says the device ran out of memory (CUDA's driver or cuBLAS). On the CPU an
/// allocation failure aborts the process instead (Rust's default), so it never reaches a cell's status.
pub fn is_out_of_memory(err: &anyhow::Error) -> bool {
    let text = format!("{err:#} {err:?}").to_lowercase();
    ["out of memory", "cuda_error_out_of_memory", "cublas_status_alloc_failed"].iter().any(|p| text.contains(p))
}

/// The injected fault for a run of a cell (see [`INJECT_OOM_ENV`]), a `measured` one or a warm-up, if the variable
/// names it.
pub fn injected_oom(cell: &str, measured: bool) -> Option<anyhow::Error> {
    let want = std::env::var(INJECT_OOM_ENV).ok().filter(|v| !v.is_empty())?;
    let (warm_up, want) = match want.strip_prefix("warmup:") {
        Some(w) => (true, w.to_string()),
        None => (false, want),
    };
    // A candle error as the driver's is (with its backtrace when RUST_BACKTRACE asks for one).
    (cell.contains(&want) && warm_up != measured).then(|| {
        candle_core::Error::Msg(format!(
            "DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\") (injected by {INJECT_OOM_ENV}, a test hook)"
        ))
        .bt()
        .into()
    })
}

/// The torch-like dtype of a precision.
pub fn dtype_of(p: Precision) -> DType {
    match p {
        Precision::F32 => DType::F32,
        Precision::Bf16 => DType::BF16,
        Precision::F16 => DType::F16,
    }
}
