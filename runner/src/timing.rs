//! Timing that is right on asynchronous devices, behind one type for every device.
//!
//! [`Stopwatch`] on CUDA records CUDA events on candle's stream (the stream the work is queued on): the start
//! event follows the work queued before it, a reading records an end event and waits for it, so the time is
//! the device's, with no host synchronisation inside the timed region. On the CPU it is the monotonic clock
//! (`Instant`); candle's CPU ops are synchronous. Readings are in milliseconds.

use std::time::Instant;

use candle_core::Device;

use crate::device::EventClock;

/// A stopwatch over CUDA events (CUDA) or the monotonic clock (CPU).
#[derive(Debug)]
pub struct Stopwatch {
    clock: Clock,
}

#[derive(Debug)]
enum Clock {
    Host {
        device: Device,
        start: Instant,
    },
    /// The host instant beside the events only cross-checks them (`elapsed_ms`'s debug line).
    Events(EventClock, Instant),
}

impl Stopwatch {
    /// Starts after the work queued on `device` so far.
    pub fn start(device: &Device) -> candle_core::Result<Self> {
        let clock = match device {
            Device::Cuda(_) => Clock::Events(EventClock::start(device)?, Instant::now()),
            _ => {
                device.synchronize()?;
                Clock::Host { device: device.clone(), start: Instant::now() }
            }
        };
        Ok(Self { clock })
    }

    /// Which clock this is: `cuda-events` or `monotonic`.
    pub fn kind(&self) -> &'static str {
        match self.clock {
            Clock::Host { .. } => "monotonic",
            Clock::Events(..) => "cuda-events",
        }
    }

    /// Milliseconds since start, once the device has finished the work queued so far.
    pub fn elapsed_ms(&self) -> candle_core::Result<f64> {
        match &self.clock {
            Clock::Host { device, start } => {
                device.synchronize()?;
                Ok(start.elapsed().as_secs_f64() * 1e3)
            }
            Clock::Events(e, host) => {
                let ms = e.elapsed_ms()?;
                // The host clock over the same region (from the start event's recording to the end event's
                // completion): above the events' time by the work queued before the start and the wait's
                // latency. `--log runner::timing=debug` prints both, to check the events on a device.
                tracing::debug!(events_ms = ms, host_ms = host.elapsed().as_secs_f64() * 1e3, "stopwatch");
                Ok(ms)
            }
        }
    }

    /// Milliseconds since start, then restarts at that moment (per-step times with no gap between steps).
    pub fn lap_ms(&mut self) -> candle_core::Result<f64> {
        match &mut self.clock {
            Clock::Host { device, start } => {
                device.synchronize()?;
                let now = Instant::now();
                let ms = (now - *start).as_secs_f64() * 1e3;
                *start = now;
                Ok(ms)
            }
            Clock::Events(e, _) => e.lap_ms(),
        }
    }
}
