//! Energy counters read around a measured run (bundle format 1.7): NVML's cumulative energy counter on CUDA
//! (`nvmlDeviceGetTotalEnergyConsumption`, millijoules, the whole board; Volta and later), RAPL's package counters
//! on the CPU (`/sys/class/powercap/intel-rapl:N/energy_uj`, microjoules, wrapping at `max_energy_range_uj`).
//!
//! NVML is loaded at run time (`libnvidia-ml.so.1`, through `nvml-wrapper`): a machine without the driver library
//! builds and runs, and its bundle says why it has no energy. Where no counter can be read, [`Meter::open`] says
//! why, and the execution records that reason ([`schema::bundle::EnergyMeter::unavailable`]): an unmeasured energy
//! is absent, never 0. The method is in `runner/PERF.md` ("Energy").

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use candle_core::Device;
use schema::bundle::{EnergyMeter, EnergySource};

/// Test-only: the folder read as `/sys/class/powercap` (RAPL's zones `intel-rapl:N` with `name`, `energy_uj` and
/// `max_energy_range_uj`), so that tests can write a powercap-like folder and drive its counters. Not for users;
/// unset or empty: the real `/sys/class/powercap`.
pub const RAPL_ROOT_ENV: &str = "DLLM_BENCH_RAPL_ROOT";

/// Where the kernel's powercap zones are.
pub const RAPL_ROOT: &str = "/sys/class/powercap";

/// How long the idle power is measured before the first cell.
pub const IDLE_WINDOW: Duration = Duration::from_millis(1000);

/// The RAPL root: [`RAPL_ROOT_ENV`] when set, else [`RAPL_ROOT`].
pub fn rapl_root() -> PathBuf {
    match std::env::var_os(RAPL_ROOT_ENV).filter(|v| !v.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(RAPL_ROOT),
    }
}

/// One RAPL package zone.
#[derive(Debug, Clone)]
struct RaplZone {
    /// `intel-rapl:0`.
    id: String,
    /// `package-0`.
    name: String,
    /// Its `energy_uj`.
    counter: PathBuf,
    /// Its `max_energy_range_uj`: the counter counts from 0 up to this value, then starts again from 0.
    range_uj: u64,
}

/// RAPL's package counters under a powercap root, summed.
#[derive(Debug, Clone)]
pub struct Rapl {
    zones: Vec<RaplZone>,
}

fn read_u64(path: &Path) -> Result<u64, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        let hint = match e.kind() {
            std::io::ErrorKind::PermissionDenied => {
                " (since Linux 5.10 only root may read RAPL's counters; fix: run as root, or have an administrator \
                 make energy_uj readable)"
            }
            _ => "",
        };
        format!("cannot read {}: {e}{hint}", path.display())
    })?;
    text.trim().parse().map_err(|_| format!("{} holds {:?}, not a count", path.display(), text.trim()))
}

/// Energy counted from `before` to `after` by a counter that wraps to 0 after `range` (RAPL's
/// `max_energy_range_uj`). A reading below the previous one is one wrap-around; more than one wrap within a window
/// cannot be told apart (at 300 W a typical 262 kJ range lasts about 15 minutes).
pub fn counter_delta(before: u64, after: u64, range: u64) -> u64 {
    match after >= before {
        true => after - before,
        false => range.saturating_sub(before).saturating_add(after),
    }
}

