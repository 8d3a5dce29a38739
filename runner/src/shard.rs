//! Deterministic sharding of a grid: `--shard I/N` gives shard I a disjoint share of the cells, balanced by
//! estimated cost rather than by count, so that the tasks of a SLURM job array finish at about the same time.
//!
//! Cost model: a cell costs about `B x NFE x N` (batch rows x forward passes x tokens per pass), with NFE = K
//! for LLaDA (every step is a full pass over N tokens) and NFE = N_out for the AR model (one prefill, then
//! N_out - 1 single-token passes; counted as N_out full-length passes, which over-weights AR decode a little:
//! it reads a KV cache of up to N tokens per step, and on GPUs decode is bound by weight reads, not tokens).
//! Warm-up and repetition counts are the same for every cell, so they cancel out. The split is the classic
//! longest-processing-time rule: cells by decreasing cost (ties: grid order) each go to the shard with the
//! least cost so far (ties: the lower index). It depends only on the config, so every array task computes
//! the same split on its own. Merging the shards (`dllm-bench merge`) restores the grid order.

use schema::{CellKey, Sampler, ShardInfo};

use crate::InputError;

/// Parses `I/N` (0 <= I < N).
pub fn parse(s: &str) -> Result<ShardInfo, InputError> {
    let bad = || {
        InputError(format!(
            "--shard {s:?}: expected I/N with 0 <= I < N, e.g. 0/4 for the first of four shards (I is 0-based)"
        ))
    };
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let index: u32 = i.trim().parse().map_err(|_| bad())?;
    let count: u32 = n.trim().parse().map_err(|_| bad())?;
    if count == 0 || index >= count {
        return Err(bad());
    }
    check_count(count, &format!("--shard {s}"))?;
    Ok(ShardInfo { index, count })
}

/// The shard of a SLURM array task, from `SLURM_ARRAY_TASK_ID`, `SLURM_ARRAY_TASK_COUNT`,
/// `SLURM_ARRAY_TASK_MIN` and `SLURM_ARRAY_TASK_STEP` (so `--array=1-4` and `--array=0-6:2` work too).
/// `None` outside an array job.
pub fn from_slurm_env(var: impl Fn(&str) -> Option<String>) -> Result<Option<ShardInfo>, InputError> {
    let (Some(id), Some(count)) = (var("SLURM_ARRAY_TASK_ID"), var("SLURM_ARRAY_TASK_COUNT")) else {
        if let Some(id) = var("SLURM_ARRAY_TASK_ID") {
            // SLURM sets both in an array task; one alone is someone's environment, which shards nothing.
            crate::say_once(format!(
                "warning: SLURM_ARRAY_TASK_ID={id} is set without SLURM_ARRAY_TASK_COUNT: not an array task, so the \
                 whole grid runs (pass --shard I/N to run one shard)"
            ));
        }
        return Ok(None);
    };
    let num = |name: &str, v: &str| {
        v.trim().parse::<u32>().map_err(|_| {
            InputError(format!(
                "{name}={v} is not a whole number, as SLURM sets it in an array task; fix: run the job as an array \
                 (sbatch --array=0-N) or pass --shard I/N, which takes the place of the SLURM variables"
            ))
        })
    };
    let id = num("SLURM_ARRAY_TASK_ID", &id)?;
    let count = num("SLURM_ARRAY_TASK_COUNT", &count)?;
    let min = match var("SLURM_ARRAY_TASK_MIN") {
        Some(v) => num("SLURM_ARRAY_TASK_MIN", &v)?,
        None => 0,
    };
    let step = match var("SLURM_ARRAY_TASK_STEP") {
        Some(v) => num("SLURM_ARRAY_TASK_STEP", &v)?.max(1),
        None => 1,
    };
    let offset = id.checked_sub(min).filter(|o| o % step == 0);
    check_count(count, "SLURM_ARRAY_TASK_COUNT")?;
    match offset.map(|o| o / step) {
        Some(index) if index < count => Ok(Some(ShardInfo { index, count })),
        _ => Err(InputError(format!(
            "cannot derive a shard from the SLURM array: task id {id}, min {min}, step {step}, count {count}; \
             fix: submit a contiguous array (e.g. --array=0-{}) or pass --shard I/N explicitly",
            count.saturating_sub(1)
        ))),
    }
}

/// A shard count within [`schema::grid::limits::SHARDS`] (the split keeps one load per shard).
pub fn check_count(count: u32, source: &str) -> Result<(), InputError> {
    let most = schema::grid::limits::SHARDS;
    if count > most {
        return Err(InputError(format!(
            "{source}: {count} shards is more than the limit {most}; fix: use fewer shards (a grid has at most a few thousand \
             cells, and a shard without cells measures nothing)"
        )));
    }
    Ok(())
}

