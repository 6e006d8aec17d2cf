//! tg-ws-proxy-hot: the loops that touch every relayed byte, in a crate of their own so they can
//! be compiled at `opt-level = 3` while the rest of tg-ws-proxy is built for size (`"z"`).
//!
//! Owns: the obfuscated2 AES-256-CTR keystream ([`Aes256Ctr`], the keystream of
//! `ctr::Ctr128BE<Aes256>`, docs/protocol.md §7.2) and the WebSocket masking loop ([`xor_mask`],
//! RFC 6455 §5.3). Nothing else: no protocol logic, no I/O, no allocation (`no_std`). Its users
//! are `tg_ws_proxy::mtproto::obfs2::Cipher`, `tg_ws_proxy::rng::Rng` and
//! `tg_ws_proxy::net::wsframe::apply_mask`, which keep their public signatures; the keystream is
//! checked against the `ctr` crate in `obfs2`'s tests (this crate is not a workspace member, so
//! its users' tests are its tests).
//!
//! Why a crate (docs/design.md §9): `Ctr128BE<Aes256>` is generic code, and Rust compiles a
//! generic instantiation in the crate that names the concrete type. A profile override on
//! `aes`/`ctr` therefore does not reach the CTR loop; one on the crate that names the type does.
//! The entry points are `#[inline(never)]` so the loops are compiled here, at this crate's
//! opt-level, and never inlined back into a size-optimised caller. Fat LTO then optimises the
//! merged program once more at the root crate's `"z"`, without vectorisers, so the loops here
//! are written in 64-bit words rather than left for the vectoriser.
#![no_std]

use aes::Aes256;
use ctr::cipher::{Block, KeyIvInit, StreamCipherCore, StreamCipherSeekCore};

/// The counter-mode core: AES-256 keystream blocks for a 128-bit big-endian counter.
type Core = ctr::CtrCore<Aes256, ctr::flavors::Ctr128BE>;

/// Keystream blocks generated per step: 32 × 16 B = 512 B on the stack. The backend encrypts 8
/// at a time with AES-NI (2 or 4 with the soft AES); one call for 32 loads the round keys once
/// per 512 B instead of once per 128 B.
const PAR: usize = 32;
/// AES block size in bytes.
const BLOCK: usize = 16;

/// AES-256 in CTR mode with the whole 16-byte IV as a 128-bit big-endian counter (the
/// obfuscated2 stream cipher, docs/protocol.md §7.2): the keystream of `ctr::Ctr128BE<Aes256>`,
/// byte for byte. Encryption and decryption are the same operation. Key material never appears
/// in `Debug`. `Clone` copies the key schedule and the position (a peek at keystream ahead).
///
/// Why not `Ctr128BE::apply_keystream`: in a fat-LTO build whose root crate is at `"z"` the
/// whole program is optimised last at `"z"`, without the vectoriser, and the wrapper's
/// byte-by-byte keystream XOR then costs more than the AES-NI rounds. Here the keystream is
/// generated into a stack buffer and XORed in 64-bit words, which needs no vectoriser.
#[derive(Clone)]
pub struct Aes256Ctr {
    core: Core,
    /// The last keystream block, of which `used` bytes were consumed (16: none left).
    tail: [u8; BLOCK],
    used: usize,
}

impl Aes256Ctr {
    /// A cipher at keystream position 0 for a 32-byte key and a 16-byte initial counter.
    pub fn new(key: &[u8; 32], iv: &[u8; 16]) -> Aes256Ctr {
        Aes256Ctr {
            core: Core::new(key.into(), iv.into()),
            tail: [0; BLOCK],
            used: BLOCK,
        }
    }

