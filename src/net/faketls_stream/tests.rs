//! [`FakeTlsStream`] over in-memory pipes (`relay::pipe`) of tiny capacities, so every record
//! boundary falls at every byte; and the whole relay core with its client side wrapped, moving
//! 1 MiB each way. Records on the app's side are made and parsed here by hand, independently of
//! `record`.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};

use super::*;
use crate::buf::RelayBuf;
use crate::mtproto::faketls::{MAX_PAYLOAD, MAX_RECORD_IN, RECORD_HEADER};
use crate::mtproto::obfs2::{accept, accept_raw, initiate, Cipher, Tag};
use crate::net::io::{read_once, write_once, Endpoint, Io};
use crate::relay::pipe::{pair, push, PipeEnd};
use crate::relay::{LinkKind, Meter, Outcome, Ready, Relay, Scratch};
use crate::rng::Rng;

/// Steps of a driver loop before a test calls it stuck.
const MAX_ROUNDS: usize = 2_000_000;

fn bulk(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed ^ (i >> 11) as u8)
        .collect()
}

/// `payload` as client records: a CCS record first, then application_data records whose
/// sizes cycle through `sizes`, with another CCS record after every third.
fn client_records(payload: &[u8], sizes: &[usize]) -> Vec<u8> {
    let mut out = vec![0x14, 0x03, 0x03, 0x00, 0x01, 0x01];
    let mut at = 0;
    for (i, &s) in sizes.iter().cycle().enumerate() {
        if at == payload.len() {
            break;
        }
        let s = s.min(payload.len() - at);
        out.extend([0x17, 0x03, 0x03]);
        out.extend((s as u16).to_be_bytes());
        out.extend(&payload[at..at + s]);
        at += s;
        if i % 3 == 2 {
            out.extend([0x14, 0x03, 0x03, 0x00, 0x01, 0x01]);
        }
    }
    out
}

/// Splits what the stream wrote into records: every one application_data, `17 03 03`, 1 to
/// MAX_PAYLOAD bytes; returns the payload and the record sizes. Panics on anything else.
fn parse_records(wire: &[u8]) -> (Vec<u8>, Vec<usize>) {
    let (mut payload, mut sizes, mut at) = (Vec::new(), Vec::new(), 0);
    while at < wire.len() {
        assert!(wire.len() - at >= RECORD_HEADER, "a whole header at {at}");
        assert_eq!(&wire[at..at + 3], &[0x17, 0x03, 0x03], "header at {at}");
        let len = usize::from(u16::from_be_bytes([wire[at + 3], wire[at + 4]]));
        assert!((1..=MAX_PAYLOAD).contains(&len), "record length {len}");
        assert!(
            wire.len() - at - RECORD_HEADER >= len,
            "a whole record at {at}"
        );
        payload.extend(&wire[at + RECORD_HEADER..at + RECORD_HEADER + len]);
        sizes.push(len);
        at += RECORD_HEADER + len;
    }
    (payload, sizes)
}

/// Reads everything waiting at `end` into `out`; true if anything moved.
fn drain(end: &mut PipeEnd, out: &mut Vec<u8>) -> bool {
    let mut buf = [0u8; 4096];
    let mut moved = false;
    while let Ok(n @ 1..) = end.read(&mut buf) {
        out.extend(&buf[..n]);
        moved = true;
    }
    moved
}

