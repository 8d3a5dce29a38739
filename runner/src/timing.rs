//! Wall-clock timing that is right on asynchronous devices.
//!
//! [`Stopwatch`] synchronises the device before it starts and before every reading, so queued CUDA work is
//! counted where it was issued. CUDA events (more precise, no host round trip in the timed region) are meant to
//! come behind this same type.

use std::time::Instant;

use candle_core::Device;

/// A stopwatch over `Instant` that synchronises `device` before each reading.
#[derive(Debug, Clone)]
pub struct Stopwatch {
    device: Device,
    start: Instant,
}

impl Stopwatch {
    /// Synchronises the device, then starts.
    pub fn start(device: &Device) -> candle_core::Result<Self> {
        device.synchronize()?;
        Ok(Self { device: device.clone(), start: Instant::now() })
    }

    /// Milliseconds since start, after the device has finished the work queued so far.
    pub fn elapsed_ms(&self) -> candle_core::Result<f64> {
        self.device.synchronize()?;
        Ok(self.start.elapsed().as_secs_f64() * 1e3)
    }

    /// Milliseconds since start, then restarts (for per-step times).
    pub fn lap_ms(&mut self) -> candle_core::Result<f64> {
        self.device.synchronize()?;
        let now = Instant::now();
        let ms = (now - self.start).as_secs_f64() * 1e3;
        self.start = now;
        Ok(ms)
    }
}