/// The forward passes (NFE) of one generation of a cell: K for a diffusion cell, N_out for the AR model (its
/// prefill and N_out - 1 decode steps); a threshold cell, whose count is measured, at most N_out.
pub fn forwards(key: &CellKey) -> u32 {
    let nfe = match key.sampler {
        Sampler::ArGreedy => key.output_tokens,
        _ => key.steps.unwrap_or(key.output_tokens),
    };
    nfe.max(1)
}

/// Estimated relative cost of a cell: `B x NFE x N` (see the module docs).
pub fn cost(key: &CellKey) -> u64 {
    u64::from(key.batch_size) * u64::from(forwards(key)) * u64::from(key.seq_len)
}

/// The shard each cell goes to (`result[i]` for `cells[i]`), by the longest-processing-time rule.
pub fn assign(cells: &[CellKey], count: u32) -> Vec<u32> {
    let count = count.max(1) as usize;
    let mut order: Vec<usize> = (0..cells.len()).collect();
    // Stable sort: equal costs keep grid order.
    order.sort_by_key(|&i| std::cmp::Reverse(cost(&cells[i])));
    let mut load = vec![0u64; count];
    let mut out = vec![0u32; cells.len()];
    for i in order {
        let (shard, _) = load.iter().enumerate().min_by_key(|&(s, &l)| (l, s)).unwrap_or((0, &0));
        load[shard] += cost(&cells[i]);
        out[i] = shard as u32;
    }
    out
}

/// The cells of `shard` (in grid order), refused when the split has more shards than the grid has cells: the
/// longest-processing-time rule gives every shard a cell while there are at least as many cells as shards, so
/// some shard of such a split is empty, and its task would measure nothing and write an empty bundle. Every shard
/// of it is refused, not only the empty ones: the tasks of one array then fail alike, before any measures.
/// `source` names where the shard came from.
pub fn select_some(cells: &[CellKey], shard: Option<ShardInfo>, source: &str) -> Result<Vec<CellKey>, InputError> {
    let selected = select(cells, shard);
    match shard {
        Some(s) if s.count as usize > cells.len() && !cells.is_empty() => Err(InputError(format!(
            "{source}: shard {s}: {} into {} shards leaves {}; fix: {n} shards or fewer (jobs/submit.sh --shards {n}), \
             or a larger grid",
            crate::counted(cells.len(), "cell"),
            s.count,
            match selected.is_empty() {
                true => "this shard without cells".to_string(),
                false => format!("{} without cells", crate::counted(s.count as usize - cells.len(), "shard")),
            },
            n = cells.len()
        ))),
        _ => Ok(selected),
    }
}

/// Each shard's number of cells and share of the grid's estimated cost (see [`cost`]), by shard index.
pub fn loads(cells: &[CellKey], count: u32) -> Vec<(usize, f64)> {
    let owner = assign(cells, count);
    let total: u64 = cells.iter().map(cost).sum::<u64>().max(1);
    (0..count)
        .map(|s| {
            let mine = cells.iter().zip(&owner).filter(|&(_, &o)| o == s);
            let (n, c) = mine.fold((0usize, 0u64), |(n, c), (k, _)| (n + 1, c + cost(k)));
            (n, c as f64 / total as f64)
        })
        .collect()
}

