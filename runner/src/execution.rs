//! Where this process runs, for a bundle's provenance: host, device (GPU name, memory and driver from
//! `nvidia-smi` when it is there), shard and SLURM job. Facts that cannot be read are absent, never guessed.

use schema::grid::DeviceSpec;
use schema::{DeviceInfo, Execution, ShardInfo, SlurmInfo};

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
    }
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

/// Queries `nvidia-smi` for CUDA ordinal `i`, mapped through `CUDA_VISIBLE_DEVICES` (SLURM sets it per job).
fn nvidia_smi(i: usize) -> Option<Gpu> {
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let id = match visible.as_deref().map(|v| v.split(',').map(str::trim).collect::<Vec<_>>()) {
        Some(list) if !list.is_empty() && !list[0].is_empty() => list.get(i)?.to_string(),
        _ => i.to_string(),
    };
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