    /// XORs the next `data.len()` keystream bytes into `data` in place and advances by that
    /// many bytes; any length, any split (pieces give the same result as one call). The counter
    /// wraps modulo 2^128 like `ctr::Ctr128BE`'s.
    #[inline(never)]
    pub fn apply(&mut self, data: &mut [u8]) {
        // What is left of the previous call's last keystream block.
        let n = (BLOCK - self.used).min(data.len());
        let (head, data) = data.split_at_mut(n);
        xor_into(head, &self.tail[self.used..self.used + n]);
        self.used += n;
        if data.is_empty() {
            return;
        }
        let mut ks: [Block<Core>; PAR] = Default::default();
        let mut chunks = data.chunks_exact_mut(PAR * BLOCK);
        for chunk in &mut chunks {
            self.core.write_keystream_blocks(&mut ks);
            for (d, k) in chunk.chunks_exact_mut(BLOCK).zip(ks.iter()) {
                xor_into(d, k);
            }
        }
        let rest = chunks.into_remainder();
        if rest.is_empty() {
            return;
        }
        // 1..=PAR blocks, the last one possibly partial: keep its unused keystream.
        let blocks = rest.len().div_ceil(BLOCK);
        self.core.write_keystream_blocks(&mut ks[..blocks]);
        for (d, k) in rest.chunks_mut(BLOCK).zip(ks.iter()) {
            xor_into(d, &k[..d.len()]);
        }
        self.tail.copy_from_slice(&ks[blocks - 1]);
        self.used = match rest.len() % BLOCK {
            0 => BLOCK,
            r => r,
        };
    }
}

impl Aes256Ctr {
    /// Advances the keystream by `n` bytes without producing them (the counter is moved, at most
    /// one block is generated for a partial block), as if `apply` ran over `n` bytes that are
    /// not looked at. The counter wraps modulo 2^128 like `apply`'s.
    #[inline(never)]
    pub fn skip(&mut self, n: u64) {
        let t = ((BLOCK - self.used) as u64).min(n);
        self.used += t as usize;
        let n = n - t;
        if n == 0 {
            return;
        }
        let full = u128::from(n / BLOCK as u64);
        let rem = (n % BLOCK as u64) as usize;
        let pos = self.core.get_block_pos().wrapping_add(full);
        self.core.set_block_pos(pos);
        if rem == 0 {
            self.used = BLOCK;
            return;
        }
        let mut ks: [Block<Core>; 1] = Default::default();
        self.core.write_keystream_blocks(&mut ks);
        self.tail.copy_from_slice(&ks[0]);
        self.used = rem;
    }
}

impl core::fmt::Debug for Aes256Ctr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Aes256Ctr { .. }")
    }
}

/// `data[i] ^= ks[i]` for equal-length slices, 8 bytes at a time.
#[inline(always)]
fn xor_into(data: &mut [u8], ks: &[u8]) {
    let mut d = data.chunks_exact_mut(8);
    let mut k = ks.chunks_exact(8);
    for (a, b) in (&mut d).zip(&mut k) {
        let mut x = [0u8; 8];
        let mut y = [0u8; 8];
        x.copy_from_slice(a);
        y.copy_from_slice(b);
        a.copy_from_slice(&(u64::from_ne_bytes(x) ^ u64::from_ne_bytes(y)).to_ne_bytes());
    }
    for (a, b) in d.into_remainder().iter_mut().zip(k.remainder()) {
        *a ^= b;
    }
}

/// XORs `data` with the 4-byte WebSocket masking key as if `data` started at payload offset
/// `offset` (bytes), so a payload can be (un)masked in pieces (RFC 6455 §5.3). Masking and
/// unmasking are the same operation.
#[inline(never)]
pub fn xor_mask(data: &mut [u8], mask: [u8; 4], offset: u64) {
    let shift = (offset % 4) as usize;
    let m = [
        mask[shift],
        mask[(shift + 1) % 4],
        mask[(shift + 2) % 4],
        mask[(shift + 3) % 4],
    ];
    // Byte order does not matter for XOR: from_ne_bytes and to_ne_bytes undo each other, so this
    // is the same on big-endian MIPS.
    let wide = u64::from_ne_bytes([m[0], m[1], m[2], m[3], m[0], m[1], m[2], m[3]]);
    let mut chunks = data.chunks_exact_mut(8);
    for c in &mut chunks {
        let mut a = [0u8; 8];
        a.copy_from_slice(c);
        c.copy_from_slice(&(u64::from_ne_bytes(a) ^ wide).to_ne_bytes());
    }
    // Chunks of 8 keep the key phase, so the tail starts at phase 0 of `m`.
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= m[i % 4];
    }
}
