//! Where this process runs, for a bundle's provenance: host, device (GPU name, memory and driver from
//! `nvidia-smi` when it is there), shard and SLURM job. Facts that cannot be read are absent, never guessed.

use schema::grid::DeviceSpec;
use schema::{DeviceInfo, Execution, RunConditions, ShardInfo, SlurmInfo};

use crate::sysinfo;

/// The device model `d` names, as resumes and merges compare them: its kind and name, without the vendor word
/// some drivers print first ("NVIDIA A100-SXM4-80GB" and "A100-SXM4-80GB" are one model). `None` when the name is
/// unknown (nvidia-smi absent or failing in that container): an unknown model is compared with none.
pub fn device_model(d: &DeviceInfo) -> Option<String> {
    let name = d.name.as_deref()?.trim();
    let name = name.strip_prefix("NVIDIA ").unwrap_or(name).trim();
    (!name.is_empty()).then(|| format!("{} {name}", d.kind))
}

/// The known device models of the `executions` that measured any of `cells` (those whose `execution` is theirs).
pub fn measured_on(executions: &[Execution], cells: &[schema::Cell]) -> std::collections::BTreeSet<String> {
    let used: std::collections::BTreeSet<u32> = cells.iter().filter_map(|c| c.execution).collect();
    let of_cells = executions.iter().enumerate().filter(|(i, _)| used.contains(&(*i as u32)));
    of_cells.filter_map(|(_, e)| device_model(&e.device)).collect()
}

/// Facts about the device.
pub fn device_info(spec: DeviceSpec) -> DeviceInfo {
    match spec {
        DeviceSpec::Cpu => DeviceInfo {
            kind: "cpu".into(),
            name: sysinfo::cpu_name(),
            memory_bytes: sysinfo::memory_bytes(),
            threads: Some(candle_core::utils::get_num_threads() as u32),
            ..DeviceInfo::default()
        },
        DeviceSpec::Cuda(i) => {
            let mut d = DeviceInfo { kind: "cuda".into(), ordinal: Some(i as u32), ..DeviceInfo::default() };
            if let Some(g) = nvidia_smi(i) {
                d.name = Some(g.name);
                d.memory_bytes = g.memory_bytes;
                d.driver_version = Some(g.driver);
                d.compute_capability = g.compute_capability;
            }
            d
        }
    }
}

/// This process, started now.
pub fn current(spec: DeviceSpec, shard: Option<ShardInfo>) -> Execution {
    Execution {
        started_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        host: sysinfo::host(),
        device: device_info(spec),
        shard,
        slurm: slurm_info(|k| std::env::var(k).ok()),
        device_peaks: None,
        energy: None,
        conditions: Some(Box::new(conditions(spec))),
    }
}

/// The host's load and, on CUDA, the GPU's clocks, power limit, compute mode and other processes, now.
pub fn conditions(spec: DeviceSpec) -> RunConditions {
    let load = std::fs::read_to_string("/proc/loadavg").ok().and_then(|t| load_average(&t));
    let mut c = RunConditions {
        load_average_1m: load,
        logical_cpus: std::thread::available_parallelism().ok().map(|n| n.get() as u32),
        ..RunConditions::default()
    };
    if let DeviceSpec::Cuda(i) = spec
        && let Some(id) = smi_id(i)
    {
        let smi = |args: &[&str]| {
            let out = std::process::Command::new("nvidia-smi").args(args).args(["-i", &id]).output().ok()?;
            out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
        };
        if let Some(line) = smi(&[&format!("--query-gpu={GPU_STATE}"), "--format=csv,noheader,nounits"]) {
            gpu_state(&line, &mut c);
        }
        if let Some(text) = smi(&["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]) {
            (c.gpu_other_processes, c.gpu_other_processes_memory_bytes) = other_processes(&text, std::process::id());
        }
    }
    c
}

/// The `nvidia-smi --query-gpu` fields of [`gpu_state`], in its order.
const GPU_STATE: &str =
    "pstate,clocks.max.sm,clocks.applications.graphics,power.limit,power.default_limit,compute_mode";

/// The first field of `/proc/loadavg`.
fn load_average(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok().filter(|v: &f64| v.is_finite() && *v >= 0.0)
}

/// [`GPU_STATE`]'s values from one line of `nvidia-smi` CSV (`[N/A]` or `[Not Supported]` where a driver has
/// none: absent).
fn gpu_state(line: &str, c: &mut RunConditions) {
    let fields: Vec<Option<&str>> = line
        .lines()
        .next()
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .map(|f| (!f.is_empty() && !f.starts_with('[')).then_some(f))
        .collect();
    let field = |i: usize| fields.get(i).copied().flatten();
    let mhz = |i: usize| field(i).and_then(|f| f.parse::<f64>().ok()).map(|v| v.round() as u32);
    let watts = |i: usize| field(i).and_then(|f| f.parse::<f64>().ok()).filter(|v| v.is_finite());
    c.gpu_performance_state = field(0).map(str::to_string);
    c.gpu_max_sm_clock_mhz = mhz(1);
    c.gpu_application_sm_clock_mhz = mhz(2);
    c.gpu_power_limit_w = watts(3);
    c.gpu_default_power_limit_w = watts(4);
    c.gpu_compute_mode = field(5).map(str::to_string);
}

/// The compute processes `nvidia-smi --query-compute-apps=pid,used_memory` lists other than `own`, and the memory
/// (MiB in its output) they hold, in bytes: `(Some(0), Some(0))` for none.
fn other_processes(text: &str, own: u32) -> (Option<u32>, Option<u64>) {
    let mut n = 0u32;
    let mut bytes = 0u64;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with("No running")) {
        let mut parts = line.split(',').map(str::trim);
        let Some(pid) = parts.next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if pid == own {
            continue;
        }
        n += 1;
        bytes += parts.next().and_then(|m| m.parse::<u64>().ok()).unwrap_or(0) * 1024 * 1024;
    }
    (Some(n), Some(bytes))
}

