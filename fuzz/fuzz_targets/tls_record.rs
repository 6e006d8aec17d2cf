//! The fake-TLS record layer after the handshake (src/mtproto/faketls/record.rs): the client's
//! records unwrapped in place as they stream in, and ours framed.
//!
//! Input: `[mode, split seed, stream…]`. The stream is fed to a `RecordReader` in chunks (the
//! seed picks the split) and must unwrap as a walk over the whole stream written here says:
//! application-data payload in order (a record cut short by the end of the stream gives what
//! arrived), change_cipher_spec skipped, and the first bad header (type, version major, empty
//! application data, over MAX_RECORD_IN, a CCS record past MAX_CCS_RUN in a row) the same
//! error; the payload handed out before an error is a prefix of the walk's. Then the stream
//! framed by a `RecordWriter` (offers of `mode`-picked size, a sink taking seed-picked amounts)
//! parses back to itself in records of 1..=MAX_PAYLOAD.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tg_ws_proxy::mtproto::faketls::record::{
    RecordError, RecordReader, RecordWriter, MAX_CCS_RUN,
};
use tg_ws_proxy::mtproto::faketls::{
    CT_APPDATA, CT_CCS, MAX_PAYLOAD, MAX_RECORD_IN, RECORD_HEADER,
};
use tg_ws_proxy_fuzz::{chunks, Input};

/// The reference: payload of the whole stream, and the first error.
fn walk(data: &[u8]) -> (Vec<u8>, Option<RecordError>) {
    let (mut out, mut at, mut ccs_run) = (Vec::new(), 0, 0);
    while data.len() - at >= RECORD_HEADER {
        let h = &data[at..at + RECORD_HEADER];
        let len = usize::from(u16::from_be_bytes([h[3], h[4]]));
        let err = if h[0] != CT_APPDATA && h[0] != CT_CCS {
            Some(RecordError::UnexpectedType(h[0]))
        } else if h[1] != 3 {
            Some(RecordError::BadVersion(h[1], h[2]))
        } else if len > MAX_RECORD_IN {
            Some(RecordError::TooLong(len))
        } else if h[0] == CT_APPDATA && len == 0 {
            Some(RecordError::Empty)
        } else if h[0] == CT_CCS && ccs_run == MAX_CCS_RUN {
            Some(RecordError::CcsFlood)
        } else {
            None
        };
        if err.is_some() {
            return (out, err);
        }
        let body = &data[at + RECORD_HEADER..(at + RECORD_HEADER + len).min(data.len())];
        if h[0] == CT_APPDATA {
            out.extend_from_slice(body);
            ccs_run = 0;
        } else {
            ccs_run += 1;
        }
        at += RECORD_HEADER + body.len();
    }
    (out, None)
}

fuzz_target!(|raw: &[u8]| {
    let Some(inp) = Input::parse(raw) else { return };
    let data = inp.data;

    let mut reader = RecordReader::new();
    let (mut got, mut err) = (Vec::new(), None);
    for c in chunks(data, inp.seed) {
        let mut buf = c.to_vec();
        match reader.unwrap_in_place(&mut buf, c.len()) {
            Ok(k) => {
                assert!(k <= c.len());
                got.extend_from_slice(&buf[..k]);
            }
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    let (want, want_err) = walk(data);
    assert_eq!(err, want_err);
    if err.is_some() {
        assert!(
            want.starts_with(&got),
            "payload before the error is the walk's"
        );
        let mut again = [0x17, 3, 3, 0, 1, 0];
        assert_eq!(
            reader.unwrap_in_place(&mut again, 6),
            Err(err.unwrap()),
            "sticky"
        );
    } else {
        assert_eq!(got, want);
    }

    // Framing: offers of 1..=65536 bytes, a sink taking 1..=64 bytes per call (or all).
    let offer = 1 + usize::from(inp.mode) * 257;
    let mut writer = RecordWriter::new();
    let (mut wire, mut at) = (Vec::new(), 0);
    let mut caps = chunks(data, inp.seed).into_iter().map(<[u8]>::len).cycle();
    while at < data.len() {
        let end = (at + offer).min(data.len());
        let (header, take) = writer.next(end - at);
        assert!(take >= 1 && take <= MAX_PAYLOAD);
        let mut out = header.to_vec();
        out.extend_from_slice(&data[at..at + take]);
        let n = if inp.seed == 0 {
            out.len()
        } else {
            caps.next().unwrap_or(1).min(out.len())
        };
        wire.extend_from_slice(&out[..n]);
        at += writer.wrote(n);
    }
    assert!(writer.at_boundary());
    let mut sizes_ok = true;
    let mut p = 0;
    while p < wire.len() {
        let len = usize::from(u16::from_be_bytes([wire[p + 3], wire[p + 4]]));
        sizes_ok &= wire[p] == CT_APPDATA && (1..=MAX_PAYLOAD).contains(&len);
        p += RECORD_HEADER + len;
    }
    assert!(
        sizes_ok && p == wire.len(),
        "records of 1..=MAX_PAYLOAD, whole"
    );
    let mut back = RecordReader::new();
    let n = wire.len();
    let k = back
        .unwrap_in_place(&mut wire, n)
        .expect("our records unwrap");
    assert_eq!(&wire[..k], data);
});