#[test]
fn writes_become_records_at_every_pipe_capacity() {
    let payload = bulk(40_000, 1);
    for cap in [1, 3, 7, 70_000] {
        for offered in [1, 5, 999, 40_000] {
            let (a, mut peer) = pair(cap, cap);
            let mut s = FakeTlsStream::new(a);
            let (mut at, mut wire, mut saw_backlog) = (0, Vec::new(), false);
            for _ in 0..MAX_ROUNDS {
                if at == payload.len() && !s.has_backlog() {
                    break;
                }
                if s.has_backlog() {
                    saw_backlog = true;
                    // The rest of the header goes first, alone.
                    let flushed = s.flush_backlog().expect("flush");
                    assert_eq!(flushed, !s.has_backlog());
                } else {
                    let end = (at + offered).min(payload.len());
                    match write_once(&mut s, &payload[at..end]) {
                        Io::Done(n) => at += n,
                        Io::Blocked => {}
                        other => panic!("write: {other:?}"),
                    }
                }
                drain(&mut peer, &mut wire);
            }
            assert_eq!(at, payload.len(), "cap {cap} offered {offered}");
            let (got, sizes) = parse_records(&wire);
            assert_eq!(got, payload, "cap {cap} offered {offered}");
            assert!(
                sizes.iter().all(|&n| n <= offered.min(MAX_PAYLOAD)),
                "cap {cap}"
            );
            if cap == 3 {
                assert!(saw_backlog, "a 3-byte pipe splits every header");
            }
        }
    }
}

/// An endpoint over a pipe end that counts the write calls it gets: the slices of each
/// `write_vectored`, and plain `write`s.
struct Counting {
    inner: PipeEnd,
    vectored: Vec<usize>,
    writes: usize,
}

impl Read for Counting {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf)
    }
}

impl Write for Counting {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.writes += 1;
        self.inner.write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.vectored.push(bufs.len());
        self.inner.write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Endpoint for Counting {
    fn shutdown_write(&mut self) -> io::Result<()> {
        self.inner.shutdown_write()
    }
}

#[test]
fn a_64_kib_write_leaves_as_four_records_in_one_vectored_call() {
    let (a, mut peer) = pair(1 << 20, 1 << 20);
    let mut s = FakeTlsStream::new(Counting {
        inner: a,
        vectored: Vec::new(),
        writes: 0,
    });
    let payload = bulk(4 * MAX_PAYLOAD, 2);
    assert_eq!(s.write(&payload).unwrap(), 4 * MAX_PAYLOAD);
    assert_eq!(s.inner.vectored, [8], "one call, 4 headers and 4 payloads");
    let mut wire = Vec::new();
    drain(&mut peer, &mut wire);
    assert_eq!(wire.len(), 4 * (RECORD_HEADER + MAX_PAYLOAD));
    assert_eq!(parse_records(&wire), (payload, vec![MAX_PAYLOAD; 4]));
    // More than four records' worth: four go now, the rest in the next call.
    let payload = bulk(5 * MAX_PAYLOAD + 10, 3);
    assert_eq!(s.write(&payload).unwrap(), 4 * MAX_PAYLOAD);
    assert_eq!(
        s.write(&payload[4 * MAX_PAYLOAD..]).unwrap(),
        MAX_PAYLOAD + 10
    );
    assert_eq!(s.inner.vectored, [8, 8, 4]);
    let mut wire = Vec::new();
    drain(&mut peer, &mut wire);
    let sizes = vec![
        MAX_PAYLOAD,
        MAX_PAYLOAD,
        MAX_PAYLOAD,
        MAX_PAYLOAD,
        MAX_PAYLOAD,
        10,
    ];
    assert_eq!(parse_records(&wire), (payload, sizes));
    assert_eq!(s.write(&[]).unwrap(), 0, "an empty write sends no record");
    assert_eq!(peer.pending(), 0);
    assert_eq!((s.inner.vectored.len(), s.inner.writes), (3, 0));
}

/// A sink that takes at most `budget` more bytes across a call's slices, as `writev` does,
/// then refuses with `WouldBlock`; keeps what it took.
struct Budget {
    wire: Vec<u8>,
    budget: usize,
}

impl Read for Budget {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }
}

