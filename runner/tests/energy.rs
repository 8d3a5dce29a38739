//! Energy (bundle format 1.7) on the CPU: the RAPL reader against a powercap-like folder the test writes (package
//! zones summed, sub-zones and duplicates left out, the counter's wrap-around undone, every reason for no energy
//! said), a run that reads such a folder while a thread drives its counter, a real run here (no RAPL on most
//! machines and containers: the energy is absent with its reason, never 0), and `report` and `export` with their
//! energy columns. The NVML path needs a GPU: `runner/PERF.md` ("Energy") says what its check does.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use candle_core::Device;
use runner::device::energy::{Meter, RAPL_ROOT, RAPL_ROOT_ENV, Rapl, counter_delta, record};
use schema::bundle::EnergySource;
use schema::{Bundle, CellStatus};

use crate::assert_exit;
use crate::util::{Sandbox, stderr, stdout};

/// Two cells (one AR, one LLaDA) of tiny models, two repetitions each, timing only.
const CONFIG: &str = r#"
[run]
name = "energy"
device = "cpu"
dtype = "f32"
warmup = 0
repetitions = 2
seed = 0

[prompts]
source = "embedded"
count = 4

[grid]
seq_lengths = [40]
batch_sizes = [2]
steps = [4]
output_tokens = 8
block_length = 8

[[models]]
kind = "llama"
id = "test-org/energy-llama"

[models.synthetic]
preset = "tiny"
seed = 1

[[models]]
kind = "llada"
id = "test-org/energy-llada"

[models.synthetic]
preset = "tiny"
seed = 2
"#;

/// Writes a file atomically (a reader never sees it half written), as the kernel's counters read.
fn put(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

/// A powercap zone `root/id` with a name, a counter and its range.
fn zone(root: &Path, id: &str, name: &str, energy_uj: u64, range_uj: u64) -> PathBuf {
    let dir = root.join(id);
    std::fs::create_dir_all(&dir).expect("zone");
    put(&dir.join("name"), &format!("{name}\n"));
    put(&dir.join("energy_uj"), &format!("{energy_uj}\n"));
    put(&dir.join("max_energy_range_uj"), &format!("{range_uj}\n"));
    dir.join("energy_uj")
}

/// A powercap folder as Linux lays it out on a two-socket machine: the control type, two packages with their
/// core and DRAM sub-zones, the MMIO duplicate of package 0, and a platform (psys) zone.
fn powercap(root: &Path) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(root.join("intel-rapl")).expect("control type");
    put(&root.join("intel-rapl").join("enabled"), "1\n");
    let p0 = zone(root, "intel-rapl:0", "package-0", 1_000, 262_143_328_850);
    zone(root, "intel-rapl:0:0", "core", 5_000_000, 262_143_328_850);
    zone(root, "intel-rapl:0:1", "dram", 7_000_000, 65_712_999_613);
    let p1 = zone(root, "intel-rapl:1", "package-1", 900_000, 1_000_000);
    zone(root, "intel-rapl-mmio:0", "package-0", 9_000_000, 262_143_328_850);
    zone(root, "intel-rapl:2", "psys", 11_000_000, 262_143_328_850);
    (p0, p1)
}

#[test]
fn the_counter_delta_undoes_one_wrap_around() {
    assert_eq!(counter_delta(100, 350, 1_000), 250);
    assert_eq!(counter_delta(900, 50, 1_000), 150, "900 -> 1000 (the range), then 0 -> 50");
    assert_eq!(counter_delta(7, 7, 1_000), 0);
    assert_eq!(counter_delta(1_000, 0, 1_000), 0, "the top of the range is the wrap's start");
}

