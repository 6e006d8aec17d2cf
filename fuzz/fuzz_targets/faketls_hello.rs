//! The fake-TLS ClientHello (src/mtproto/faketls/): `hello::sniff`, `hello::parse` and the
//! whole verdict `gate::Gate::check`, then our answer to an accepted hello.
//!
//! Input: `mode ‖ record…`. Mode bit 0: sign the record with the target's key first (random
//! set by the digest rule, timestamp = the target's clock), so the SNI, timestamp, replay and
//! answer paths are reached; bit 1: the gate's clock is trusted (stepped once). Checked besides
//! "no panic": every prefix of 0..=5 bytes sniffs without panic and a parsed record sniffs as a
//! hello of exactly its length, with a session id ≤ 32 and a TLS 1.3 suite; an accepted hello
//! parses, names the key whose domain equals its SNI, is refused as a replay the second time,
//! and our ServerHello for it verifies with `client::check_server_hello`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tg_ws_proxy::mtproto::faketls::client::check_server_hello;
use tg_ws_proxy::mtproto::faketls::gate::{EeKey, Gate, Reject};
use tg_ws_proxy::mtproto::faketls::hello::{parse, sniff, Sniff};
use tg_ws_proxy::mtproto::faketls::server_hello::{server_hello, MAX_SERVER_HELLO};
use tg_ws_proxy::mtproto::faketls::{hmac_sha256, RANDOM_AT};

const KEY: [u8; 16] = *b"0123456789abcdef";
const NOW: u64 = 1_800_000_000;

fuzz_target!(|raw: &[u8]| {
    let Some((&mode, data)) = raw.split_first() else { return };
    let mut rec = data.to_vec();
    if mode & 1 == 1 && rec.len() >= RANDOM_AT + 32 {
        rec[RANDOM_AT..RANDOM_AT + 32].fill(0);
        let mut h = hmac_sha256(&KEY, &[&rec]);
        for (j, t) in (NOW as u32).to_le_bytes().iter().enumerate() {
            h[28 + j] ^= t;
        }
        rec[RANDOM_AT..RANDOM_AT + 32].copy_from_slice(&h);
    }
    for k in 0..=rec.len().min(5) {
        let _ = sniff(&rec[..k]);
    }
    if let Ok(h) = parse(&rec) {
        assert_eq!(sniff(&rec), Sniff::Hello { record_len: rec.len() });
        assert!(h.session_id.len() <= 32);
        assert!((0x1301..=0x1303).contains(&h.cipher));
    }
    let keys = [
        EeKey { index: 0, key: [7; 16], domain: "other.org".into() },
        EeKey { index: 1, key: KEY, domain: "example.com".into() },
    ];
    let mut gate = Gate::new(120, 16, NOW - 100, 0);
    if mode & 2 == 2 {
        gate.observe_clock(NOW, 1000);
    }
    if let Ok(acc) = gate.check(&rec, &keys, NOW, 2000) {
        let h = parse(&rec).expect("accepted hellos parse");
        assert_eq!(acc.index, 1);
        assert!(h.sni.expect("accepted hellos have SNI").eq_ignore_ascii_case(b"example.com"));
        assert_eq!(gate.check(&rec, &keys, NOW, 2001), Err(Reject::Replay));
        let mut out = vec![0u8; MAX_SERVER_HELLO];
        let mut x = 1u8;
        let n = server_hello(&mut out, &acc, &mut |b| {
            for v in b.iter_mut() {
                x = x.wrapping_mul(37).wrapping_add(11);
                *v = x;
            }
        });
        assert_eq!(check_server_hello(&out[..n], &KEY, &acc.random), Ok(n));
    }
});
