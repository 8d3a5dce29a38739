//! `bench-kernels --plan --json`: the shapes and the work per forward a run would use, from the arguments alone;
//! and runner/bench/torch_reference.py, which reads them instead of holding its own presets and roofline (with
//! the venv of scripts/install-deps.sh; a visible skip without it).

use std::path::PathBuf;
use std::process::Command;

use metrics::roofline::{self, Forward};
use runner::bench::part_work;
use runner::model::Part;
use runner::synth::{Preset, SynthSpec};
use schema::{ModelKind, ModelShape};
use serde_json::Value;

use crate::assert_exit;
use crate::measure::SMALL;
use crate::util::{Sandbox, stderr, stdout};

fn json(v: &Value, key: &str) -> Value {
    v.get(key).unwrap_or_else(|| panic!("no {key:?} in {v}")).clone()
}

fn u(v: &Value, key: &str) -> u64 {
    json(v, key).as_u64().unwrap_or_else(|| panic!("{key:?} is not a count in {v}"))
}

/// The shape `bench-kernels` resolves for `kind`: the preset with the overrides, as `bench_config` does
/// (`--kv-heads` is the Llama shape's: LLaDA keeps as many KV heads as heads).
fn shape(preset: Preset, kind: ModelKind, layers: usize, kv_heads: usize) -> ModelShape {
    let kv_heads = (kind == ModelKind::Llama).then_some(kv_heads);
    let spec = SynthSpec { layers: Some(layers), kv_heads, ..SynthSpec::new(preset, 0) };
    spec.model_config(kind).expect("config").shape()
}

/// `phase`'s parts: every part of the forward in order, each with `part_work`'s bytes and FLOPs on `fwd`.
fn check_parts(phase: &Value, shape: &ModelShape, fwd: Forward, cached: bool, e: u64, fused: bool) {
    let pf = json(phase, "profile_forward");
    let got = (u(&pf, "batch"), u(&pf, "tokens"), u(&pf, "context"), u(&pf, "logits"), json(&pf, "cached"));
    assert_eq!(got, (fwd.batch, fwd.tokens, fwd.context, fwd.logits, Value::Bool(cached)), "{pf}");
    let parts = json(phase, "parts");
    let parts = parts.as_array().expect("parts");
    // Candle's ops: scores, mask, softmax and values; the fused kernel: one `attention` part in their place.
    let want: Vec<Part> = Part::of_forward(fused).collect();
    assert_eq!(parts.len(), want.len(), "{parts:?}");
    let mut flops = 0;
    for (p, &part) in parts.iter().zip(want.iter()) {
        assert_eq!(json(p, "part"), part.name(), "{p}");
        assert_eq!((u(p, "bytes"), u(p, "flops")), part_work(shape, fwd, cached, e, part), "{p}");
        flops += u(p, "flops");
    }
    assert_eq!(flops, roofline::forward_flops(shape, fwd), "the parts' FLOPs add up to the forward's");
}