impl Write for Budget {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut n = 0;
        for b in bufs {
            let take = b.len().min(self.budget - n);
            self.wire.extend(&b[..take]);
            n += take;
        }
        self.budget -= n;
        if n == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Endpoint for Budget {
    fn shutdown_write(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_three_record_write_cut_at_every_byte_carries_on_as_exact_records() {
    let sizes = [MAX_PAYLOAD, MAX_PAYLOAD, 1000];
    let payload = bulk(sizes.iter().sum(), 4);
    let total = payload.len() + sizes.len() * RECORD_HEADER;
    // Where each record's header starts on the wire.
    let starts: Vec<usize> = (0..sizes.len())
        .map(|i| sizes[..i].iter().map(|s| s + RECORD_HEADER).sum())
        .collect();
    for k in 0..=total {
        // What the first k wire bytes hold: payload bytes, and whether they end inside a header.
        let (mut in_payload, mut in_header) = (0, false);
        for (&at, &len) in starts.iter().zip(&sizes) {
            if k > at {
                let into = k - at;
                in_payload += into.saturating_sub(RECORD_HEADER).min(len);
                in_header |= into < RECORD_HEADER;
            }
        }
        let mut s = FakeTlsStream::new(Budget {
            wire: Vec::new(),
            budget: k,
        });
        let first = s.write(&payload);
        match &first {
            Ok(n) => assert_eq!(*n, in_payload, "k {k}"),
            Err(e) => {
                assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "k {k}");
                assert_eq!(in_payload, 0, "k {k}");
            }
        }
        assert_eq!(s.inner.wire.len(), k);
        assert_eq!(s.has_backlog(), in_header, "k {k}: a header cut is backlog");
        // The rest, through a wide-open sink.
        s.inner.budget = usize::MAX;
        let mut at = first.unwrap_or(0);
        for _ in 0..10 {
            if at == payload.len() && !s.has_backlog() {
                break;
            }
            if s.has_backlog() {
                assert!(s.flush_backlog().unwrap(), "k {k}");
            } else {
                at += s.write(&payload[at..]).unwrap();
            }
        }
        assert_eq!(at, payload.len(), "k {k}");
        let (got, got_sizes) = parse_records(&s.inner.wire);
        assert!(got == payload, "k {k}: payload exact");
        assert_eq!(got_sizes, sizes, "k {k}");
    }
}

#[test]
fn reads_unwrap_records_split_at_every_byte() {
    let payload = bulk(30_000, 3);
    let wire = client_records(&payload, &[1, 2, 517, MAX_RECORD_IN, 3, 4000]);
    for cap in [1, 3, 7, 64_000] {
        for bufsize in [1, 6, 4096] {
            let (mut peer, b) = pair(cap, cap);
            let mut s = FakeTlsStream::new(b);
            let mut q: VecDeque<u8> = wire.iter().copied().collect();
            let (mut got, mut buf) = (Vec::<u8>::new(), vec![0u8; bufsize]);
            let mut eof = false;
            for _ in 0..MAX_ROUNDS {
                push(&mut peer, &mut q);
                if q.is_empty() && !eof {
                    peer.shutdown_write().unwrap();
                    eof = true;
                }
                match read_once(&mut s, &mut buf) {
                    Io::Done(n) => got.extend(&buf[..n]),
                    Io::Blocked => {}
                    Io::Eof => break,
                    Io::Failed(e) => panic!("read: {e}"),
                }
            }
            assert!(eof, "cap {cap} buf {bufsize}: the peer finished");
            assert_eq!(got, payload, "cap {cap} buf {bufsize}");
        }
    }
}

#[test]
fn a_read_of_only_headers_or_ccs_would_block_instead_of_ending() {
    let (mut peer, b) = pair(1000, 1000);
    let mut s = FakeTlsStream::new(b);
    peer.write_all(&[0x14, 3, 3, 0, 1, 1, 0x17, 3, 3, 0, 3])
        .unwrap();
    let mut buf = [0u8; 64];
    let e = s.read(&mut buf).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    peer.write_all(b"abc").unwrap();
    assert_eq!(s.read(&mut buf).unwrap(), 3);
    assert_eq!(&buf[..3], b"abc");
    // The peer's real end is Ok(0), mid-record or not.
    peer.write_all(&[0x17, 3, 3, 0, 9, b'x']).unwrap();
    peer.shutdown_write().unwrap();
    assert_eq!(s.read(&mut buf).unwrap(), 1);
    assert_eq!(s.read(&mut buf).unwrap(), 0);
}

#[test]
fn a_bad_record_is_invalid_data_naming_it() {
    let cases: [(&[u8], RecordError, &str); 3] = [
        (
            &[0x15, 3, 3, 0, 2, 1, 0],
            RecordError::UnexpectedType(0x15),
            "record type 0x15",
        ),
        (
            &[0x17, 3, 3, 0, 0],
            RecordError::Empty,
            "empty application data record",
        ),
        (
            &[0x17, 3, 3, 0xff, 0xff],
            RecordError::TooLong(0xffff),
            "65535 bytes",
        ),
    ];
    for (bad, want, phrase) in cases {
        let (mut peer, b) = pair(1000, 1000);
        let mut s = FakeTlsStream::new(b);
        peer.write_all(&[0x17, 3, 3, 0, 2, b'o', b'k']).unwrap();
        peer.write_all(bad).unwrap();
        // Exactly the first record: its payload comes out before the error.
        let mut buf = [0u8; 7];
        assert_eq!(
            s.read(&mut buf).unwrap(),
            2,
            "payload before the bad record"
        );
        let e = s.read(&mut [0u8; 64]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains(phrase), "{e}");
        assert_eq!(record_error(&e), Some(want));
        assert_eq!(record_error(&io::Error::other("x")), None);
    }
}

/// The relay core with a fake-TLS client: a fake Telegram app that speaks records on one side,
/// a raw fake DC on the other, real obfuscated2 ciphers on both.
struct World {
    relay: Relay,
    client: FakeTlsStream<PipeEnd>,
    up: PipeEnd,
    meter: Meter,
    scratch: Scratch,
    rng: Rng,
    app: PipeEnd,
    app_dec: Cipher,
    app_out: VecDeque<u8>,
    app_wire: Vec<u8>,
    front: PipeEnd,
    front_raw: Vec<u8>,
    front_ciphers: Option<(Cipher, Cipher)>,
    front_out: VecDeque<u8>,
    front_plain: Vec<u8>,
}

impl World {
    fn new(client_cap: usize, up_cap: usize, buf: usize) -> (World, Cipher) {
        let secret = [0x5a; 16];
        let mut rng = Rng::from_seed([7; 48]);
        let app_init = initiate(Tag::PaddedIntermediate, 2, Some(&secret), &mut rng);
        let accepted = accept(&app_init.init, &[secret]).expect("app init accepted");
        let mut relay = Relay::new(
            accepted,
            2,
            LinkKind::Raw,
            RelayBuf::new(buf),
            RelayBuf::new(buf),
            false,
            &mut rng,
        );
        relay.trust_replies(); // arbitrary bytes come down
        let (client, app) = pair(client_cap, client_cap);
        let (up, front) = pair(up_cap, up_cap);
        let world = World {
            relay,
            client: FakeTlsStream::new(client),
            up,
            meter: Meter::default(),
            scratch: Scratch::new(4 * buf, None),
            rng,
            app,
            app_dec: app_init.decrypt,
            app_out: VecDeque::new(),
            app_wire: Vec::new(),
            front,
            front_raw: Vec::new(),
            front_ciphers: None,
            front_out: VecDeque::new(),
            front_plain: Vec::new(),
        };
        (world, app_init.encrypt)
    }

    /// Runs relay and peers until nothing moves; panics on a close.
    fn run(&mut self) {
        for _ in 0..MAX_ROUNDS {
            let mut moved = push(&mut self.app, &mut self.app_out);
            moved |= push(&mut self.front, &mut self.front_out);
            moved |= drain(&mut self.app, &mut self.app_wire);
            moved |= drain(&mut self.front, &mut self.front_raw);
            if self.front_ciphers.is_none() && self.front_raw.len() >= 64 {
                let mut init = [0u8; 64];
                init.copy_from_slice(&self.front_raw[..64]);
                self.front_raw.drain(..64);
                let acc = accept_raw(&init).expect("relay init");
                self.front_ciphers = Some((acc.decrypt, acc.encrypt));
            }
            if let Some((dec, _)) = &mut self.front_ciphers {
                let mut rest = std::mem::take(&mut self.front_raw);
                dec.apply(&mut rest);
                self.front_plain.extend(rest);
            }
            let mut ready = Ready {
                read: true,
                write: true,
            };
            let mut up_ready = ready;
            let outcome = self.relay.step(
                &mut self.client,
                &mut ready,
                &mut self.up,
                &mut up_ready,
                &mut self.meter,
                &mut self.scratch,
                1_000,
                &mut self.rng,
            );
            match outcome {
                Outcome::Close(r) => panic!("relay closed: {r}"),
                Outcome::Wait if !moved => return,
                _ => {}
            }
        }
        panic!("relay did not settle");
    }
}

fn relay_both_ways(len: usize, client_cap: usize, up_cap: usize, buf: usize) {
    let (mut w, mut app_enc) = World::new(client_cap, up_cap, buf);
    w.run();
    let (_, front_enc) = w.front_ciphers.as_mut().expect("the relay sent its init");
    let down = bulk(len, 9);
    let mut c = down.clone();
    front_enc.apply(&mut c);
    w.front_out.extend(c);
    let up = bulk(len, 4);
    let mut c = up.clone();
    app_enc.apply(&mut c);
    w.app_out
        .extend(client_records(&c, &[MAX_RECORD_IN, 1, 700, MAX_PAYLOAD, 5]));
    w.run();
    assert_eq!(w.front_plain.len(), up.len(), "caps {client_cap}/{up_cap}");
    assert!(w.front_plain == up, "up bytes intact");
    let (mut got, sizes) = parse_records(&w.app_wire);
    w.app_dec.apply(&mut got);
    assert_eq!(got.len(), down.len(), "caps {client_cap}/{up_cap}");
    assert!(got == down, "down bytes intact");
    assert!(sizes.iter().all(|&s| s <= MAX_PAYLOAD));
    assert_eq!(w.meter.bytes_up, len as u64);
    assert_eq!(w.meter.bytes_down, len as u64);
    assert!(!w.client.has_backlog());
}

#[test]
fn the_relay_moves_1_mib_each_way_over_a_fake_tls_client() {
    relay_both_ways(1 << 20, 70_000, 65_536, 16 * 1024);
    relay_both_ways(1 << 20, 4099, 1500, 16 * 1024);
}

#[test]
fn the_relay_over_a_fake_tls_client_survives_tiny_pipes() {
    for cap in [1, 3, 7] {
        relay_both_ways(20_000, cap, 333, 1024);
    }
}

#[test]
fn an_upload_of_records_reads_the_client_about_once_per_64_kib() {
    // A 64 KiB read of records unwraps to 20 bytes short of the buffer (four headers): the
    // relay writes upstream before reading again, not into those 20 bytes.
    let (mut w, mut app_enc) = World::new(1 << 20, 1 << 20, 16 * 1024);
    w.run();
    let up = bulk(4 << 20, 5);
    let mut c = up.clone();
    app_enc.apply(&mut c);
    let wire = client_records(&c, &[MAX_PAYLOAD]);
    let reads_before = w.client.inner.reads;
    w.app_out.extend(&wire);
    w.run();
    assert!(w.front_plain == up, "up bytes intact");
    let reads = w.client.inner.reads - reads_before;
    let large = w.scratch.capacity();
    assert_eq!(large, 64 * 1024);
    assert!(
        reads <= wire.len().div_ceil(large) + 2,
        "{reads} reads for {} bytes",
        wire.len()
    );
}
