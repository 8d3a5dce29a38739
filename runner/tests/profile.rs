//! `bench-kernels --profile` on the CPU: every part of the forward is timed and its ops counted, the parts'
//! FLOPs add up to the roofline's, and the leaner forward dispatches at most the ops its design allows.

use metrics::roofline;

use crate::assert_exit;
use crate::measure::SMALL;
use crate::util::{Sandbox, stdout};

fn parts(profile: &serde_json::Value) -> Vec<(String, serde_json::Value)> {
    profile["parts"]
        .as_array()
        .expect("parts")
        .iter()
        .map(|p| (p["part"].as_str().expect("part name").to_string(), p.clone()))
        .collect()
}

#[test]
fn bench_kernels_profile_times_every_part_of_both_forwards() {
    let sb = Sandbox::new();
    // The tiny preset (2 layers) at `bench-kernels`' quick sizes: B 2, N 64, 4 decode tokens, a block of 8.
    let mut args = vec!["bench-kernels", "--profile", "--json"];
    args.extend_from_slice(&SMALL);
    let out = sb.cmd(&args);
    assert_exit!(out, 0);
    let r: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json report");
    let layers = r["decode"]["shape"]["layers"].as_u64().expect("layers");
    assert_eq!(layers, 2, "the tiny preset");
    for (phase, key) in [("decode", "decode_profile"), ("llada_step", "llada_step_profile")] {
        let p = &r[key];
        let parts = parts(p);
        let names: Vec<&str> = parts.iter().map(|(n, _)| n.as_str()).collect();
        let want = vec![
            "embed",
            "norm",
            "qkv_proj",
            "rope",
            "cache_write",
            "scores",
            "softmax",
            "attn_values",
            "out_proj",
            "gate_up",
            "activation",
            "down",
            "residual",
            "lm_head",
            "selection",
        ];
        assert_eq!(names, want, "{phase}: {p}");
        for (name, part) in &parts {
            assert!(part["ops"].as_u64().is_some_and(|o| o >= 1), "{phase}.{name}: {part}");
            assert!(part["ms"].as_f64().is_some_and(|m| m >= 0.0 && m.is_finite()), "{phase}.{name}: {part}");
            // Matrix products carry FLOPs and a rate; element-wise parts neither.
            let matmul = ["qkv_proj", "scores", "attn_values", "out_proj", "gate_up", "down", "lm_head"]
                .contains(&name.as_str());
            assert_eq!(part["flops"].as_u64().is_some_and(|f| f > 0), matmul, "{phase}.{name}: {part}");
            assert_eq!(part["flops_per_s"].is_number(), matmul, "{phase}.{name}: {part}");
        }
        let sum_ms: f64 = parts.iter().map(|(_, p)| p["ms"].as_f64().unwrap()).sum();
        let profiled = p["profiled_ms"].as_f64().expect("profiled_ms");
        assert!((sum_ms - profiled).abs() <= 1e-9 * profiled.max(1.0), "{phase}: {sum_ms} vs {profiled}");
        assert_eq!(p["unprofiled_ms"], r[phase]["ms"], "{phase}");
        let ops: u64 = parts.iter().map(|(_, p)| p["ops"].as_u64().unwrap()).sum();
        assert_eq!(p["ops"].as_u64(), Some(ops), "{phase}");
    }
    // The step's parts add up to the roofline's FLOPs of the same forward (B 2, N 64, logits for 8 positions).
    let shape: schema::ModelShape = serde_json::from_value(r["llada_step"]["shape"].clone()).expect("shape");
    let f = roofline::Forward { batch: 2, tokens: 64, context: 64, logits: 8 };
    let flops: u64 = parts(&r["llada_step_profile"]).iter().map(|(_, p)| p["flops"].as_u64().unwrap()).sum();
    assert_eq!(flops, roofline::forward_flops(&shape, f));
    // A decode token of the leaner forward (f32 on the CPU, B 1): per layer two norms, the q/k/v projection,
    // RoPE of q and k, the two cache writes, the scale, scores, softmax, attention x values, the output
    // projection, gate/up, SwiGLU, down and two residuals (17); then the embedding, the final norm, the LM head,
    // the greedy choice. The forward this replaced dispatched 23 a layer (separate q/k/v and gate/up
    // projections, a separate SwiGLU multiply, RoPE and RMSNorm in two ops each).
    let decode_ops = r["decode_profile"]["ops"].as_u64().expect("ops");
    assert!(decode_ops <= 17 * layers + 4, "{decode_ops} ops per decode token: {}", r["decode_profile"]);
    // The text report prints the table.
    let text_args: Vec<&str> = args.iter().copied().filter(|a| *a != "--json").collect();
    let out = sb.cmd(&text_args);
    assert_exit!(out, 0);
    let text = stdout(&out);
    for want in ["AR decode token, part by part", "LLaDA step, part by part", "qkv_proj", "the probe costs", "ceilings"]
    {
        assert!(text.contains(want), "{want:?} in\n{text}");
    }
}