impl Rapl {
    /// The package zones under `root` (`intel-rapl:N` whose `name` starts with `package`; sub-zones such as
    /// `intel-rapl:0:0` are parts of a package, and `intel-rapl-mmio:N` duplicates one, so neither is added), each
    /// readable. Why not, when there is none or one cannot be read.
    pub fn open(root: &Path) -> Result<Rapl, String> {
        let entries = std::fs::read_dir(root).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!(
                "no RAPL: {} does not exist (no powercap interface: not Linux, a virtual machine, or a container \
                 that hides it)",
                root.display()
            ),
            _ => format!("no RAPL: cannot list {}: {e}", root.display()),
        })?;
        let mut ids: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| {
                n.strip_prefix("intel-rapl:").is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
            })
            .collect();
        ids.sort_by_key(|id| id["intel-rapl:".len()..].parse::<u64>().unwrap_or(u64::MAX));
        if ids.is_empty() {
            return Err(format!(
                "no RAPL: {} has no intel-rapl:N zone (the intel_rapl driver is not loaded, or this CPU or virtual \
                 machine exposes no RAPL)",
                root.display()
            ));
        }
        let mut zones = Vec::new();
        let mut others = Vec::new();
        for id in ids {
            let dir = root.join(&id);
            let name = std::fs::read_to_string(dir.join("name")).map(|n| n.trim().to_string()).unwrap_or_default();
            if !name.starts_with("package") {
                others.push(format!("{id} ({})", if name.is_empty() { "unnamed" } else { &name }));
                continue;
            }
            let counter = dir.join("energy_uj");
            read_u64(&counter)?;
            let range_uj = read_u64(&dir.join("max_energy_range_uj"))?;
            if range_uj == 0 {
                return Err(format!("{}: max_energy_range_uj is 0", dir.display()));
            }
            zones.push(RaplZone { id, name, counter, range_uj });
        }
        if zones.is_empty() {
            return Err(format!(
                "no RAPL package zone under {} (only {}): a package's energy cannot be told",
                root.display(),
                others.join(", ")
            ));
        }
        Ok(Rapl { zones })
    }

    /// What the counters cover.
    pub fn scope(&self) -> String {
        let names: Vec<&str> = self.zones.iter().map(|z| z.name.as_str()).collect();
        let ids: Vec<&str> = self.zones.iter().map(|z| z.id.as_str()).collect();
        format!(
            "RAPL {} ({}): the whole CPU package{}, every process on {}; memory (DRAM) not included",
            names.join(" + "),
            ids.join(", "),
            if ids.len() == 1 { "" } else { "s" },
            if ids.len() == 1 { "it" } else { "them" }
        )
    }

    /// Every zone's counter now, microjoules.
    pub fn read(&self) -> Result<Vec<u64>, String> {
        self.zones.iter().map(|z| read_u64(&z.counter)).collect()
    }

    /// Joules between two readings of [`Rapl::read`], each zone's wrap-around undone.
    pub fn joules(&self, before: &[u64], after: &[u64]) -> f64 {
        let uj: u64 = self
            .zones
            .iter()
            .zip(before.iter().zip(after))
            .map(|(z, (&b, &a))| counter_delta(b, a, z.range_uj))
            .fold(0u64, u64::saturating_add);
        uj as f64 / 1e6
    }
}

/// NVML's energy counter of one GPU.
struct Nvml {
    nvml: nvml_wrapper::Nvml,
    uuid: String,
}

impl std::fmt::Debug for Nvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvml").field("uuid", &self.uuid).finish_non_exhaustive()
    }
}

impl Nvml {
    /// NVML (loaded now) and the GPU whose UUID is `uuid`, when its energy counter reads.
    fn open(uuid: String) -> Result<(Nvml, String), String> {
        let nvml = nvml_wrapper::Nvml::init()
            .map_err(|e| format!("no NVML: cannot load and initialise libnvidia-ml.so.1 (the NVIDIA driver's): {e}"))?;
        let scope = {
            let gpu = nvml.device_by_uuid(uuid.as_str()).map_err(|e| format!("NVML has no device {uuid}: {e}"))?;
            gpu.total_energy_consumption().map_err(|e| {
                format!("NVML cannot read the energy counter of {uuid} (Volta or later, not a MIG instance): {e}")
            })?;
            let name = gpu.name().unwrap_or_else(|_| "GPU".into());
            format!("NVML total energy of {name} {uuid}: the whole board (memory, fans and other processes included)")
        };
        Ok((Nvml { nvml, uuid }, scope))
    }

    /// The counter now, millijoules.
    fn read(&self) -> Result<u64, String> {
        let gpu =
            self.nvml.device_by_uuid(self.uuid.as_str()).map_err(|e| format!("NVML device {}: {e}", self.uuid))?;
        gpu.total_energy_consumption().map_err(|e| format!("NVML energy counter of {}: {e}", self.uuid))
    }
}

#[derive(Debug)]
enum Counter {
    Rapl(Rapl),
    /// Boxed: NVML's table of loaded functions is about 12 KB.
    Nvml(Box<Nvml>),
}

