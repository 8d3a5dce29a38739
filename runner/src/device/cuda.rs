//! The CUDA side of [`crate::device`]: CUDA events on candle's stream, and the memory pool's high-water marks.
//! cudarc is reached through `candle_core::cuda::cudarc` (candle-core links it dynamically; adding cudarc as
//! our own dependency with other features would break its build script).
//!
//! candle allocates with `cuMemAllocAsync` from the device's current memory pool, so the pool's
//! `USED_MEM_HIGH` and `RESERVED_MEM_HIGH` attributes are the run's peaks (what `torch.cuda.max_memory_allocated`
//! and `max_memory_reserved` report under PyTorch's caching allocator). Writing 0 resets them to the current use.
//! cuBLAS workspaces and the context live outside the pool: `cuMemGetInfo` gives the device-wide figure.
#![allow(unsafe_code)]

use std::sync::Arc;

use candle_core::Device;
use candle_core::cuda::cudarc::driver::{CudaContext, CudaEvent, CudaGraph, CudaStream, DriverError, result, sys};

use super::MemoryPeaks;

fn wrap(e: DriverError) -> candle_core::Error {
    candle_core::Error::wrap(e)
}

fn stream(device: &Device) -> candle_core::Result<Arc<CudaStream>> {
    Ok(device.as_cuda_device()?.cuda_stream())
}

/// Elapsed time between CUDA events recorded on candle's stream (the per-thread default stream of the thread
/// that launches the work): no host synchronisation inside the timed region, only when a reading is taken.
#[derive(Debug)]
pub struct EventClock {
    stream: Arc<CudaStream>,
    start: CudaEvent,
}

impl EventClock {
    fn mark(stream: &Arc<CudaStream>) -> candle_core::Result<CudaEvent> {
        // `CU_EVENT_DEFAULT`: timing enabled (`None` would create an event with timing disabled).
        stream.record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(wrap)
    }

    /// Records the start event after the work queued so far.
    pub fn start(device: &Device) -> candle_core::Result<Self> {
        let stream = stream(device)?;
        let start = Self::mark(&stream)?;
        Ok(Self { stream, start })
    }

    /// Milliseconds from the start event to an event recorded now (waits for the work queued so far).
    pub fn elapsed_ms(&self) -> candle_core::Result<f64> {
        let end = Self::mark(&self.stream)?;
        Ok(f64::from(self.start.elapsed_ms(&end).map_err(wrap)?))
    }

    /// [`Self::elapsed_ms`], then the end event becomes the new start (per-step times without gaps).
    pub fn lap_ms(&mut self) -> candle_core::Result<f64> {
        let end = Self::mark(&self.stream)?;
        let ms = f64::from(self.start.elapsed_ms(&end).map_err(wrap)?);
        self.start = end;
        Ok(ms)
    }
}

/// One CUDA event recorded on candle's stream, without waiting: a profile's part boundaries, read when the
/// forward is over (`bench-kernels --profile`).
#[derive(Debug)]
pub struct EventMark(CudaEvent);

impl EventMark {
    /// Records an event after the work queued so far (no host synchronisation).
    pub fn record(device: &Device) -> candle_core::Result<Self> {
        Ok(Self(EventClock::mark(&stream(device)?)?))
    }

    /// Milliseconds from `self` to `later` (waits for `later`).
    pub fn ms_to(&self, later: &EventMark) -> candle_core::Result<f64> {
        Ok(f64::from(self.0.elapsed_ms(&later.0).map_err(wrap)?))
    }
}

fn context(device: &Device) -> candle_core::Result<Arc<CudaContext>> {
    let stream = stream(device)?;
    let ctx = stream.context().clone();
    ctx.bind_to_thread().map_err(wrap)?;
    Ok(ctx)
}

/// The memory pool `cuMemAllocAsync` draws from on this device.
fn pool(ctx: &CudaContext) -> candle_core::Result<sys::CUmemoryPool> {
    // SAFETY: `cu_device` is the device of a live context, as `get_mem_pool` requires.
    unsafe { result::device::get_mem_pool(ctx.cu_device()) }.map_err(wrap)
}

fn set_u64(pool: sys::CUmemoryPool, attr: sys::CUmemPool_attribute, mut value: u64) -> candle_core::Result<()> {
    // SAFETY: the pool is the device's live pool; the attributes used here are all `cuuint64_t`, and `value`
    // is a u64 that outlives the call.
    unsafe { result::mem_pool::set_attribute(pool, attr, (&raw mut value).cast()) }.map_err(wrap)
}

fn get_u64(pool: sys::CUmemoryPool, attr: sys::CUmemPool_attribute) -> candle_core::Result<u64> {
    let mut value = 0u64;
    // SAFETY: as in `set_u64`; the driver writes one `cuuint64_t` into `value`.
    unsafe { result::mem_pool::get_attribute(pool, attr, (&raw mut value).cast()) }.map_err(wrap)?;
    Ok(value)
}

/// The memory of captured CUDA graphs (their intermediates live in the driver's graph pool, not in the device pool
/// `cuMemAllocAsync` draws from outside a capture): attribute `attr` of the device's graph memory.
fn graph_mem(ctx: &CudaContext, attr: sys::CUgraphMem_attribute, set: Option<u64>) -> candle_core::Result<u64> {
    let mut value = set.unwrap_or(0);
    // SAFETY: a live context's device; the graph memory attributes are all `cuuint64_t`, read or written through
    // `value`, which outlives the call; only the high-water marks are ever written (to 0, as the API allows).
    let r = unsafe {
        match set {
            Some(_) => sys::cuDeviceSetGraphMemAttribute(ctx.cu_device(), attr, (&raw mut value).cast()),
            None => sys::cuDeviceGetGraphMemAttribute(ctx.cu_device(), attr, (&raw mut value).cast()),
        }
    };
    r.result().map_err(wrap)?;
    Ok(value)
}

