//! Where one forward pass's time goes: the parts of [`super::Transformer::forward`], each timed and its
//! dispatched ops counted by a [`Probe`].
//!
//! Every forward runs with a probe. An idle one ([`Probe::idle`]) only counts ops (an add per op); a timing one
//! ([`Probe::timing`], `bench-kernels --profile`) marks the boundary between parts: on the CPU, whose candle ops
//! are synchronous, with the monotonic clock; on CUDA with an event recorded on candle's stream, read when the
//! forward is over ([`Probe::finish`]), so no part waits on the host. An op is one candle operation that
//! computes (one kernel launch on CUDA; a view such as a reshape, narrow or transpose of a contiguous tensor is
//! none, nor a cast to the dtype a tensor already has).

use std::collections::BTreeMap;
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use serde::Serialize;

use crate::device::EventMark;

/// A part of the forward pass (and what follows it in a generation step).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    /// Token embedding lookup.
    Embed,
    /// RMSNorms (two per layer and the final one).
    Norm,
    /// The fused q/k/v projection (with its biases).
    QkvProj,
    /// RoPE of q and k (into the attention layout).
    Rope,
    /// Values into the attention layout, keys and values into the KV cache.
    CacheWrite,
    /// q scaled and multiplied by the keys.
    Scores,
    /// The additive attention mask (padding, causality).
    Mask,
    /// Softmax over the keys.
    Softmax,
    /// Attention weights times the values, back to the hidden layout.
    AttnValues,
    /// The fused attention (`run.attention = "fused"`): scores, mask, softmax and values in one kernel.
    Attention,
    /// The attention's output projection.
    OutProj,
    /// The fused gate/up projection.
    GateUp,
    /// SwiGLU: silu(gate) * up.
    Activation,
    /// The down projection.
    Down,
    /// The two residual additions.
    Residual,
    /// The positions that get logits, and the LM head.
    LmHead,
    /// What follows the forward: the greedy choice (AR) or the LLaDA sampler's selection.
    Selection,
}

impl Part {
    /// Every part, in forward order.
    pub const ALL: [Part; 17] = [
        Part::Embed,
        Part::Norm,
        Part::QkvProj,
        Part::Rope,
        Part::CacheWrite,
        Part::Scores,
        Part::Mask,
        Part::Softmax,
        Part::AttnValues,
        Part::Attention,
        Part::OutProj,
        Part::GateUp,
        Part::Activation,
        Part::Down,
        Part::Residual,
        Part::LmHead,
        Part::Selection,
    ];

    /// The parts of a forward whose attention is candle's ops (`fused`: false) or the fused kernel: `scores`,
    /// `mask`, `softmax` and `attn_values`, or `attention` in their place.
    pub fn of_forward(fused: bool) -> impl Iterator<Item = Part> {
        const OPS: [Part; 4] = [Part::Scores, Part::Mask, Part::Softmax, Part::AttnValues];
        Part::ALL.into_iter().filter(move |p| if fused { !OPS.contains(p) } else { *p != Part::Attention })
    }

    /// The name printed and written (`snake_case`).
    pub fn name(self) -> &'static str {
        match self {
            Part::Embed => "embed",
            Part::Norm => "norm",
            Part::QkvProj => "qkv_proj",
            Part::Rope => "rope",
            Part::CacheWrite => "cache_write",
            Part::Scores => "scores",
            Part::Mask => "mask",
            Part::Softmax => "softmax",
            Part::AttnValues => "attn_values",
            Part::Attention => "attention",
            Part::OutProj => "out_proj",
            Part::GateUp => "gate_up",
            Part::Activation => "activation",
            Part::Down => "down",
            Part::Residual => "residual",
            Part::LmHead => "lm_head",
            Part::Selection => "selection",
        }
    }
}

/// What a probe gathered for one part: summed over every time the part ran since the probe was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PartTotals {
    /// Ops dispatched.
    pub ops: u64,
    /// Milliseconds (timing probes only; 0 for an idle one).
    pub ms: f64,
}

#[derive(Debug)]
enum Tick {
    Host(Instant),
    Event(EventMark),
}

/// Counts a forward's ops per part, and with [`Probe::timing`] times each part.
#[derive(Debug)]
pub struct Probe {
    /// `Some` when timing: the device the boundaries are marked on.
    device: Option<Device>,
    current: Part,
    totals: BTreeMap<Part, PartTotals>,
    /// Boundaries not yet read (CUDA): the part that starts at each mark.
    marks: Vec<(Part, Tick)>,
}

impl Probe {
    /// A probe that only counts ops.
    pub fn idle() -> Self {
        Self { device: None, current: Part::Embed, totals: BTreeMap::new(), marks: Vec::new() }
    }

    /// A probe that also times each part on `device`.
    pub fn timing(device: &Device) -> Self {
        Self { device: Some(device.clone()), ..Self::idle() }
    }

    /// Whether the probe times parts.
    pub fn is_timing(&self) -> bool {
        self.device.is_some()
    }

    /// Ends the current part and starts `part`.
    pub fn enter(&mut self, part: Part) -> candle_core::Result<()> {
        self.current = part;
        if let Some(device) = &self.device {
            let tick = match device {
                Device::Cuda(_) => Tick::Event(EventMark::record(device)?),
                _ => Tick::Host(Instant::now()),
            };
            self.marks.push((part, tick));
        }
        Ok(())
    }

    /// Counts one op of the current part and passes its result on.
    pub fn op<T>(&mut self, r: candle_core::Result<T>) -> candle_core::Result<T> {
        self.totals.entry(self.current).or_default().ops += 1;
        r
    }

    /// `t` in `dtype`, counting the cast only when there is one.
    pub fn cast(&mut self, t: &Tensor, dtype: DType) -> candle_core::Result<Tensor> {
        if t.dtype() == dtype { Ok(t.clone()) } else { self.op(t.to_dtype(dtype)) }
    }

    /// `t` contiguous, counting the copy only when there is one.
    pub fn contiguous(&mut self, t: &Tensor) -> candle_core::Result<Tensor> {
        if t.is_contiguous() { Ok(t.clone()) } else { self.op(t.contiguous()) }
    }

    /// Closes the last part (after the work queued so far) and adds every part's time to the totals.
    pub fn finish(&mut self) -> candle_core::Result<()> {
        let Some(device) = &self.device else { return Ok(()) };
        let end = match device {
            Device::Cuda(_) => Tick::Event(EventMark::record(device)?),
            _ => Tick::Host(Instant::now()),
        };
        let marks = std::mem::take(&mut self.marks);
        let mut ends = marks.iter().skip(1).map(|(_, t)| t).chain(std::iter::once(&end));
        for (part, start) in &marks {
            let Some(stop) = ends.next() else { break };
            let ms = match (start, stop) {
                (Tick::Host(a), Tick::Host(b)) => (*b - *a).as_secs_f64() * 1e3,
                (Tick::Event(a), Tick::Event(b)) => a.ms_to(b)?,
                _ => candle_core::bail!("profile: boundaries from two clocks"),
            };
            self.totals.entry(*part).or_default().ms += ms;
        }
        Ok(())
    }

    /// Ops and time per part so far (parts that dispatched nothing and took no time are left out).
    pub fn totals(&self) -> &BTreeMap<Part, PartTotals> {
        &self.totals
    }

    /// Ops dispatched so far, every part together.
    pub fn ops(&self) -> u64 {
        self.totals.values().map(|t| t.ops).sum()
    }
}
