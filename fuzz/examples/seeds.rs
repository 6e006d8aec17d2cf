//! Writes the committed seed corpus, fuzz/corpus/<target>/<name>, from the proxy's own encoders
//! and a few hand-written peer answers: `cargo run --example seeds` in fuzz/ (what
//! `fuzz/run.sh seeds` runs). Deterministic (fixed generator seeds), a few KB per target.
//! The fuzzers never write here: their growing corpora live in fuzz/work/ (not committed).

use std::fs;
use std::path::Path;

use tg_ws_proxy::dns::wire::encode_query;
use tg_ws_proxy::mtproto::faketls::client::client_hello;
use tg_ws_proxy::mtproto::framing;
use tg_ws_proxy::mtproto::obfs2::{self, Tag};
use tg_ws_proxy::mtproto::packet;
use tg_ws_proxy::net::wsframe::{apply_mask, format_header, Header, Opcode, MAX_HEADER};
use tg_ws_proxy::rng::Rng;

const TAGS: [Tag; 3] = [Tag::Abridged, Tag::Intermediate, Tag::PaddedIntermediate];
const NONCE: [u8; 16] = *b"0123456789abcdef";
const SECRET: [u8; 16] = [0x11; 16];

fn put(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new("corpus").join(target);
    fs::create_dir_all(&dir).expect("create corpus dir");
    fs::write(dir.join(name), bytes).expect("write seed");
}

fn rng(n: u8) -> Rng {
    Rng::from_seed([n; 48])
}

/// A server→client (unmasked) or client→server (masked) frame.
fn frame(opcode: Opcode, fin: bool, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let h = Header {
        fin,
        opcode,
        mask,
        len: payload.len() as u64,
    };
    let mut hdr = [0u8; MAX_HEADER];
    let n = format_header(&h, &mut hdr);
    let mut out = hdr[..n].to_vec();
    let start = out.len();
    out.extend_from_slice(payload);
    if let Some(m) = mask {
        apply_mask(&mut out[start..], m, 0);
    }
    out
}

fn with(mode: u8, seed: u8, data: &[u8]) -> Vec<u8> {
    let mut v = vec![mode, seed];
    v.extend_from_slice(data);
    v
}

