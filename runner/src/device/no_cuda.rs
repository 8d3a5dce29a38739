//! The CUDA side of [`crate::device`] in a build without the `cuda` feature. candle cannot create a CUDA
//! device in such a build, so nothing here is ever reached; the types exist so that callers need no `cfg`.

use candle_core::Device;

use super::MemoryPeaks;

/// CUDA event timing: uninhabited without CUDA.
#[derive(Debug)]
pub enum EventClock {}

impl EventClock {
    pub fn start(_device: &Device) -> candle_core::Result<Self> {
        Err(candle_core::Error::NotCompiledWithCudaSupport)
    }

    pub fn elapsed_ms(&self) -> candle_core::Result<f64> {
        match *self {}
    }

    pub fn lap_ms(&mut self) -> candle_core::Result<f64> {
        match *self {}
    }
}

/// A CUDA event: uninhabited without CUDA.
#[derive(Debug)]
pub enum EventMark {}

impl EventMark {
    pub fn record(_device: &Device) -> candle_core::Result<Self> {
        Err(candle_core::Error::NotCompiledWithCudaSupport)
    }

    pub fn ms_to(&self, _later: &EventMark) -> candle_core::Result<f64> {
        match *self {}
    }
}

pub fn single_stream(_device: &Device) -> candle_core::Result<()> {
    Err(candle_core::Error::NotCompiledWithCudaSupport)
}

pub fn prepare(_device: &Device) -> candle_core::Result<()> {
    Err(candle_core::Error::NotCompiledWithCudaSupport)
}

pub fn reset_peaks(_device: &Device) -> candle_core::Result<()> {
    Err(candle_core::Error::NotCompiledWithCudaSupport)
}

pub fn read_peaks(_device: &Device) -> candle_core::Result<MemoryPeaks> {
    Err(candle_core::Error::NotCompiledWithCudaSupport)
}

pub fn release(_device: &Device) -> candle_core::Result<()> {
    Err(candle_core::Error::NotCompiledWithCudaSupport)
}

pub fn uuid(_device: &Device) -> candle_core::Result<String> {
    Err(candle_core::Error::NotCompiledWithCudaSupport)
}

/// candle's upload cache for a capture: nothing to hold without CUDA.
pub struct GraphParams;

impl GraphParams {
    pub fn hold(_device: &Device) -> candle_core::Result<Self> {
        Err(candle_core::Error::NotCompiledWithCudaSupport)
    }
}

/// A CUDA graph: uninhabited without CUDA.
#[derive(Debug)]
pub enum Graph {}

impl Graph {
    pub fn capture(_device: &Device, _work: impl FnOnce() -> candle_core::Result<()>) -> candle_core::Result<Self> {
        Err(candle_core::Error::NotCompiledWithCudaSupport)
    }

    pub fn launch(&self) -> candle_core::Result<()> {
        match *self {}
    }
}