#[test]
fn rapl_sums_the_packages_and_undoes_their_wrap_around() {
    let dir = tempfile::tempdir().expect("temp");
    let (p0, p1) = powercap(dir.path());
    let meter = Meter::rapl(dir.path()).expect("two readable packages");
    assert_eq!(meter.source(), EnergySource::Rapl);
    let scope = meter.scope();
    assert!(scope.contains("package-0 + package-1 (intel-rapl:0, intel-rapl:1)"), "{scope}");
    assert!(!scope.contains("psys") && !scope.contains("mmio") && !scope.contains("core"), "{scope}");
    let start = meter.start(&Device::Cpu).expect("reads");
    // Package 0 uses 2.5 J; package 1 wraps: 900,000 -> 1,000,000 (its range), then 0 -> 400,000 uJ: 0.5 J.
    put(&p0, "2501000\n");
    put(&p1, "400000\n");
    // What the sub-zones and duplicates do is not added.
    put(&dir.path().join("intel-rapl:0:0").join("energy_uj"), "99999999999\n");
    put(&dir.path().join("intel-rapl-mmio:0").join("energy_uj"), "99999999999\n");
    let used = meter.finish(&Device::Cpu, &start).expect("reads");
    assert!((used.joules - (2.5 + 0.5)).abs() < 1e-9, "{used:?}");
    assert!(used.window_ms >= 0.0);
    // The same through the reader itself, reading by reading.
    let rapl = Rapl::open(dir.path()).expect("open");
    let before = rapl.read().expect("read");
    assert_eq!(before, vec![2_501_000, 400_000]);
    put(&p1, "100\n");
    assert!((rapl.joules(&before, &rapl.read().expect("read")) - 0.6001).abs() < 1e-9, "wrapped again");
    // The idle window an execution records: the counters' energy over about a second, no model loaded.
    let m = record(&Ok(meter), &Device::Cpu);
    assert_eq!((m.source, m.unavailable.as_deref()), (Some(EnergySource::Rapl), None));
    assert_eq!(m.idle_energy_j, Some(0.0), "the counters did not move while idle: a measured 0, not a gap");
    assert!(m.idle_window_ms.is_some_and(|w| w >= 1000.0), "{m:?}");
}

#[test]
fn without_readable_rapl_the_reason_is_said() {
    let dir = tempfile::tempdir().expect("temp");
    let reason = |root: &Path| Meter::rapl(root).expect_err("no energy");
    let missing = reason(&dir.path().join("nothing"));
    assert!(missing.contains("no RAPL") && missing.contains("does not exist"), "{missing}");
    assert!(reason(dir.path()).contains("has no intel-rapl:N zone"), "{}", reason(dir.path()));
    zone(dir.path(), "intel-rapl:0", "psys", 1, 10);
    let platform = reason(dir.path());
    assert!(platform.contains("no RAPL package zone") && platform.contains("intel-rapl:0 (psys)"), "{platform}");
    let p = zone(dir.path(), "intel-rapl:1", "package-0", 1, 10);
    assert!(Meter::rapl(dir.path()).is_ok());
    put(&p, "n/a\n");
    assert!(reason(dir.path()).contains("\"n/a\", not a count"), "{}", reason(dir.path()));
    put(&dir.path().join("intel-rapl:1").join("max_energy_range_uj"), "0\n");
    put(&p, "5\n");
    assert!(reason(dir.path()).contains("max_energy_range_uj is 0"), "{}", reason(dir.path()));
    // What an execution records then: the reason, no counter, no idle energy.
    let m = record(&Meter::rapl(&dir.path().join("nothing")), &Device::Cpu);
    assert_eq!((m.source, m.idle_energy_j, m.idle_window_ms), (None, None, None));
    assert_eq!(m.unavailable, Some(missing));
}

/// `dllm-bench run` of [`CONFIG`] with `rapl_root` as the powercap folder (`None`: the real one).
fn run_grid(sb: &Sandbox, rapl_root: Option<&Path>) -> (Output, PathBuf, Bundle) {
    let config = sb.write("energy.toml", CONFIG);
    let results = sb.results();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dllm-bench"));
    cmd.args(["run", "--config", config.to_str().expect("utf8"), "-o", results.to_str().expect("utf8"), "-q"])
        .current_dir(sb.path())
        .env("HF_HUB_CACHE", sb.cache())
        .env_remove("HF_HOME")
        .env_remove(runner::device::INJECT_OOM_ENV)
        .env_remove(RAPL_ROOT_ENV);
    if let Some(root) = rapl_root {
        cmd.env(RAPL_ROOT_ENV, root);
    }
    let out = cmd.output().expect("run dllm-bench");
    let path = PathBuf::from(stdout(&out).trim());
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}\n{}", path.display(), stderr(&out)));
    (out, path, schema::read_bundle(&text).expect("valid bundle"))
}

/// `dllm-bench ARGS` in the sandbox, which must succeed; its stdout.
fn cmd_ok(sb: &Sandbox, args: &[&str]) -> String {
    let out = sb.cmd(args);
    assert_exit!(out, 0);
    stdout(&out)
}

