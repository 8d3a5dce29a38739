//! Facts about the machine for a bundle's provenance: host, CPU, memory, peak resident memory.
//! Facts that cannot be read are `None`, never guessed.

/// Host name, from the kernel.
pub fn host() -> Option<String> {
    read_trim("/proc/sys/kernel/hostname").or_else(|| std::env::var("HOSTNAME").ok()).filter(|h| !h.is_empty())
}

/// CPU model name.
pub fn cpu_name() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// Total system memory in bytes.
pub fn memory_bytes() -> Option<u64> {
    proc_kib("/proc/meminfo", "MemTotal:")
}

/// Memory this process can still allocate, in bytes: the system's `MemAvailable`, or less where a cgroup (a
/// container, a SLURM job) limits the process (cgroup v2 `memory.max` - `memory.current`).
pub fn available_memory_bytes() -> Option<u64> {
    let system = proc_kib("/proc/meminfo", "MemAvailable:")?;
    let cgroup = (|| {
        let rel = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let path = rel.lines().find_map(|l| l.strip_prefix("0::"))?.trim().to_string();
        let dir = std::path::Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
        let max: u64 = read_trim(dir.join("memory.max").to_str()?)?.parse().ok()?;
        let current: u64 = read_trim(dir.join("memory.current").to_str()?)?.parse().ok()?;
        Some(max.saturating_sub(current))
    })();
    Some(cgroup.map_or(system, |c| c.min(system)))
}

/// The process's peak resident set size in bytes (VmHWM) since start or the last [`reset_peak_rss`].
pub fn peak_rss_bytes() -> Option<u64> {
    proc_kib("/proc/self/status", "VmHWM:")
}

/// Resets the peak resident set size to the current one (Linux >= 4.0). Returns false if unsupported.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn proc_kib(path: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line[field.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// The git commit the binary was built from (set by build.rs), `-dirty` when its compiled sources had changes.
pub fn git_commit() -> Option<String> {
    option_env!("DLLM_BENCH_GIT_COMMIT").filter(|s| !s.is_empty()).map(str::to_string)
}

/// The compiled sources that differed from [`git_commit`] when the binary was built (set by build.rs; paths from
/// the repository's root): what `-dirty` stands for.
pub fn git_dirty() -> Vec<String> {
    option_env!("DLLM_BENCH_GIT_DIRTY")
        .unwrap_or("")
        .split('\t')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}