fn main() {
    let req = packet::req_pq_multi(&NONCE, packet::msg_id(1_700_000_000_000));
    let res = packet::res_pq(
        &NONCE,
        b"server-nonce-16b",
        packet::msg_id(1_700_000_000_000) | 1,
    );

    // obfs2_init: init ‖ secret, for each transport; a raw relay init; media and test DCs.
    for (i, tag) in TAGS.iter().enumerate() {
        let ini = obfs2::initiate(*tag, 2, Some(&SECRET), &mut rng(i as u8));
        let mut v = ini.init.to_vec();
        v.extend_from_slice(&SECRET);
        put("obfs2_init", &format!("secret-{}", tag.name()), &v);
    }
    put(
        "obfs2_init",
        "raw",
        &obfs2::initiate(Tag::Intermediate, -4, None, &mut rng(9)).init,
    );
    let ini = obfs2::initiate(Tag::Abridged, 10_002, Some(&SECRET), &mut rng(10));
    let mut v = ini.init.to_vec();
    v.extend_from_slice(&[0x22; 16]);
    v.extend_from_slice(&SECRET);
    put("obfs2_init", "test-dc-second-secret", &v);
    put(
        "obfs2_init",
        "roundtrip-secret",
        &[0x81, 2, 0, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7],
    );

    // framing: a few packets per transport, whole and split; a long abridged header; quick-ack.
    for (i, tag) in TAGS.iter().enumerate() {
        let mut stream = Vec::new();
        for p in [&req[..], &[1, 2, 3, 4][..], &res[..]] {
            stream.extend(framing::encode(*tag, p, &mut rng(i as u8)));
        }
        put(
            "framing",
            &format!("{}-whole", tag.name()),
            &with(i as u8, 0, &stream),
        );
        put(
            "framing",
            &format!("{}-split", tag.name()),
            &with(i as u8, 7, &stream),
        );
        let long = vec![0x5au8; 0x7f * 4 + 8];
        let mut s = framing::encode(*tag, &long, &mut rng(3));
        s.truncate(s.len() - 3); // the last packet incomplete
        put(
            "framing",
            &format!("{}-long-cut", tag.name()),
            &with(i as u8, 3, &s),
        );
    }
    let mut qa = (8u32 | 0x8000_0000).to_le_bytes().to_vec();
    qa.extend_from_slice(&[9; 8]);
    put("framing", "intermediate-quickack", &with(1, 0, &qa));
    put(
        "framing",
        "abridged-zero",
        &with(0, 0, &[0x7f, 0, 0, 0, 1, 2, 3, 4]),
    );

    // ws_frame: header forms (short, 16-bit, 64-bit length; masked; control frames).
    put(
        "ws_frame",
        "binary-short",
        &with(0, 5, &frame(Opcode::Binary, true, b"abcd", None)),
    );
    put(
        "ws_frame",
        "binary-16",
        &with(0, 5, &frame(Opcode::Binary, true, &[0; 300], None)[..8]),
    );
    let mut h64 = [0u8; MAX_HEADER];
    let n = format_header(
        &Header {
            fin: false,
            opcode: Opcode::Binary,
            mask: Some([1, 2, 3, 4]),
            len: 70_000,
        },
        &mut h64,
    );
    put("ws_frame", "binary-64-masked", &with(3, 9, &h64[..n]));
    put(
        "ws_frame",
        "ping",
        &with(0, 1, &frame(Opcode::Ping, true, b"hi", None)),
    );
    put(
        "ws_frame",
        "close",
        &with(
            0,
            1,
            &frame(Opcode::Close, true, &1000u16.to_be_bytes(), None),
        ),
    );
    put(
        "ws_frame",
        "continuation",
        &with(0, 1, &frame(Opcode::Continuation, true, b"x", None)),
    );

    // ws_link, front→client (mode 0): data frames, a ping between them, fragments, a close.
    let mut front = Vec::new();
    front.extend(frame(
        Opcode::Binary,
        true,
        &framing::encode(Tag::Intermediate, &res, &mut rng(1)),
        None,
    ));
    front.extend(frame(Opcode::Ping, true, b"ping", None));
    front.extend(frame(Opcode::Binary, false, &[7; 200], None));
    front.extend(frame(Opcode::Pong, true, b"", None));
    front.extend(frame(Opcode::Continuation, true, &[8; 20], None));
    front.extend(frame(Opcode::Close, true, &1001u16.to_be_bytes(), None));
    put("ws_link", "front-whole", &with(0, 0, &front));
    put("ws_link", "front-split", &with(0, 11, &front));
    put(
        "ws_link",
        "front-big",
        &with(0, 2, &frame(Opcode::Binary, true, &[1; 1000], None)[..64]),
    );
    // ws_link, client→front (mode 1 | split << 1 | ping << 3): the client's plaintext stream.
    for (i, tag) in TAGS.iter().enumerate() {
        let mut s = Vec::new();
        s.extend(framing::encode(*tag, &req, &mut rng(2)));
        s.extend(framing::encode(*tag, &[0x33; 400], &mut rng(2)));
        put(
            "ws_link",
            &format!("client-{}", tag.name()),
            &with(1 | (i as u8) << 1, 13, &s),
        );
        put(
            "ws_link",
            &format!("client-{}-ping", tag.name()),
            &with(1 | (i as u8) << 1 | 8, 5, &s),
        );
    }
    put(
        "ws_link",
        "client-stream",
        &with(1 | 3 << 1, 17, &[0x44; 300]),
    );
    put(
        "ws_link",
        "client-unsplittable",
        &with(1 | 1 << 1, 3, &[0, 0, 0, 0, 1, 2, 3, 4, 5]),
    );

    // ws_upgrade (mode bit 0: binary subprotocol asked; bit 1: EOF after the data).
    let accept = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";
    let ok = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: binary\r\n\r\n"
    );
    put("ws_upgrade", "101-binary", &with(1, 0, ok.as_bytes()));
    put("ws_upgrade", "101-binary-split", &with(3, 9, ok.as_bytes()));
    let worker = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {accept}\r\n\r\n"
    );
    let worker = [worker.as_bytes(), &frame(Opcode::Binary, true, b"ab", None)].concat();
    put("ws_upgrade", "101-worker-with-frame", &with(0, 4, &worker));
    put("ws_upgrade", "302", &with(1, 0, b"HTTP/1.1 302 Found\r\nLocation: https://example.invalid/apiws\r\nContent-Length: 0\r\n\r\n"));
    put(
        "ws_upgrade",
        "429",
        &with(
            1,
            6,
            b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 120\r\nContent-Length: 0\r\n\r\n",
        ),
    );
    put(
        "ws_upgrade",
        "503-eof",
        &with(
            3,
            0,
            b"HTTP/1.1 503 Service Unavailable\r\nRetry-After:  7 \r\n\r\n",
        ),
    );
    put("ws_upgrade", "101-bad-key", &with(1, 0, b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: AAAA\r\n\r\n"));
    put(
        "ws_upgrade",
        "truncated-eof",
        &with(2, 0, b"HTTP/1.1 101 Switching"),
    );

    // dns_reply: a reply to our query with an A record; a CNAME chain; AAAA; NXDOMAIN; TC.
    let reply = |name: &str, qtype: u16, flags: [u8; 2], answers: &[&[u8]]| {
        let mut q = encode_query(0x1234, name, qtype).expect("query");
        q[2] = flags[0];
        q[3] = flags[1];
        q[7] = answers.len() as u8;
        for a in answers {
            q.extend_from_slice(a);
        }
        q
    };
    let a_rec: &[u8] = &[
        0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4, 149, 154, 167, 51,
    ];
    put(
        "dns_reply",
        "a",
        &reply("kws2.web.telegram.org", 1, [0x81, 0x80], &[a_rec]),
    );
    let mut cname: Vec<u8> = vec![
        0xc0, 0x0c, 0, 5, 0, 1, 0, 0, 0, 60, 0, 6, 3, b'c', b'd', b'n', 0xc0, 0x0e,
    ];
    let mut a2: Vec<u8> = vec![0xc0, 0x2b, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 10, 0, 0, 1];
    cname.append(&mut a2);
    put(
        "dns_reply",
        "cname-chain",
        &reply("a.example.org", 1, [0x81, 0x80], &[&cname]),
    );
    let aaaa: Vec<u8> = [
        &[0xc0, 0x0c, 0, 28, 0, 1, 0, 0, 1, 0, 0, 16][..],
        &[0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1][..],
    ]
    .concat();
    put(
        "dns_reply",
        "aaaa",
        &reply("v6.example.org", 28, [0x81, 0x80], &[&aaaa]),
    );
    put(
        "dns_reply",
        "nxdomain",
        &reply("no.example.org", 1, [0x81, 0x83], &[]),
    );
    put(
        "dns_reply",
        "truncated-tc",
        &reply("tc.example.org", 1, [0x83, 0x80], &[]),
    );
    put(
        "dns_reply",
        "roundtrip-name",
        b"\x12\x34\x00\x00\x0e\x10\x7f\x00\x00\x01Flora.Example.ORG",
    );

    // res_pq: nonce ‖ message.
    let mut v = NONCE.to_vec();
    v.extend_from_slice(&res);
    put("res_pq", "respq", &v);
    v.extend_from_slice(&[0xaa; 7]);
    put("res_pq", "respq-padded", &v);
    let mut v = NONCE.to_vec();
    v.extend_from_slice(&req);
    put("res_pq", "req-pq-multi", &v);

    // faketls_hello: mode ‖ record. client.rs's hello (the target's key, domain and clock),
    // as sent (mode 0) and to be re-signed with a trusted clock (mode 3).
    let mut hello = [0u8; 517];
    let mut r = rng(9);
    let (n, _) = client_hello(&mut hello, b"0123456789abcdef", "example.com", 1_800_000_000, &mut |b| {
        r.fill(b)
    });
    for (mode, name) in [(0u8, "signed"), (3, "resign-trusted")] {
        let mut v = vec![mode];
        v.extend_from_slice(&hello[..n]);
        put("faketls_hello", name, &v);
    }
    // proxy_header: v1 lines, v2 headers (INET with a TLV, INET6, LOCAL), each followed by a
    // client's first bytes.
    put("proxy_header", "v1-tcp4", b"PROXY TCP4 192.0.2.7 127.0.0.1 51000 443\r\n\xef\xef");
    put("proxy_header", "v1-tcp6", b"PROXY TCP6 2001:db8::1 ::1 65535 443\r\n");
    put("proxy_header", "v1-unknown", b"PROXY UNKNOWN ffff:: ::1 1 2\r\nGET");
    let sig = b"\r\n\r\n\0\r\nQUIT\n";
    let mut v = sig.to_vec();
    v.extend_from_slice(&[0x21, 0x11, 0, 18, 198, 51, 100, 4, 127, 0, 0, 1, 0x9c, 0x40, 1, 187]);
    v.extend_from_slice(&[0x02, 0, 3, b'a', b'.', b'b', 0x16, 0x03]);
    put("proxy_header", "v2-inet-tlv", &v);
    let mut v = sig.to_vec();
    v.extend_from_slice(&[0x21, 0x21, 0, 36]);
    v.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    v.extend_from_slice(&[0; 12]);
    v.extend_from_slice(&[0; 15]);
    v.extend_from_slice(&[1, 0, 7, 1, 187]);
    put("proxy_header", "v2-inet6", &v);
    let mut v = sig.to_vec();
    v.extend_from_slice(&[0x20, 0x00, 0, 0]);
    put("proxy_header", "v2-local", &v);

    // tls_record: [mode, split seed, client records…]: CCS then application data, split and
    // whole; a record cut short; an alert after data; an empty and an oversized record.
    let mut recs = vec![0x14, 0x03, 0x03, 0x00, 0x01, 0x01];
    for (i, len) in [64usize, 1, 300].into_iter().enumerate() {
        recs.extend_from_slice(&[0x17, 0x03, 0x03]);
        recs.extend_from_slice(&(len as u16).to_be_bytes());
        recs.extend((0..len).map(|j| (i * 31 + j) as u8));
    }
    put("tls_record", "ccs-appdata-whole", &with(0, 0, &recs));
    put("tls_record", "ccs-appdata-split", &with(3, 7, &recs));
    put(
        "tls_record",
        "cut-short",
        &with(1, 5, &recs[..recs.len() - 100]),
    );
    let mut alert = recs[..6 + 5 + 64].to_vec();
    alert.extend_from_slice(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x01, 0x00]);
    put("tls_record", "alert-after-data", &with(2, 3, &alert));
    put(
        "tls_record",
        "empty-appdata",
        &with(0, 1, &[0x17, 0x03, 0x03, 0x00, 0x00]),
    );
    put(
        "tls_record",
        "oversized",
        &with(9, 2, &[0x17, 0x03, 0x03, 0x41, 0x01, 0xaa]),
    );
}
