//! The process CSPRNG: an AES-256-CTR keystream keyed once from the OS (`getrandom`).
//!
//! Owns random bytes for inits, secrets, WebSocket masks, padding, DNS query ids and jitter. It
//! reads no clock and does no I/O after construction. Each owner keeps its own instance (the
//! reactor, the resolver, each applet, `cli` when it creates a secret file) and passes
//! `&mut Rng` down. It must not be used for anything that needs reseeding guarantees beyond one
//! process lifetime.

use tg_ws_proxy_hot::Aes256Ctr;

/// Cryptographically secure generator: AES-256-CTR over zeros, keyed from 48 OS random bytes
/// (32-byte key ‖ 16-byte IV).
pub struct Rng {
    ctr: Aes256Ctr,
}

impl Rng {
    /// Seeds from the operating system. Errors only if the OS has no entropy source.
    pub fn new() -> Result<Rng, getrandom::Error> {
        let mut seed = [0u8; 48];
        getrandom::getrandom(&mut seed)?;
        let rng = Rng::from_seed(seed);
        seed.fill(0);
        Ok(rng)
    }

    /// Deterministic generator for tests: key = `seed[0..32)`, IV = `seed[32..48)`; the output is
    /// exactly the AES-256-CTR (128-bit big-endian counter) keystream.
    pub fn from_seed(seed: [u8; 48]) -> Rng {
        let mut key = [0u8; 32];
        let mut iv = [0u8; 16];
        key.copy_from_slice(&seed[..32]);
        iv.copy_from_slice(&seed[32..]);
        Rng {
            ctr: Aes256Ctr::new(&key, &iv),
        }
    }

    /// Overwrites `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        buf.fill(0);
        self.ctr.apply(buf);
    }

    /// A uniform random `u32`.
    pub fn u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        self.fill(&mut b);
        u32::from_le_bytes(b)
    }

    /// A uniform random `u64`.
    pub fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        self.fill(&mut b);
        u64::from_le_bytes(b)
    }

    /// Uniform value in `[0, n)` (rejection sampling, no modulo bias). `n == 0` returns 0.
    pub fn below(&mut self, n: u32) -> u32 {
        if n == 0 {
            return 0;
        }
        // Largest multiple of n that fits in 2^32; values at or above it are redrawn.
        let zone = u64::from(u32::MAX) + 1 - ((u64::from(u32::MAX) + 1) % u64::from(n));
        loop {
            let x = u64::from(self.u32());
            if x < zone {
                return (x % u64::from(n)) as u32;
            }
        }
    }

    /// `base_ms` ± `frac_percent`% (uniform, inclusive bounds), in milliseconds. `frac_percent`
    /// above 100 is treated as 100, so the result never underflows below 0.
    pub fn jitter(&mut self, base_ms: u64, frac_percent: u32) -> u64 {
        let frac = u64::from(frac_percent.min(100));
        // Split to avoid overflow of base_ms * frac for huge bases.
        let delta = (base_ms / 100) * frac + (base_ms % 100) * frac / 100;
        if delta == 0 {
            return base_ms;
        }
        let span = delta.saturating_mul(2).saturating_add(1);
        let r = self.u64() % span;
        (base_ms - delta).saturating_add(r)
    }
}

impl std::fmt::Debug for Rng {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Rng { .. }")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeded(b: u8) -> Rng {
        Rng::from_seed([b; 48])
    }

    #[test]
    fn from_seed_is_the_aes_ctr_keystream() {
        // Key = 00..1f, IV = 20..2f; keystream computed independently with
        // `openssl enc -aes-256-ctr -K 000102..1f -iv 202122..2f` over 32 zero bytes.
        let mut seed = [0u8; 48];
        for (i, b) in seed.iter_mut().enumerate() {
            *b = i as u8;
        }
        let mut rng = Rng::from_seed(seed);
        let mut out = [0u8; 32];
        rng.fill(&mut out);
        assert_eq!(hex(&out), KAT_KEYSTREAM);
    }

    const KAT_KEYSTREAM: &str = "61a6936e4e8f101c1cc1f993b542a0d4b3b2f089cd2a435206ca05f23127a19b";

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn fill_overwrites_and_advances() {
        let mut rng = seeded(7);
        let mut a = [0xaau8; 16];
        let mut b = [0xaau8; 16];
        rng.fill(&mut a);
        rng.fill(&mut b);
        assert_ne!(a, b);
        let mut again = seeded(7);
        let mut c = [0x55u8; 16];
        again.fill(&mut c);
        assert_eq!(
            a, c,
            "output must not depend on the previous buffer contents"
        );
    }

    #[test]
    fn os_seeded_generators_differ() {
        let mut a = Rng::new().expect("OS entropy");
        let mut b = Rng::new().expect("OS entropy");
        assert_ne!((a.u64(), a.u64()), (b.u64(), b.u64()));
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut rng = seeded(1);
        let mut seen = [0u32; 7];
        for _ in 0..7000 {
            let v = rng.below(7);
            assert!(v < 7);
            seen[v as usize] += 1;
        }
        for (i, &c) in seen.iter().enumerate() {
            assert!(c > 700, "value {i} seen only {c} times");
        }
        assert_eq!(rng.below(1), 0);
        assert_eq!(rng.below(0), 0);
        for _ in 0..100 {
            assert!(rng.below(u32::MAX) < u32::MAX);
        }
    }

    #[test]
    fn jitter_bounds() {
        let mut rng = seeded(2);
        let (mut lo, mut hi) = (u64::MAX, 0);
        for _ in 0..5000 {
            let v = rng.jitter(1000, 20);
            assert!((800..=1200).contains(&v), "{v}");
            lo = lo.min(v);
            hi = hi.max(v);
        }
        assert!(lo < 820 && hi > 1180, "spread too narrow: {lo}..{hi}");
        assert_eq!(rng.jitter(1000, 0), 1000);
        assert_eq!(rng.jitter(0, 50), 0);
        for _ in 0..100 {
            assert!(rng.jitter(10, 500) <= 20);
            let big = rng.jitter(u64::MAX, 20);
            assert!(big >= u64::MAX - u64::MAX / 5 - 1);
        }
    }
}