/// An energy counter opened for a device: NVML for a CUDA device, RAPL for the CPU.
#[derive(Debug)]
pub struct Meter {
    counter: Counter,
    scope: String,
}

/// A reading taken at the start of a window ([`Meter::start`]).
#[derive(Debug, Clone)]
pub struct Start {
    at: Instant,
    counts: Vec<u64>,
}

/// Energy over a window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Used {
    /// Joules.
    pub joules: f64,
    /// The window, ms (host monotonic clock between the readings).
    pub window_ms: f64,
}

impl Meter {
    /// The counter of `device`, or why there is none.
    pub fn open(device: &Device) -> Result<Meter, String> {
        match device {
            Device::Cuda(_) => {
                let uuid = super::imp::uuid(device).map_err(|e| format!("cannot read the CUDA device's UUID: {e}"))?;
                let (nvml, scope) = Nvml::open(uuid)?;
                Ok(Meter { counter: Counter::Nvml(Box::new(nvml)), scope })
            }
            Device::Cpu => Meter::rapl(&rapl_root()),
            _ => Err("no energy counter for this device kind".into()),
        }
    }

    /// RAPL's package counters under `root`.
    pub fn rapl(root: &Path) -> Result<Meter, String> {
        let rapl = Rapl::open(root)?;
        Ok(Meter { scope: rapl.scope(), counter: Counter::Rapl(rapl) })
    }

    /// Which counter.
    pub fn source(&self) -> EnergySource {
        match self.counter {
            Counter::Rapl(_) => EnergySource::Rapl,
            Counter::Nvml(_) => EnergySource::Nvml,
        }
    }

    /// What it covers.
    pub fn scope(&self) -> &str {
        &self.scope
    }

    fn read(&self) -> Result<Vec<u64>, String> {
        match &self.counter {
            Counter::Rapl(r) => r.read(),
            Counter::Nvml(n) => Ok(vec![n.read()?]),
        }
    }

    /// Starts a window once `device` has finished its queued work (that work is not the window's).
    pub fn start(&self, device: &Device) -> Result<Start, String> {
        device.synchronize().map_err(|e| format!("cannot synchronise the device: {e}"))?;
        let counts = self.read()?;
        Ok(Start { at: Instant::now(), counts })
    }

    /// Ends a window once `device` has finished the work queued in it.
    pub fn finish(&self, device: &Device, start: &Start) -> Result<Used, String> {
        device.synchronize().map_err(|e| format!("cannot synchronise the device: {e}"))?;
        let counts = self.read()?;
        let window_ms = start.at.elapsed().as_secs_f64() * 1000.0;
        let joules = match &self.counter {
            Counter::Rapl(r) => r.joules(&start.counts, &counts),
            // A 64-bit count of millijoules since the driver loaded: it does not wrap.
            Counter::Nvml(_) => counts[0].saturating_sub(start.counts[0]) as f64 / 1e3,
        };
        Ok(Used { joules, window_ms })
    }

    /// The idle device's energy over `window` (nothing queued on it meanwhile).
    pub fn idle(&self, device: &Device, window: Duration) -> Result<Used, String> {
        let start = self.start(device)?;
        std::thread::sleep(window);
        self.finish(device, &start)
    }
}

/// What an execution records of its energy counter: the meter with the idle energy measured now over
/// [`IDLE_WINDOW`] (absent when that reading fails), or why there is no meter.
pub fn record(meter: &Result<Meter, String>, device: &Device) -> EnergyMeter {
    match meter {
        Ok(m) => {
            let idle = m.idle(device, IDLE_WINDOW).map_err(|e| tracing::warn!("energy: no idle power: {e}")).ok();
            EnergyMeter {
                source: Some(m.source()),
                scope: Some(m.scope().to_string()),
                unavailable: None,
                idle_energy_j: idle.map(|u| u.joules),
                idle_window_ms: idle.map(|u| u.window_ms),
            }
        }
        Err(reason) => EnergyMeter {
            source: None,
            scope: None,
            unavailable: Some(reason.clone()),
            idle_energy_j: None,
            idle_window_ms: None,
        },
    }
}