/// The export of `bundle` as JSON Lines, one object per row.
fn export_rows(sb: &Sandbox, bundle: &Path) -> Vec<serde_json::Value> {
    let out = sb.path().join("energy.jsonl");
    cmd_ok(sb, &["export", bundle.to_str().expect("utf8"), "-o", out.to_str().expect("utf8")]);
    let text = std::fs::read_to_string(&out).expect("export");
    text.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
}

/// Package 0's counter driven by a thread: 20 mJ per tick, a tick at least every millisecond (at most 20 W),
/// wrapping at 100 J (every 5 s or more) so that runs see the wrap-around.
const TICK_UJ: u64 = 20_000;
const RANGE_UJ: u64 = 100_000_000;

#[test]
fn a_cpu_run_with_rapl_records_each_repetitions_joules() {
    let sb = Sandbox::new();
    let root = sb.path().join("powercap");
    let (p0, _) = powercap(&root);
    put(&root.join("intel-rapl:0").join("max_energy_range_uj"), &format!("{RANGE_UJ}\n"));
    let stop = Arc::new(AtomicBool::new(false));
    let driver = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut uj = RANGE_UJ - 3 * TICK_UJ;
            while !stop.load(Ordering::Relaxed) {
                uj = (uj + TICK_UJ) % RANGE_UJ;
                put(&p0, &format!("{uj}\n"));
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let (out, path, b) = run_grid(&sb, Some(&root));
    stop.store(true, Ordering::Relaxed);
    driver.join().expect("the counter's thread");
    assert_exit!(out, 0);
    let exec = &b.provenance.executions[0];
    let m = exec.energy.as_ref().expect("1.7: the execution names its energy counter");
    assert_eq!((m.source, m.unavailable.as_deref()), (Some(EnergySource::Rapl), None), "{m:?}");
    assert!(m.scope.as_deref().is_some_and(|s| s.contains("package-0 + package-1")), "{m:?}");
    // No more than the thread put in (20 mJ a tick, at most one tick per ms, one more at the window's edge).
    let at_most = |window_ms: f64| TICK_UJ as f64 / 1e6 * (window_ms + 2.0);
    let (idle, idle_ms) = (m.idle_energy_j.expect("idle energy"), m.idle_window_ms.expect("idle window"));
    assert!(idle > 0.0 && idle <= at_most(idle_ms), "idle {idle} J over {idle_ms} ms");
    let mut total = 0.0;
    for c in &b.cells {
        assert_eq!(c.status, CellStatus::Ok, "{}", c.key);
        assert_eq!(c.repetitions.len(), 2);
        for r in &c.repetitions {
            let (j, ms) = (r.energy_j.expect("every repetition's joules"), r.energy_window_ms.expect("its window"));
            assert!(j >= 0.0 && j <= at_most(ms), "{}: {j} J over {ms} ms", c.key);
            assert!(ms >= r.e2e_ms, "{}: the window {ms} ms holds the run's {} ms", c.key, r.e2e_ms);
            assert_eq!(metrics::energy::joules_per_token(r), Some(j / r.output_tokens as f64));
            total += j;
        }
    }
    assert!(total > 0.0, "the driven counter moved during the runs");
    // The report: where the energy comes from, and a table of it per cell (no quality here).
    let report = cmd_ok(&sb, &["report", path.to_str().expect("utf8")]);
    assert!(report.contains("Energy: RAPL package-0 + package-1"), "{report}");
    assert!(report.contains("## Energy per cell") && report.contains("| J / token |"), "{report}");
    assert!(!report.contains("No energy"), "{report}");
    // The export: raw, per repetition and per cell, from `metrics`.
    let rows = export_rows(&sb, &path);
    assert_eq!(rows.len(), 4);
    for (row, (c, r)) in rows.iter().zip(b.cells.iter().flat_map(|c| c.repetitions.iter().map(move |r| (c, r)))) {
        assert_eq!(row["energy_j"].as_f64(), r.energy_j);
        assert_eq!(row["energy_window_ms"].as_f64(), r.energy_window_ms);
        assert_eq!(row["joules_per_token"].as_f64(), metrics::energy::joules_per_token(r));
        assert_eq!(row["joules_per_sequence"].as_f64(), metrics::energy::joules_per_sequence(r, c.key.batch_size));
        assert_eq!(row["mean_power_w"].as_f64(), metrics::energy::mean_power_w(r));
        let e = metrics::energy::cell_energy(c);
        assert_eq!(row["joules_per_token_median"].as_f64(), e.joules_per_token.map(|s| s.median));
        assert_eq!(row["energy_source"], "rapl");
        assert_eq!(row["idle_power_w"].as_f64(), metrics::energy::idle_power_w(m));
        assert!(row["energy_unavailable"].is_null(), "{row}");
    }
}

#[test]
fn a_real_cpu_run_here_records_energy_or_why_not() {
    let sb = Sandbox::new();
    let (out, path, b) = run_grid(&sb, None);
    assert_exit!(out, 0);
    let m = b.provenance.executions[0].energy.as_ref().expect("the execution says how energy was measured");
    let reps = || b.cells.iter().flat_map(|c| &c.repetitions);
    match Meter::rapl(Path::new(RAPL_ROOT)) {
        // A machine whose RAPL this user can read (root on bare metal): the energy is there.
        Ok(_) => {
            assert_eq!(m.source, Some(EnergySource::Rapl));
            assert!(reps().all(|r| r.energy_j.is_some()));
        }
        // Here (a virtual machine or a container): absent, with the reason, never 0.
        Err(reason) => {
            eprintln!("no RAPL here: {reason}");
            assert_eq!((m.source, m.unavailable.as_deref()), (None, Some(reason.as_str())), "{m:?}");
            assert!(reps().all(|r| r.energy_j.is_none() && r.energy_window_ms.is_none()));
            let text = std::fs::read_to_string(&path).expect("bundle");
            assert!(!text.contains("\"energy_j\""), "absent, not 0 or null");
            let report = cmd_ok(&sb, &["report", path.to_str().expect("utf8")]);
            assert!(report.contains("**No energy**") && report.contains(&format!("2 of 2 measured cells: {reason}")));
            for row in export_rows(&sb, &path) {
                assert!(row["energy_j"].is_null() && row["joules_per_token_median"].is_null(), "{row}");
                assert_eq!(row["energy_unavailable"].as_str(), Some(reason.as_str()));
            }
        }
    }
}

#[test]
fn report_puts_joules_per_token_beside_the_speedup_at_parity() {
    let sb = Sandbox::new();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../schema/tests/fixtures/v1.5/demo-series.json");
    let mut b = schema::read_bundle(&std::fs::read_to_string(fixture).expect("fixture")).expect("valid");
    // Every run drew 100 W; the AR cells are those with a prefill.
    for r in b.cells.iter_mut().flat_map(|c| c.repetitions.iter_mut()) {
        r.energy_j = Some(0.1 * r.e2e_ms);
        r.energy_window_ms = Some(r.e2e_ms);
    }
    let path = sb.path().join("energy.json");
    std::fs::write(&path, schema::write_bundle(&b)).expect("write");
    let report = cmd_ok(&sb, &["report", path.to_str().expect("utf8")]);
    let header = report.lines().find(|l| l.starts_with("| B |")).expect("a speedup table");
    assert!(header.contains("| J/token ") && header.contains(" at S_parity |"), "{header}");
    let records = metrics::parity::parity(&b, &metrics::parity::ParityOptions::from_config(&b).expect("quality"));
    let row = records.iter().flat_map(|r| &r.speedups).find(|s| s.diffusion_cell.is_some()).expect("a speedup");
    let median = |key: &schema::CellKey| {
        let cell = b.cells.iter().find(|c| c.key == *key).expect("cell");
        metrics::energy::cell_energy(cell).joules_per_token.expect("energy").median
    };
    let (ar, diff) = (median(&row.ar_cell), median(row.diffusion_cell.as_ref().expect("cell")));
    let line = report
        .lines()
        .find(|l| l.starts_with(&format!("| {} |", row.batch_size)) && l.contains("viable"))
        .expect("the batch size's row");
    let cols: Vec<&str> = line.split('|').map(str::trim).collect();
    let num = |s: &str| s.parse::<f64>().expect("a number");
    assert!((num(cols[5]) - ar).abs() <= ar * 0.01 + 1e-3, "{line}: AR {ar}");
    assert!((num(cols[6]) - diff).abs() <= diff * 0.01 + 1e-3, "{line}: diffusion {diff}");
    // Its bundle has no energy meter (a writer before 1.7 ...): a reason only where energy is missing, none here.
    assert!(!report.contains("**No energy**"), "{report}");
}