#[test]
fn bench_kernels_plan_prints_the_shapes_and_work_of_the_run() {
    let sb = Sandbox::new();
    let plan_args = [
        "bench-kernels",
        "--plan",
        "--json",
        "--shape",
        "small",
        "--layers",
        "3",
        "--kv-heads",
        "4",
        "--dtype",
        "bf16",
        "--batch",
        "2",
        "--decode-batch",
        "3",
        "--seq-len",
        "64",
        "--decode-tokens",
        "4",
        "--block-length",
        "8",
    ];
    let out = sb.cmd(&plan_args);
    assert_exit!(out, 0);
    let plan: Value = serde_json::from_str(&stdout(&out)).expect("plan json");
    assert_eq!(json(&plan, "dtype"), "bf16");
    assert_eq!(u(&plan, "element_bytes"), 2);
    let (decode, step) = (json(&plan, "decode"), json(&plan, "llada_step"));

    // The AR decode token: the Llama shape, its work averaged over the 4 timed positions 61..=64.
    let llama = shape(Preset::Small, ModelKind::Llama, 3, 4);
    assert_eq!(llama.layers, 3);
    assert_eq!(serde_json::from_value::<ModelShape>(json(&decode, "shape")).expect("shape"), llama);
    assert_eq!((u(&decode, "batch"), u(&decode, "seq_len")), (3, 64));
    let work: Vec<_> = (61..=64).map(|c| roofline::decode_step(&llama, 3, c, 2)).collect();
    assert_eq!(u(&decode, "weights_bytes"), work.iter().map(|w| w.weights_read_bytes).sum::<u64>() / 4);
    assert_eq!(u(&decode, "flops"), work.iter().map(|w| w.flops).sum::<u64>() / 4);
    // The profile's token: at the mean context of the timed tokens (60 + 2).
    check_parts(&decode, &llama, Forward { batch: 3, tokens: 1, context: 62, logits: 1 }, true, 2, false);

    // The LLaDA step: the LLaDA shape (no grouped queries: --kv-heads is the Llama shape's), B x N tokens,
    // logits for one block.
    let llada = shape(Preset::Small, ModelKind::Llada, 3, 4);
    assert_eq!((llada.heads, llada.kv_heads), (8, 8));
    assert_eq!(serde_json::from_value::<ModelShape>(json(&step, "shape")).expect("shape"), llada);
    assert_eq!((u(&step, "batch"), u(&step, "seq_len")), (2, 64));
    let fwd = Forward { batch: 2, tokens: 64, context: 64, logits: 8 };
    assert_eq!(u(&step, "weights_bytes"), roofline::forward_weight_bytes(&llada, fwd, 2));
    assert_eq!(u(&step, "flops"), roofline::forward_flops(&llada, fwd));
    check_parts(&step, &llada, fwd, false, 2, false);

    // With the fused attention the plan lists its one part in place of the four, with their work.
    let mut fused_args = plan_args.to_vec();
    fused_args.extend_from_slice(&["--attention", "fused"]);
    let out = sb.cmd(&fused_args);
    assert_exit!(out, 0);
    let fused: Value = serde_json::from_str(&stdout(&out)).expect("plan json");
    check_parts(&json(&fused, "llada_step"), &llada, fwd, false, 2, true);

    // The plan is what a run uses: the same work in a measured run's report, part by part in its profile.
    let mut args = vec!["bench-kernels", "--json", "--profile"];
    args.extend_from_slice(&SMALL);
    let run = sb.cmd(&args);
    assert_exit!(run, 0);
    let run: Value = serde_json::from_str(&stdout(&run)).expect("report json");
    let mut args = vec!["bench-kernels", "--plan", "--json"];
    args.extend_from_slice(&SMALL);
    let plan = sb.cmd(&args);
    assert_exit!(plan, 0);
    let plan: Value = serde_json::from_str(&stdout(&plan)).expect("plan json");
    assert_same_work(&plan, &run, "bench-kernels");

    // Refused as a run is, before anything.
    let out = sb.cmd(&["bench-kernels", "--plan", "--seq-len", "8", "--decode-tokens", "8"]);
    assert_exit!(out, 2);
    // What the device or precision cannot do is refused by --plan too, naming the flag (as the run refuses it).
    for (flags, names) in [
        (&["--cuda-graphs"][..], "--cuda-graphs"),
        (&["--attention", "cudnn"][..], "--attention cudnn"),
        (&["--drift"][..], "--drift"),
        (&["--device", "cuda", "--attention", "fused"][..], "--attention fused"),
    ] {
        let out = sb.cmd(&[&["bench-kernels", "--plan"][..], flags].concat());
        assert_exit!(out, 2);
        assert!(stderr(&out).contains(names) && stderr(&out).contains("bench-kernels:"), "{}", stderr(&out));
    }
    // A size of 0 would measure nothing and print a rate of it: refused, naming the flag.
    for flag in ["--matmul-size", "--copy-mib", "--selection-batch", "--layers", "--vocab", "--batch", "--decode-batch"]
    {
        let out = sb.cmd(&["bench-kernels", "--plan", "--shape", "tiny", flag, "0"]);
        assert_exit!(out, 2);
        assert!(stderr(&out).contains(&format!("{flag} 0: nothing would be measured")), "{}", stderr(&out));
    }
}

