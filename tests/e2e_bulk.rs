//! Black-box: byte-exact bulk relay through the built binary. Packets of varied sizes up to
//! 1 MiB go up and are echoed back by the fake DC (≥ 64 MiB each way over the ws tier, less over
//! tcp), and the fake DC's `BULK` mode sends 1 MiB packets downstream (1 MiB WS frames on ws).
//! Every byte is checked; the client writes and reads on separate threads so neither pipe
//! direction can stall the other. Proxy RSS is sampled to catch per-message buffering.
//!
//! Owns only this file; the rig lives in tests/common (not edited here). Real sockets on
//! 127.0.0.1, no fixed sleeps.

mod common;

use std::io::{self, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::fakedc::{bulk_payload, bulk_request, DcConfig, FakeDc};
use common::reader::Reader;
use common::{client_opts, wait_until, Proxy, SECRET};
use tg_ws_proxy::applet::probe::MtClient;
use tg_ws_proxy::mtproto::framing;
use tg_ws_proxy::mtproto::obfs2::{Cipher, Tag};
use tg_ws_proxy::rng::Rng;

const MIB: usize = 1 << 20;

/// The big run: at least this many payload bytes each way (the issue's ≥ 64 MiB).
const BIG_TOTAL: usize = 64 * MIB;

/// Socket timeout per read/write: a stall detector, not a pacing device.
const STALL: Duration = Duration::from_secs(30);

/// Socket read size on the client.
const READ_CHUNK: usize = 256 * 1024;

/// Allowed proxy RSS growth during a transfer (KiB). Two 16 KiB buffers per session are the
/// design; buffering whole 1 MiB messages (or unbounded backlog) shows up as tens of MiB.
const RSS_SLACK_KIB: u64 = 8 * 1024;

fn os_rng() -> Rng {
    Rng::new().expect("OS randomness")
}

/// Packet `i` of an echo run: 0xA5, index (3 bytes LE), then a pattern of `i` and the offset.
/// The 0xA5 lead keeps the fake DC from taking it for `req_pq_multi`, `BULK` or `QUIT`.
fn echo_byte(i: u32, j: usize) -> u8 {
    match j {
        0 => 0xA5,
        1..=3 => i.to_le_bytes()[j - 1],
        _ => (j as u32)
            .wrapping_mul(167)
            .wrapping_add(i.wrapping_mul(59))
            .wrapping_add((j >> 11) as u32) as u8,
    }
}

fn echo_payload(i: u32, len: usize) -> Vec<u8> {
    (0..len).map(|j| echo_byte(i, j)).collect()
}

/// Deterministic packet sizes (multiples of 4, 4 B ..= 1 MiB) summing to at least `total`:
/// a mix of tiny, medium, large and exactly-1-MiB packets, starting with a 1 MiB one.
fn packet_sizes(total: usize, seed: u8) -> Vec<usize> {
    let mut r = Rng::from_seed([seed; 48]);
    let mut sizes = vec![MIB];
    let mut sum = MIB;
    while sum < total {
        let n = match r.below(4) {
            0 => 4 + r.below(253) as usize,
            1 => 1024 + r.below(63 * 1024) as usize,
            2 => 64 * 1024 + r.below((MIB - 64 * 1024) as u32) as usize,
            _ => MIB,
        };
        let n = (n / 4 * 4).clamp(4, MIB);
        sizes.push(n);
        sum += n;
    }
    sizes
}

/// Resident set size of a process in KiB (Linux), 0 if unreadable.
fn rss_kib(pid: u32) -> u64 {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return 0;
    };
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Connects through the proxy and splits the session into a writer (socket, cipher) and a reader.
fn open(proxy: &Proxy, tag: Tag, rng: &mut Rng) -> (TcpStream, Cipher, Reader) {
    let opts = client_opts(proxy.addr(), SECRET, tag, 2);
    let c = MtClient::connect_with(&opts, rng).expect("connect to proxy");
    let (sock, enc, dec) = c.into_parts();
    sock.set_read_timeout(Some(STALL)).expect("read timeout");
    sock.set_write_timeout(Some(STALL)).expect("write timeout");
    let rsock = sock.try_clone().expect("clone client socket");
    let reader = Reader::new(rsock, dec, tag, READ_CHUNK);
    (sock, enc, reader)
}

/// Result of one echo run.
struct EchoRun {
    up_payload: usize,
    max_rss_kib: u64,
    elapsed: Duration,
}

/// Sends every packet of `sizes` from a writer thread while this thread checks each echo byte
/// for byte. Panics (with the proxy log) on any mismatch, EOF or stall.
fn echo_run(proxy: &Proxy, tag: Tag, sizes: &[usize]) -> EchoRun {
    let mut rng = os_rng();
    let (mut wsock, mut enc, mut reader) = open(proxy, tag, &mut rng);
    let pid = proxy.pid();
    let start = Instant::now();
    let wsizes = sizes.to_vec();
    let mut pad_rng = Rng::from_seed([7; 48]);
    let writer = std::thread::spawn(move || -> io::Result<usize> {
        let mut sent = 0;
        for (i, &n) in wsizes.iter().enumerate() {
            let mut wire = framing::encode(tag, &echo_payload(i as u32, n), &mut pad_rng);
            enc.apply(&mut wire);
            wsock.write_all(&wire)?;
            sent += n;
        }
        Ok(sent)
    });
    let mut max_rss = 0;
    for (i, &n) in sizes.iter().enumerate() {
        let got = match reader.next() {
            Ok(p) => p,
            Err(e) => panic!(
                "echo {i}/{} ({n} B): {e} after {:?}\nproxy log:\n{}",
                sizes.len(),
                start.elapsed(),
                proxy.logs().join("\n")
            ),
        };
        let pad_ok = match tag {
            Tag::PaddedIntermediate => got.len() >= n && got.len() <= n + 30,
            _ => got.len() == n,
        };
        assert!(pad_ok, "echo {i}: sent {n} B, got {} B", got.len());
        if let Some(j) = (0..n).find(|&j| got[j] != echo_byte(i as u32, j)) {
            panic!("echo {i} ({n} B): first wrong byte at offset {j}");
        }
        if i % 16 == 0 {
            max_rss = max_rss.max(rss_kib(pid));
        }
    }
    let up = writer
        .join()
        .expect("writer thread panicked")
        .expect("writer: socket error");
    EchoRun {
        up_payload: up,
        max_rss_kib: max_rss,
        elapsed: start.elapsed(),
    }
}

/// Asks the fake DC for `count` packets of `size` bytes and checks each against `bulk_payload`.
/// Returns (client bytes read, max proxy RSS in KiB).
fn bulk_run(proxy: &Proxy, tag: Tag, count: u32, size: usize) -> (u64, u64) {
    let mut rng = os_rng();
    let (mut wsock, mut enc, mut reader) = open(proxy, tag, &mut rng);
    let mut wire = framing::encode(tag, &bulk_request(count, size as u32), &mut rng);
    enc.apply(&mut wire);
    wsock.write_all(&wire).expect("send BULK request");
    let pid = proxy.pid();
    let mut max_rss = 0;
    for i in 0..count {
        let got = match reader.next() {
            Ok(p) => p,
            Err(e) => panic!(
                "bulk packet {i}/{count}: {e}\nproxy log:\n{}",
                proxy.logs().join("\n")
            ),
        };
        let want = bulk_payload(i, size);
        assert!(
            got.len() >= size && got.len() < size + 16,
            "bulk packet {i}: {} B",
            got.len()
        );
        if got[..size] != want[..] {
            let j = (0..size).find(|&j| got[j] != want[j]).unwrap_or(0);
            panic!("bulk packet {i}: first wrong byte at offset {j}");
        }
        max_rss = max_rss.max(rss_kib(pid));
    }
    drop(wsock);
    (reader.bytes, max_rss)
}

fn ws_setup() -> (FakeDc, Proxy) {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let ws = format!("2:{}", dc.addr());
    let proxy = Proxy::start(&["--secret", SECRET, "--dc-ip", &ws, "--tier-order", "ws"]);
    (dc, proxy)
}

fn tcp_setup() -> (FakeDc, Proxy) {
    common::tcp_dc2_proxy(&[])
}

/// Settles the proxy's RSS baseline: one tiny session through it first.
fn warm_baseline(proxy: &Proxy) -> u64 {
    let sizes = [4usize, 8];
    echo_run(proxy, Tag::Intermediate, &sizes);
    rss_kib(proxy.pid())
}

#[test]
fn echo_64_mib_each_way_over_ws_with_packets_up_to_1_mib() {
    let (dc, proxy) = ws_setup();
    let base = warm_baseline(&proxy);
    let sizes = packet_sizes(BIG_TOTAL, 1);
    let run = echo_run(&proxy, Tag::Intermediate, &sizes);
    eprintln!(
        "ws echo: {} packets, {} MiB each way in {:?}; proxy RSS {} KiB → max {} KiB",
        sizes.len(),
        run.up_payload / MIB,
        run.elapsed,
        base,
        run.max_rss_kib
    );
    assert!(run.up_payload >= BIG_TOTAL);
    // The fake DC saw every packet as its own WS message, header + payload exactly.
    let m = dc.messages();
    let warm = 2;
    assert_eq!(m.len(), warm + sizes.len(), "WS messages");
    for (k, (rec, &n)) in m[warm..].iter().zip(&sizes).enumerate() {
        assert!(
            rec.one_packet && rec.len == 4 + n,
            "message {k}: {rec:?}, packet {n} B"
        );
    }
    assert!(dc.violations().is_empty(), "{:?}", dc.violations());
    assert!(dc.bytes_in() >= BIG_TOTAL as u64 && dc.bytes_out() >= BIG_TOTAL as u64);
    assert!(
        run.max_rss_kib <= base + RSS_SLACK_KIB,
        "proxy RSS grew from {base} KiB to {} KiB",
        run.max_rss_kib
    );
}

#[test]
fn echo_over_tcp_with_varied_packets_every_tag() {
    let (dc, proxy) = tcp_setup();
    for (seed, tag) in [
        (2u8, Tag::Abridged),
        (3, Tag::Intermediate),
        (4, Tag::PaddedIntermediate),
    ] {
        let sizes = packet_sizes(2 * MIB, seed);
        let run = echo_run(&proxy, tag, &sizes);
        eprintln!(
            "tcp echo {tag:?}: {} packets, {} B each way in {:?}",
            sizes.len(),
            run.up_payload,
            run.elapsed
        );
    }
    assert_eq!(dc.inits(), 3);
    assert!(dc.violations().is_empty(), "{:?}", dc.violations());
}

#[test]
fn bulk_downstream_1_mib_frames_over_ws() {
    let (dc, proxy) = ws_setup();
    let base = warm_baseline(&proxy);
    let count = 8;
    let t = Instant::now();
    let (down, max_rss) = bulk_run(&proxy, Tag::Intermediate, count, MIB);
    eprintln!(
        "ws bulk: {count} × 1 MiB down in {:?}; proxy RSS {base} KiB → max {max_rss} KiB",
        t.elapsed()
    );
    assert!(down >= u64::from(count) * MIB as u64);
    assert!(dc.bytes_out() >= u64::from(count) * MIB as u64);
    assert!(dc.violations().is_empty(), "{:?}", dc.violations());
    assert!(
        max_rss <= base + RSS_SLACK_KIB,
        "proxy RSS grew from {base} KiB to {max_rss} KiB"
    );
    // Our end closed: the proxy must let the DC session go too.
    assert!(
        wait_until(Duration::from_secs(5), || dc.live_sessions() == 0),
        "live {}",
        dc.live_sessions()
    );
}

#[test]
fn bulk_downstream_1_mib_packets_over_tcp_every_tag() {
    let (dc, proxy) = tcp_setup();
    for tag in [Tag::Abridged, Tag::Intermediate, Tag::PaddedIntermediate] {
        let (down, _) = bulk_run(&proxy, tag, 3, MIB);
        assert!(down >= 3 * MIB as u64, "{tag:?}");
    }
    assert!(dc.violations().is_empty(), "{:?}", dc.violations());
}

#[test]
fn concurrent_sessions_relay_independently() {
    // Sixteen sessions echo at once through one reactor; each sees only its own bytes, in order.
    let (dc, proxy) = ws_setup();
    const SESSIONS: usize = 16;
    const ROUNDS: usize = 12;
    let addr = proxy.addr();
    let workers: Vec<_> = (0..SESSIONS)
        .map(|s| {
            std::thread::spawn(move || -> Result<(), String> {
                let mut rng = os_rng();
                let tag = [Tag::Abridged, Tag::Intermediate, Tag::PaddedIntermediate][s % 3];
                let opts = client_opts(addr, SECRET, tag, if s % 2 == 0 { 2 } else { -2 });
                let mut c = MtClient::connect_with(&opts, &mut rng).map_err(|e| e.to_string())?;
                for r in 0..ROUNDS {
                    let i = (s * 1000 + r) as u32;
                    let n = 4 * (1 + (s * 97 + r * 31) % 1024);
                    let p = echo_payload(i, n);
                    c.send_packet(&p)
                        .map_err(|e| format!("s{s} r{r}: send: {e}"))?;
                    let back = c.recv_packet().map_err(|e| format!("s{s} r{r}: {e}"))?;
                    if back.len() < n || back[..n] != p[..] {
                        return Err(format!("s{s} r{r}: wrong echo ({} of {n} B)", back.len()));
                    }
                }
                Ok(())
            })
        })
        .collect();
    for w in workers {
        if let Err(e) = w.join().expect("worker panicked") {
            panic!("{e}\nproxy log:\n{}", proxy.logs().join("\n"));
        }
    }
    let m = dc.messages();
    assert_eq!(m.len(), SESSIONS * ROUNDS);
    assert!(m.iter().all(|r| r.one_packet), "{m:?}");
    assert!(dc.violations().is_empty(), "{:?}", dc.violations());
}