/// A device opened on a stream of its own (`Device::new_cuda_with_stream`) puts cudarc in multi-stream mode, where
/// every tensor records CUDA events at each use: off, before any tensor exists. Sound here because all the work
/// of the device is queued on its one stream, in order.
pub fn single_stream(device: &Device) -> candle_core::Result<()> {
    // SAFETY: nothing else uses another stream of this context; see above.
    unsafe { device.as_cuda_device()?.disable_event_tracking() };
    Ok(())
}

/// Keep reserved memory in the pool (release threshold u64::MAX): otherwise the pool returns its free memory to
/// the driver at every synchronisation and each run pays the driver's allocation again.
pub fn prepare(device: &Device) -> candle_core::Result<()> {
    let ctx = context(device)?;
    set_u64(pool(&ctx)?, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, u64::MAX)
}

/// Waits for queued work (pending frees included), then resets both high-water marks to the current use.
pub fn reset_peaks(device: &Device) -> candle_core::Result<()> {
    device.synchronize()?;
    let ctx = context(device)?;
    let pool = pool(&ctx)?;
    set_u64(pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0)?;
    set_u64(pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 0)?;
    graph_mem(&ctx, sys::CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, Some(0))?;
    graph_mem(&ctx, sys::CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, Some(0))?;
    Ok(())
}

/// The high-water marks since the last reset and the device-wide used memory now. A run that replayed CUDA graphs
/// adds their memory's marks (the graphs' intermediates come from the driver's graph pool): the sum of two
/// high-water marks, at most the joint peak plus the smaller of them (0 without graphs).
pub fn read_peaks(device: &Device) -> candle_core::Result<MemoryPeaks> {
    device.synchronize()?;
    let ctx = context(device)?;
    let pool = pool(&ctx)?;
    let graphs = |attr| graph_mem(&ctx, attr, None);
    let allocated = get_u64(pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH)?
        + graphs(sys::CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)?;
    let reserved = get_u64(pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)?
        + graphs(sys::CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)?;
    let (free, total) = ctx.mem_get_info().map_err(wrap)?;
    Ok(MemoryPeaks {
        allocated: Some(allocated),
        reserved: Some(reserved),
        device_used: Some(total.saturating_sub(free) as u64),
        rss: None,
    })
}

/// Waits for the device (the failed run's frees complete), then trims the pool to what is still allocated.
pub fn release(device: &Device) -> candle_core::Result<()> {
    device.synchronize()?;
    let ctx = context(device)?;
    let pool = pool(&ctx)?;
    // SAFETY: the device's live pool; trimming only returns unused reserved memory to the driver.
    unsafe { result::mem_pool::trim_to(pool, 0) }.map_err(wrap)?;
    // The same for the memory CUDA graphs reserved (`run.cuda_graphs`; nothing when none was captured).
    // SAFETY: a live context's device; the call only frees graph memory that no graph uses.
    unsafe { sys::cuDeviceGraphMemTrim(ctx.cu_device()) }.result().map_err(wrap)
}

/// The device's UUID as NVML writes it (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`): the energy counter is read
/// from the NVML device that is this CUDA device, whatever `CUDA_VISIBLE_DEVICES` maps.
pub fn uuid(device: &Device) -> candle_core::Result<String> {
    let id = stream(device)?.context().uuid().map_err(wrap)?;
    let b: Vec<u8> = id.bytes.iter().map(|&c| c as u8).collect();
    let hex = |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    Ok(format!("GPU-{}-{}-{}-{}-{}", hex(0..4), hex(4..6), hex(6..8), hex(8..10), hex(10..16)))
}

/// While alive, candle keeps every small host-to-device upload it makes (an op's dims and strides) on the device,
/// keyed by its bytes, and reuses it: what a capture needs, since a capture may not copy from the host. Hold it
/// over a first eager run of the work to capture (which fills the cache) and over the capture.
pub struct GraphParams {
    _guard: Box<dyn std::any::Any>,
}

impl GraphParams {
    pub fn hold(device: &Device) -> candle_core::Result<Self> {
        Ok(Self { _guard: Box::new(device.as_cuda_device()?.enable_cuda_graph_htod_cache()) })
    }
}

/// Work captured from candle's stream as a CUDA graph: [`Graph::launch`] replays it, one launch for every kernel,
/// copy and allocation recorded.
pub struct Graph(CudaGraph);

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Graph")
    }
}

impl Graph {
    /// Records what `work` queues on `device`'s stream (nothing runs) and instantiates it. The allocations made and
    /// freed inside become the graph's own (freed again at each launch); `work` must leave its results in buffers
    /// that existed before the capture. Hold a [`GraphParams`] over a first eager run of `work` and this call.
    pub fn capture(device: &Device, work: impl FnOnce() -> candle_core::Result<()>) -> candle_core::Result<Self> {
        let stream = stream(device)?;
        stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).map_err(wrap)?;
        let recorded = work();
        // The capture ends in any case (a stream left capturing would refuse all later work).
        let ended = stream
            .end_capture(sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)
            .map_err(wrap);
        recorded.map_err(|e| e.context("while capturing a CUDA graph"))?;
        match ended? {
            Some(graph) => Ok(Self(graph)),
            None => candle_core::bail!("the CUDA graph capture recorded nothing"),
        }
    }

    /// Queues one replay on the stream it was captured from (no host wait).
    pub fn launch(&self) -> candle_core::Result<()> {
        self.0.launch().map_err(wrap)
    }
}