/// `report` (a `bench-kernels --json` or torch_reference.py output) has `plan`'s shapes, batches, work, and per
/// profiled part that the runner has its bytes and FLOPs.
fn assert_same_work(plan: &Value, report: &Value, who: &str) {
    for (phase, profile) in [("decode", "decode_profile"), ("llada_step", "llada_step_profile")] {
        let (want, got) = (json(plan, phase), json(report, phase));
        for key in ["shape", "batch", "seq_len", "weights_bytes", "flops"] {
            assert_eq!(json(&got, key), json(&want, key), "{who}: {phase}.{key}");
        }
        let parts = json(&json(report, profile), "parts");
        let mut matched = 0;
        for p in parts.as_array().expect("parts") {
            let planned = json(&want, "parts");
            let Some(w) = planned.as_array().expect("parts").iter().find(|w| w["part"] == p["part"]) else {
                continue;
            };
            assert_eq!((json(p, "bytes"), json(p, "flops")), (json(w, "bytes"), json(w, "flops")), "{who}: {p}");
            matched += 1;
        }
        assert!(matched >= 10, "{who}: {phase}: only {matched} parts carry the runner's work");
    }
}

#[test]
fn torch_reference_reads_its_shapes_and_work_from_the_runner() {
    let Some(python) =
        crate::hf_reference::hf_python_or_skip("bench_plan::torch_reference_reads_its_shapes_and_work_from_the_runner")
    else {
        return;
    };
    let sb = Sandbox::new();
    let shapes = ["--seq-len", "32", "--decode-tokens", "2", "--batch", "1", "--block-length", "4", "--layers", "1"];
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench/torch_reference.py");
    let out = Command::new(python)
        .arg(&script)
        .args(["--repetitions", "1", "--warmup", "0", "--matmul-size", "64", "--copy-mib", "1", "--profile"])
        .args(shapes)
        .current_dir(sb.path())
        .env("OMP_NUM_THREADS", "1")
        .env("DLLM_BENCH", env!("CARGO_BIN_EXE_dllm-bench"))
        .output()
        .expect("run torch_reference.py");
    assert_exit!(out, 0);
    let torch: Value = serde_json::from_str(&stdout(&out)).expect("torch_reference json");
    let mut args = vec!["bench-kernels", "--plan", "--json"];
    args.extend_from_slice(&shapes);
    let plan = sb.cmd(&args);
    assert_exit!(plan, 0);
    let plan: Value = serde_json::from_str(&stdout(&plan)).expect("plan json");
    assert_eq!(json(&json(&plan, "decode"), "shape")["layers"], 1, "--layers reaches the runner");
    assert_same_work(&plan, &torch, "torch_reference.py");

    // The keys of `bench-kernels --json --profile` (the runner's selection and drift have no PyTorch twin).
    let mut args = vec!["bench-kernels", "--json", "--profile", "--repetitions", "1", "--warmup", "0"];
    args.extend_from_slice(&["--matmul-size", "64", "--copy-mib", "1"]);
    args.extend_from_slice(&shapes);
    let run = sb.cmd(&args);
    assert_exit!(run, 0);
    let run: Value = serde_json::from_str(&stdout(&run)).expect("report json");
    let keys = |v: &Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().expect("object").keys().cloned().collect();
        k.sort();
        k
    };
    let mut runner_keys = keys(&run);
    runner_keys.retain(|k| k != "llada_selection");
    assert_eq!(keys(&torch), runner_keys);
    for phase in ["decode", "llada_step"] {
        assert_eq!(keys(&json(&torch, phase)), keys(&json(&run, phase)), "{phase}");
    }
    for profile in ["decode_profile", "llada_step_profile"] {
        assert_eq!(keys(&json(&torch, profile)), keys(&json(&run, profile)), "{profile}");
        let part = json(&torch, profile)["parts"][1].clone();
        assert_eq!(part["part"], "embed", "{part}");
        assert_eq!(keys(&part), keys(&json(&run, profile)["parts"][0]), "{profile}: a part the runner has");
    }
}
