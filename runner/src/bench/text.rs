//! The text reports of `bench-kernels`.

use metrics::roofline;
use schema::ModelShape;

use super::{PhaseProfile, Report};

pub(super) fn shape_line(s: &ModelShape) -> String {
    format!(
        "layers {} hidden {} heads {}/{} kv ffn {} vocab {} ({:.3} B params)",
        s.layers,
        s.hidden,
        s.heads,
        s.kv_heads,
        s.intermediate,
        s.vocab,
        roofline::parameters(s) as f64 / 1e9
    )
}

/// The text report.
pub fn text(r: &Report) -> String {
    let threads = r.threads.map_or(String::new(), |t| format!(", {t} threads"));
    let d = &r.decode;
    let s = &r.llada_step;
    format!(
        "bench-kernels: {} on {}{threads}, {}, timed with {} (medians)\n\
         device copy bandwidth   {:>10.2} GB/s (read + write)\n\
         matmul rate             {:>10.2} GFLOP/s ({n}x{n}x{n}, {})\n\
         AR decode token         {:>10.3} ms  llama shape: {}\n\
         \x20                       B={} at context {}; reads {:.2} MB of weights and does {:.3} GFLOP per token\n\
         \x20                       {:.2} GB/s, {:.2} GFLOP/s; {:.2}x the bandwidth floor ({:.3} ms; target <= 1.5x)\n\
         LLaDA step              {:>10.3} ms  llada shape: {}\n\
         \x20                       B={} N={}; {:.3} GFLOP and {:.2} MB of weights per step\n\
         \x20                       {:.2} GFLOP/s = {:.0}% of the matmul rate (target >= 60%)\n\
         LLaDA selection         {:>10.3} ms  greedy, confidence f32 on the device; B={} block={} vocab={}\n\
         \x20                       {:>10.3} ms  greedy, confidence f64 (the block's logits copied to f64)\n\
         \x20                       {:>10.3} ms  temperature 1, Gumbel noise from the device{}\n\
         \x20                       {:>10.3} ms  temperature 1, Gumbel noise from the host (f64, uploaded)\n",
        r.framework,
        r.device,
        r.dtype,
        r.clock,
        r.copy_bytes_per_s / 1e9,
        r.matmul_flops_per_s / 1e9,
        r.dtype,
        d.ms,
        shape_line(&d.shape),
        d.batch,
        d.seq_len,
        d.weights_bytes as f64 / 1e6,
        d.flops as f64 / 1e9,
        d.bytes_per_s / 1e9,
        d.flops_per_s / 1e9,
        d.ratio_to_floor,
        d.ms / d.ratio_to_floor,
        s.ms,
        shape_line(&s.shape),
        s.batch,
        s.seq_len,
        s.flops as f64 / 1e9,
        s.weights_bytes as f64 / 1e6,
        s.flops_per_s / 1e9,
        100.0 * s.ratio_to_floor,
        r.llada_selection.greedy_f32_ms,
        r.llada_selection.batch,
        r.llada_selection.block,
        r.llada_selection.vocab,
        r.llada_selection.greedy_f64_ms,
        r.llada_selection.sampled_device_noise_ms,
        if r.threads.is_some() { " (the CPU's: the host stream)" } else { "" },
        r.llada_selection.sampled_host_noise_ms,
        n = r.matmul_size,
    ) + &drift_lines(r)
        + &profile_lines("AR decode token", r.decode_profile.as_ref(), r)
        + &profile_lines("LLaDA step", r.llada_step_profile.as_ref(), r)
}

/// The `--profile` table of one phase: per part its ops, time, share, bytes and FLOPs, and the achieved rates
/// beside the run's measured ceilings.
pub(super) fn profile_lines(what: &str, p: Option<&PhaseProfile>, r: &Report) -> String {
    let Some(p) = p else { return String::new() };
    let mut out = format!(
        "\n{what}, part by part ({} ops; parts summed {:.3} ms, unprofiled {:.3} ms: the probe costs {:+.1}%)\n\
         \x20 {:<12} {:>5} {:>10} {:>6} {:>10} {:>10} {:>10} {:>12}\n",
        p.ops,
        p.profiled_ms,
        p.unprofiled_ms,
        100.0 * (p.profiled_ms / p.unprofiled_ms - 1.0),
        "part",
        "ops",
        "ms",
        "share",
        "MB",
        "GFLOP",
        "GB/s",
        "GFLOP/s",
    );
    for part in &p.parts {
        let rate = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{:.2}", x / 1e9));
        out += &format!(
            "  {:<12} {:>5} {:>10.4} {:>5.1}% {:>10.3} {:>10.4} {:>10.2} {:>12}\n",
            part.part.name(),
            part.ops,
            part.ms,
            100.0 * part.ms / p.profiled_ms,
            part.bytes as f64 / 1e6,
            part.flops as f64 / 1e9,
            part.bytes_per_s / 1e9,
            rate(part.flops_per_s),
        );
    }
    out + &format!(
        "  ceilings: copy {:.2} GB/s, matmul {:.2} GFLOP/s\n",
        r.copy_bytes_per_s / 1e9,
        r.matmul_flops_per_s / 1e9
    )
}

/// The `--drift` lines of the text report.
pub(super) fn drift_lines(r: &Report) -> String {
    r.drift
        .iter()
        .map(|d| {
            format!(
                "{} against f32  {:<6} max |diff| {:.4} ({:.2}% of the largest f32 logit {:.3}), mean {:.5}; \
                 argmax agrees at {:.1}% of positions\n",
                r.dtype,
                d.model,
                d.max_abs_diff,
                100.0 * d.max_abs_diff / d.f32_max_abs,
                d.f32_max_abs,
                d.mean_abs_diff,
                100.0 * d.argmax_agreement
            )
        })
        .collect()
}
