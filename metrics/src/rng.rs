//! The project's one seeded PRNG (SplitMix64) with uniform and normal draws: reproducible on every platform and
//! device, wasm included, and cheap to split into independent streams (one per tensor chunk, so synthetic weights
//! can be generated in parallel and still give the same bytes). Used for synthetic weights, LLaDA's random
//! remasking and sampling, prompt selection, and the bootstrap of [`crate::parity`].

/// SplitMix64 (Steele, Lea and Flood 2014).
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

/// One SplitMix64 output step applied to `x` (a good 64-bit mixer).
pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A seed for the named stream `name` under `seed` (FNV-1a of the name, mixed with the seed).
pub fn stream_seed(seed: u64, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    mix64(seed ^ h)
}

impl SplitMix64 {
    /// A generator starting at `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0), by multiply-shift (bias below 2^-32 for n < 2^32).
    pub fn below(&mut self, n: u32) -> u32 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u32
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in the open interval (0, 1): safe under `ln`.
    pub fn next_open01(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
    }

    /// Two independent standard normal draws (Box-Muller).
    pub fn next_normal_pair(&mut self) -> (f64, f64) {
        let r = (-2.0 * self.next_open01().ln()).sqrt();
        let t = std::f64::consts::TAU * self.next_f64();
        (r * t.cos(), r * t.sin())
    }

    /// Fills `out` with `mean + std * N(0, 1)` draws.
    pub fn fill_normal(&mut self, out: &mut [f32], mean: f32, std: f32) {
        let mut chunks = out.chunks_exact_mut(2);
        for pair in &mut chunks {
            let (a, b) = self.next_normal_pair();
            pair[0] = mean + std * a as f32;
            pair[1] = mean + std * b as f32;
        }
        for x in chunks.into_remainder() {
            *x = mean + std * self.next_normal_pair().0 as f32;
        }
    }
}
