//! Helpers shared by the fuzz targets in `fuzz_targets/`: the input layout most targets use
//! (a mode byte, a split seed, then the bytes under test) and the chunking that feeds those
//! bytes to a streaming decoder the way a socket might.
//!
//! Owns nothing of the proxy; the targets call its public parsers directly.

/// A target's input: `[mode, seed, data…]`. Shorter inputs give `None`.
pub struct Input<'a> {
    pub mode: u8,
    pub seed: u8,
    pub data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn parse(raw: &'a [u8]) -> Option<Input<'a>> {
        match raw {
            [mode, seed, data @ ..] => Some(Input {
                mode: *mode,
                seed: *seed,
                data,
            }),
            _ => None,
        }
    }
}

/// Cuts `data` into chunks whose lengths (1..=64, or the whole rest when `seed` is 0) come from
/// a small xorshift seeded by `seed`: every seed byte is a different split of the same stream.
pub fn chunks(data: &[u8], seed: u8) -> Vec<&[u8]> {
    if seed == 0 {
        return vec![data];
    }
    let mut x = u32::from(seed).wrapping_mul(0x9e37_79b9) | 1;
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let n = (1 + (x % 64) as usize).min(rest.len());
        out.push(&rest[..n]);
        rest = &rest[n..];
    }
    out
}

/// A deterministic [`tg_ws_proxy::rng::Rng`] seeded from `bytes` (zero-padded to 48).
pub fn rng_from(bytes: &[u8]) -> tg_ws_proxy::rng::Rng {
    let mut seed = [0u8; 48];
    let n = bytes.len().min(48);
    seed[..n].copy_from_slice(&bytes[..n]);
    tg_ws_proxy::rng::Rng::from_seed(seed)
}