/// The cells of `shard`, in grid order; all cells when `shard` is `None`.
pub fn select(cells: &[CellKey], shard: Option<ShardInfo>) -> Vec<CellKey> {
    match shard {
        None => cells.to_vec(),
        Some(s) => {
            let owner = assign(cells, s.count);
            cells.iter().zip(owner).filter(|&(_, o)| o == s.index).map(|(c, _)| c.clone()).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(sampler: Sampler, steps: Option<u32>, b: u32, n: u32) -> CellKey {
        CellKey {
            model: "m".into(),
            sampler,
            steps,
            batch_size: b,
            seq_len: n,
            prompt_tokens: n / 2,
            output_tokens: n / 2,
            block_length: steps.map(|_| n / 2),
            cache: None,
            threshold: None,
        }
    }

    #[test]
    fn parse_accepts_only_index_below_count() {
        assert_eq!(parse("2/4").expect("ok"), ShardInfo { index: 2, count: 4 });
        for bad in ["4/4", "1", "a/2", "0/0", "-1/3"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn slurm_env_handles_min_and_step() {
        fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        }
        let s = |p: &[(&str, &str)]| from_slurm_env(env(p)).expect("ok");
        assert_eq!(s(&[]), None);
        assert_eq!(s(&[("SLURM_ARRAY_TASK_ID", "3"), ("SLURM_ARRAY_TASK_COUNT", "4")]), Some(parse("3/4").unwrap()));
        let one_based = [("SLURM_ARRAY_TASK_ID", "1"), ("SLURM_ARRAY_TASK_COUNT", "4"), ("SLURM_ARRAY_TASK_MIN", "1")];
        assert_eq!(s(&one_based), Some(parse("0/4").unwrap()));
        let stepped = [
            ("SLURM_ARRAY_TASK_ID", "6"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_STEP", "2"),
        ];
        assert_eq!(s(&stepped), Some(parse("3/4").unwrap()));
        let sparse = [("SLURM_ARRAY_TASK_ID", "9"), ("SLURM_ARRAY_TASK_COUNT", "2")];
        assert!(from_slurm_env(env(&sparse)).is_err());
        // Not a number: said with the fix, the value as given; an id without a count is no array task.
        let err = from_slurm_env(env(&[("SLURM_ARRAY_TASK_ID", "abc"), ("SLURM_ARRAY_TASK_COUNT", "2")]));
        let err = err.expect_err("not a number").0;
        assert!(err.starts_with("SLURM_ARRAY_TASK_ID=abc is not a whole number") && err.contains("fix:"), "{err}");
        assert_eq!(s(&[("SLURM_ARRAY_TASK_ID", "3")]), None);
    }

    #[test]
    fn a_shard_without_cells_is_refused_and_loads_add_up() {
        let cells: Vec<CellKey> =
            [8, 16, 32].iter().map(|&k| key(Sampler::LladaLowConfidence, Some(k), 1, 64)).collect();
        for i in 0..3 {
            let got = select_some(&cells, Some(ShardInfo { index: i, count: 3 }), "--shard").expect("one each");
            assert_eq!(got.len(), 1);
        }
        let err = select_some(&cells, Some(ShardInfo { index: 3, count: 4 }), "--shard").expect_err("empty");
        assert!(err.0.contains("shard 3/4: 3 cells into 4 shards leaves this shard without cells"), "{err}");
        assert!(err.0.contains("fix: 3 shards or fewer"), "{err}");
        // The shards of that split that do get a cell are refused too: the array's tasks fail alike.
        let err = select_some(&cells, Some(ShardInfo { index: 0, count: 4 }), "--shard").expect_err("too many");
        assert!(err.0.contains("leaves 1 shard without cells"), "{err}");
        assert_eq!(select_some(&cells, None, "-").expect("all").len(), 3);
        let loads = loads(&cells, 2);
        assert_eq!(loads.iter().map(|l| l.0).sum::<usize>(), 3);
        assert!((loads.iter().map(|l| l.1).sum::<f64>() - 1.0).abs() < 1e-12, "{loads:?}");
        // K = 32 alone is 32 / 56 of the cost; 8 and 16 share the other shard.
        assert_eq!(loads[0].0, 1);
        assert!((loads[0].1 - 32.0 / 56.0).abs() < 1e-12, "{loads:?}");
    }

    #[test]
    fn shards_are_disjoint_complete_and_balanced_by_cost() {
        let mut cells = Vec::new();
        for n in [64, 128, 256] {
            for b in [1, 4] {
                cells.push(key(Sampler::ArGreedy, None, b, n));
                for k in [8, 16, 32, 64] {
                    cells.push(key(Sampler::LladaLowConfidence, Some(k), b, n));
                }
            }
        }
        for count in 1..=7 {
            let shards: Vec<Vec<CellKey>> =
                (0..count).map(|i| select(&cells, Some(ShardInfo { index: i, count }))).collect();
            let mut all: Vec<&CellKey> = shards.iter().flatten().collect();
            assert_eq!(all.len(), cells.len(), "every cell once ({count} shards)");
            all.sort();
            all.dedup();
            assert_eq!(all.len(), cells.len(), "disjoint ({count} shards)");
            let loads: Vec<u64> = shards.iter().map(|s| s.iter().map(cost).sum()).collect();
            let (max, min) = (*loads.iter().max().unwrap(), *loads.iter().min().unwrap());
            let biggest = cells.iter().map(cost).max().unwrap();
            assert!(max - min <= biggest, "LPT keeps shards within one cell's cost: {loads:?}");
            // Same answer every time: the array tasks compute it independently.
            assert_eq!(assign(&cells, count), assign(&cells, count));
        }
    }
}
