//! The probe's reply parser (src/mtproto/packet.rs): `resPQ` from a DC (or whatever answers on
//! a route being probed), and `req_pq_multi` as the fake DC reads it.
//!
//! Input: `nonce[16] ‖ message…`. `parse_res_pq(message, nonce)` and `parse_req_pq_multi`
//! must not panic, and what they return must fit in the message. Then round trips with the
//! input as parameters: `res_pq` / `req_pq_multi` built from it parse back to the same values,
//! also with trailing bytes (padded intermediate padding) after them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tg_ws_proxy::mtproto::packet::{parse_req_pq_multi, parse_res_pq, req_pq_multi, res_pq};

fuzz_target!(|raw: &[u8]| {
    let Some(n) = raw.get(..16) else { return };
    let nonce: [u8; 16] = n.try_into().expect("16 bytes");
    let msg = &raw[16..];
    if let Ok(r) = parse_res_pq(msg, &nonce) {
        assert!(20 + 4 + 32 + r.pq.len() + 8 + 8 * r.fingerprints.len() <= msg.len());
    }
    if parse_req_pq_multi(msg).is_some() {
        assert!(msg.len() >= 40);
    }

    let mut server_nonce = [0u8; 16];
    let k = msg.len().min(16);
    server_nonce[..k].copy_from_slice(&msg[..k]);
    let mut id = [0u8; 8];
    let rest = msg.get(16..).unwrap_or(&[]);
    let m = rest.len().min(8);
    id[..m].copy_from_slice(&rest[..m]);
    let msg_id = u64::from_le_bytes(id);
    let tail = msg.get(24..).unwrap_or(&[]);
    let tail = &tail[..tail.len().min(15)];

    let mut reply = res_pq(&nonce, &server_nonce, msg_id);
    reply.extend_from_slice(tail);
    let r = parse_res_pq(&reply, &nonce).expect("our resPQ parses");
    assert_eq!(r.server_nonce, server_nonce);
    assert_eq!(r.pq.len(), 8);
    assert_eq!(r.fingerprints.len(), 1);
    let mut other = nonce;
    other[0] ^= 1;
    assert!(
        parse_res_pq(&reply, &other).is_err(),
        "another nonce is refused"
    );

    let mut req = req_pq_multi(&nonce, msg_id);
    req.extend_from_slice(tail);
    assert_eq!(parse_req_pq_multi(&req), Some(nonce));
});
