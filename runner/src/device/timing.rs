//! Timing that is right on asynchronous devices, behind one type for every device.
//!
//! [`Stopwatch`] on CUDA records CUDA events on candle's stream (the stream the work is queued on): the start
//! event follows the work queued before it, a reading records an end event and waits for it, so the time is
//! the device's, with no host synchronisation inside the timed region. On the CPU it is the monotonic clock
//! (`Instant`); candle's CPU ops are synchronous. Readings are in milliseconds.

use std::time::Instant;

use candle_core::Device;

use super::EventClock;

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
                // latency. `--log runner::timing=debug` prints both, to check the events on a device (the target
                // keeps the name it had before this module moved under `device`).
                tracing::debug!(
                    target: "runner::timing",
                    events_ms = ms,
                    host_ms = host.elapsed().as_secs_f64() * 1e3,
                    "stopwatch"
                );
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

/// Time marks recorded without waiting for the device, read when the timed region is over: per-token times of a
/// decode whose host never waits inside the loop (on CUDA it queues the next token's work while the device
/// runs; on the CPU, whose ops are synchronous, a mark is a clock reading).
#[derive(Debug)]
pub struct Marks {
    device: Device,
    marks: Vec<Mark>,
    /// Per mark: the interval that ends at it is a gap, not a lap ([`Marks::restart`]).
    gap: Vec<bool>,
}

#[derive(Debug)]
enum Mark {
    Host(Instant),
    Event(super::EventMark),
}

impl Marks {
    /// The first mark, after the work queued on `device` so far.
    pub fn start(device: &Device) -> candle_core::Result<Self> {
        let mut m = Self { device: device.clone(), marks: Vec::new(), gap: Vec::new() };
        if !device.is_cuda() {
            device.synchronize()?;
        }
        m.mark()?;
        Ok(m)
    }

    /// A mark after the work queued so far (no wait on CUDA).
    pub fn mark(&mut self) -> candle_core::Result<()> {
        let m = match &self.device {
            Device::Cuda(_) => Mark::Event(super::EventMark::record(&self.device)?),
            _ => Mark::Host(Instant::now()),
        };
        self.marks.push(m);
        self.gap.push(false);
        Ok(())
    }

    /// A mark that starts the next lap without ending one: the time since the last mark (host work the device
    /// may have waited for, such as a CUDA graph's capture) is in no lap.
    pub fn restart(&mut self) -> candle_core::Result<()> {
        self.mark()?;
        if let Some(g) = self.gap.last_mut() {
            *g = true;
        }
        Ok(())
    }

    /// Milliseconds between consecutive marks (one fewer than the marks, less the restarts); waits for the device.
    pub fn laps_ms(&self) -> candle_core::Result<Vec<f64>> {
        self.marks
            .windows(2)
            .zip(&self.gap[1..])
            .filter(|(_, gap)| !**gap)
            .map(|(w, _)| match (&w[0], &w[1]) {
                (Mark::Host(a), Mark::Host(b)) => Ok((*b - *a).as_secs_f64() * 1e3),
                (Mark::Event(a), Mark::Event(b)) => a.ms_to(b),
                _ => candle_core::bail!("time marks from two clocks"),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use candle_core::Device;

    use super::Marks;

    #[test]
    fn a_restart_leaves_the_time_before_it_out_of_every_lap() {
        let mut m = Marks::start(&Device::Cpu).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        m.mark().unwrap();
        // What a capture's host time would be: in no lap.
        std::thread::sleep(Duration::from_millis(600));
        m.restart().unwrap();
        std::thread::sleep(Duration::from_millis(5));
        m.mark().unwrap();
        let laps = m.laps_ms().unwrap();
        assert_eq!(laps.len(), 2, "{laps:?}");
        assert!(laps.iter().all(|&ms| (5.0..500.0).contains(&ms)), "{laps:?}");
    }
}