/// SLURM facts from the job's environment; `None` outside a SLURM job.
pub fn slurm_info(var: impl Fn(&str) -> Option<String>) -> Option<SlurmInfo> {
    let job_id = var("SLURM_JOB_ID")?;
    Some(SlurmInfo {
        job_id: Some(job_id),
        array_job_id: var("SLURM_ARRAY_JOB_ID"),
        array_task_id: var("SLURM_ARRAY_TASK_ID"),
        restart_count: var("SLURM_RESTART_COUNT").and_then(|v| v.trim().parse().ok()),
        node: var("SLURMD_NODENAME"),
        cluster: var("SLURM_CLUSTER_NAME"),
    })
}

struct Gpu {
    name: String,
    driver: String,
    memory_bytes: Option<u64>,
    compute_capability: Option<String>,
}

/// The `nvidia-smi -i` id of CUDA ordinal `i`, mapped through `CUDA_VISIBLE_DEVICES` (SLURM sets it per job).
fn smi_id(i: usize) -> Option<String> {
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    Some(match visible.as_deref().map(|v| v.split(',').map(str::trim).collect::<Vec<_>>()) {
        Some(list) if !list.is_empty() && !list[0].is_empty() => list.get(i)?.to_string(),
        _ => i.to_string(),
    })
}

/// Queries `nvidia-smi` for CUDA ordinal `i`, mapped through `CUDA_VISIBLE_DEVICES` (SLURM sets it per job).
fn nvidia_smi(i: usize) -> Option<Gpu> {
    let id = smi_id(i)?;
    let query = |fields: &str| {
        let out = std::process::Command::new("nvidia-smi")
            .args([&format!("--query-gpu={fields}"), "--format=csv,noheader,nounits", "-i", &id])
            .output()
            .ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("").to_string())
    };
    let line = query("name,driver_version,memory.total")?;
    let mut parts = line.split(',').map(str::trim);
    let name = parts.next().filter(|s| !s.is_empty())?.to_string();
    let driver = parts.next().unwrap_or("").to_string();
    let memory_bytes = parts.next().and_then(|m| m.parse::<u64>().ok()).map(|mib| mib * 1024 * 1024);
    // Older drivers do not know `compute_cap`: a separate query so the rest survives.
    let compute_capability = query("compute_cap").map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    Some(Gpu { name, driver, memory_bytes, compute_capability })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpu_state_and_other_processes_are_read_from_nvidia_smi_csv() {
        let mut c = RunConditions::default();
        gpu_state("P8, 1980, 1755, 700.00, 700.00, Default\n", &mut c);
        assert_eq!(c.gpu_performance_state.as_deref(), Some("P8"));
        assert_eq!((c.gpu_max_sm_clock_mhz, c.gpu_application_sm_clock_mhz), (Some(1980), Some(1755)));
        assert_eq!((c.gpu_power_limit_w, c.gpu_default_power_limit_w), (Some(700.0), Some(700.0)));
        assert_eq!(c.gpu_compute_mode.as_deref(), Some("Default"));
        // What a driver does not report is absent, never 0.
        let mut c = RunConditions::default();
        gpu_state("P0, [N/A], [Not Supported], 300.00, , Exclusive_Process", &mut c);
        assert_eq!((c.gpu_max_sm_clock_mhz, c.gpu_application_sm_clock_mhz), (None, None));
        assert_eq!((c.gpu_power_limit_w, c.gpu_default_power_limit_w), (Some(300.0), None));
        assert_eq!(c.gpu_compute_mode.as_deref(), Some("Exclusive_Process"));
        // This process is not another; memory in MiB.
        assert_eq!(other_processes("4242, 1024\n77, 512\n", 77), (Some(1), Some(1024 * 1024 * 1024)));
        assert_eq!(other_processes("", 77), (Some(0), Some(0)));
        assert_eq!(other_processes("No running processes found\n", 77), (Some(0), Some(0)));
        assert_eq!(load_average("0.52 0.58 0.59 1/389 12345\n"), Some(0.52));
        assert_eq!(load_average("garbage"), None);
    }

    #[test]
    fn a_cpu_execution_records_the_hosts_load() {
        let c = conditions(DeviceSpec::Cpu);
        if std::path::Path::new("/proc/loadavg").exists() {
            assert!(c.load_average_1m.is_some_and(|l| l >= 0.0), "{c:?}");
        }
        assert!(c.logical_cpus.is_some_and(|n| n >= 1));
        assert_eq!(c.gpu_performance_state, None, "no GPU facts on the CPU");
    }
}
