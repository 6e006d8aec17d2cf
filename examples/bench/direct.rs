//! The cheap relay end to end (issue 21, BENCHMARKS.md "Relay modes"): on the tcp and the ws tier,
//! the real proxy relays the same payload for three clients — (a) a proxy client with the
//! secret (relay mode `reencrypt`, today's path), (b) a direct client through the SOCKS5
//! inbound with a secretless obfuscated2 init (`passthrough`), (c) a plain abridged client
//! through the SOCKS5 inbound (`plain`) — and reports per row the proxy's callgrind Ir per
//! relayed byte and its CPU seconds per GiB (utime + stime from `/proc/PID/stat`), each with the
//! ratio to (a) on the same tier in the same run.
//!
//! Every session downloads `BULK` packets of 1 MiB and then uploads as many `SINK` packets
//! (intermediate for (a) and (b), abridged for (c)). CPU rows: `--streams` sessions each moving
//! `--gib` GiB / `--streams` per direction on a fresh proxy. Callgrind rows: one session moving
//! `--cg-mib` MiB each way under `valgrind --tool=callgrind`, minus a run that only opens and
//! closes the session (as `bench/callgrind.rs`). The proxy runs with `--pool-size 0` (a pooled
//! upstream cannot take a client's own init), `--socks5 127.0.0.1:0` and `--dc-addr
//! 127.0.0.3=2`; SOCKS5 clients CONNECT to 127.0.0.3:443 and the tier's flag sends DC 2 to the
//! fake DC. Each run reads the proxy's session records (`TG_EVENTS`) and fails unless every
//! session ended with the row's way in, tier and `relay_mode`, so a row cannot measure another
//! mode. Bench code: loopback only; failures are returned as text.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tg_ws_proxy::mtproto::obfs2::{Secret, Tag};
use tg_ws_proxy::rng::Rng;

use super::client::{self, Counted, Moved};
use super::cpu::{per_stream_packets, PACKET};
use super::fakedc::FakeDc;
use super::mtsession::MtSession;
use super::proxy::ProxyProc;
use super::{callgrind, check_live, procfs, step, tier_dc, wait_for, Opts, GIB, MIB};

/// The address `--dc-addr` makes DC 2; SOCKS5 clients CONNECT to it (port [`DC_PORT`]). The
/// proxy never dials it: the tier's `--tcp-dc-ip` / `--dc-ip` name the fake DC.
const DC_ADDR: [u8; 4] = [127, 0, 0, 3];
const DC_PORT: u16 = 443;
/// Bound on setup steps and on waiting for the session records without valgrind.
const T: Duration = Duration::from_secs(10);

/// How a row's client reaches the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// (a) the proxy listener, obfuscated2 keyed with the secret, intermediate.
    Proxy,
    /// (b) SOCKS5 CONNECT to a DC address, then a secretless obfuscated2 init, intermediate.
    Direct,
    /// (c) SOCKS5 CONNECT to a DC address, then unobfuscated abridged (`ef`).
    Plain,
}

impl Way {
    pub const ALL: [Way; 3] = [Way::Proxy, Way::Direct, Way::Plain];

    /// The report's name of the client.
    pub fn client(self) -> &'static str {
        match self {
            Way::Proxy => "(a) proxy client, secret",
            Way::Direct => "(b) SOCKS5, direct obfuscated2",
            Way::Plain => "(c) SOCKS5, plain abridged",
        }
    }

    /// The session record's `way` and `relay_mode` this client must get.
    pub fn expected(self) -> (&'static str, &'static str) {
        match self {
            Way::Proxy => ("proxy", "reencrypt"),
            Way::Direct => ("socks5", "passthrough"),
            Way::Plain => ("socks5", "plain"),
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Way::Proxy => "proxy",
            Way::Direct => "direct",
            Way::Plain => "plain",
        }
    }
}

/// One row: a tier and a client, its CPU run and (valgrind present) its callgrind runs.
pub struct Row {
    pub tier: &'static str,
    pub way: Way,
    /// CPU run: client-side socket bytes relayed (both ways), wall seconds, proxy CPU ticks
    /// (utime, stime) and schedstat ns over the transfer.
    pub bytes: u64,
    pub secs: f64,
    pub utime: u64,
    pub stime: u64,
    pub sched_ns: u64,
    /// Callgrind: (Ir of the transfer run, Ir of the open-only run, bytes relayed).
    pub ir: Option<(u64, u64, u64)>,
}

impl Row {
    fn gib(&self) -> f64 {
        self.bytes as f64 / GIB
    }
    /// Proxy utime + stime per GiB relayed, seconds.
    pub fn cpu_per_gib(&self) -> f64 {
        (self.utime + self.stime) as f64 / procfs::clk_tck() as f64 / self.gib()
    }
    fn sched_per_gib(&self) -> f64 {
        self.sched_ns as f64 / 1e9 / self.gib()
    }
    /// Callgrind Ir per relayed byte.
    pub fn ir_per_byte(&self) -> Option<f64> {
        self.ir
            .map(|(ir, null, bytes)| ir.saturating_sub(null) as f64 / bytes as f64)
    }
}

/// Every row: tcp then ws, (a), (b), (c) each.
pub fn run(o: &Opts) -> Result<Vec<Row>, String> {
    std::fs::create_dir_all(out_dir()).map_err(|e| format!("mkdir: {e}"))?;
    let cg = callgrind::available();
    let mut rows = Vec::new();
    for tier in ["tcp", "ws"] {
        for way in Way::ALL {
            let mut row = cpu_run(o, tier, way)?;
            if cg {
                let packets = o.cg_mib.max(1.0).ceil() as u32;
                let (null, _) = cg_run(o, tier, way, 0)?;
                let (ir, bytes) = cg_run(o, tier, way, packets)?;
                row.ir = Some((ir, null, bytes));
            }
            rows.push(row);
        }
    }
    Ok(rows)
}

fn out_dir() -> PathBuf {
    PathBuf::from("target/bench/direct")
}

/// A proxy (under `wrapper`, waiting `timeout` for its start) in front of `dc` on `tier` with
/// the SOCKS5 listener on; its session records go to `events`. → the proxy and its SOCKS5
/// address (from the `socks5 listener on ADDR` line).
fn start(
    o: &Opts,
    tier: &str,
    dc: &FakeDc,
    wrapper: &[String],
    timeout: Duration,
    events: &Path,
) -> Result<(ProxyProc, SocketAddr), String> {
    let _ = std::fs::remove_file(events);
    let mut args = callgrind::proxy_args(tier, dc, "plain", 64);
    let dc_addr = format!("{}={}", std::net::Ipv4Addr::from(DC_ADDR), 2);
    args.extend(
        ["--socks5", "127.0.0.1:0", "--dc-addr", &dc_addr]
            .iter()
            .map(|s| s.to_string()),
    );
    let p = ProxyProc::start_wrapped(
        wrapper,
        timeout,
        &o.proxy,
        &o.ca,
        client::SECRET,
        &args,
        Some(events),
    )?;
    let mut socks = None;
    wait_for(timeout, || {
        socks = p.lines().iter().find_map(|l| {
            l.rsplit_once("socks5 listener on ")
                .and_then(|(_, a)| a.trim().parse().ok())
        });
        socks.is_some()
    });
    let socks = socks.ok_or_else(|| format!("no `socks5 listener on` line:\n{}", p.tail()))?;
    Ok((p, socks))
}

/// Opens one session of `way` (through `proxy`'s listener or its `socks` one) and checks it
/// with one `req_pq_multi` → `resPQ` round trip.
fn open(
    way: Way,
    proxy: SocketAddr,
    socks: SocketAddr,
    rng: &mut Rng,
) -> Result<MtSession<Counted>, String> {
    let to = if way == Way::Proxy { proxy } else { socks };
    let sock = TcpStream::connect_timeout(&to, T).map_err(|e| format!("connect {to}: {e}"))?;
    let _ = sock.set_nodelay(true);
    sock.set_read_timeout(Some(T))
        .and_then(|_| sock.set_write_timeout(Some(T)))
        .map_err(|e| format!("timeouts: {e}"))?;
    if way != Way::Proxy {
        socks5_connect(&sock)?;
    }
    let sock = Counted::new(sock);
    let mut s = match way {
        Way::Proxy => {
            let key = Secret::parse(client::SECRET)
                .map_err(|e| format!("secret: {e:?}"))?
                .key;
            MtSession::new(sock, &key, Tag::Intermediate, 2, rng)
        }
        Way::Direct => MtSession::direct(sock, Tag::Intermediate, 2, rng),
        Way::Plain => MtSession::plain(sock, Tag::Abridged, rng),
    };
    s.send_init().map_err(|e| format!("init: {e}"))?;
    s.req_pq()?;
    Ok(s)
}

/// RFC 1928 without authentication: method 00, then CONNECT to [`DC_ADDR`]:[`DC_PORT`];
/// anything but `05 00` and REP 00 is an error.
fn socks5_connect(mut sock: &TcpStream) -> Result<(), String> {
    let e = |x: std::io::Error| format!("socks5: {x}");
    sock.write_all(&[5, 1, 0]).map_err(e)?;
    let mut choice = [0u8; 2];
    sock.read_exact(&mut choice).map_err(e)?;
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&DC_ADDR);
    req.extend_from_slice(&DC_PORT.to_be_bytes());
    sock.write_all(&req).map_err(e)?;
    let mut reply = [0u8; 10];
    sock.read_exact(&mut reply).map_err(e)?;
    if choice != [5, 0] || reply[..2] != [5, 0] {
        return Err(format!(
            "socks5: method choice {choice:02x?}, reply {reply:02x?}"
        ));
    }
    Ok(())
}

/// `packets` × 1 MiB down, then as many up, on `s`, within `limit`.
fn down_up(s: &mut MtSession<Counted>, packets: u32, limit: Duration) -> Result<Moved, String> {
    let d = client::download(s, packets, PACKET, limit)?;
    let u = client::upload(s, packets, PACKET, limit)?;
    Ok(Moved {
        up: d.up + u.up,
        down: d.down + u.down,
    })
}

/// The CPU row: `--streams` sessions of `way` at once on a fresh proxy and fake DC.
fn cpu_run(o: &Opts, tier: &'static str, way: Way) -> Result<Row, String> {
    let packets = per_stream_packets(o.gib, o.streams);
    step(&format!(
        "direct: {tier} tier, {}: {} streams × {packets} MiB down, then up",
        way.client(),
        o.streams
    ));
    let dc = tier_dc(tier);
    let events = out_dir().join(format!("cpu-{tier}-{}.jsonl", way.tag()));
    let (mut p, socks) = start(o, tier, &dc, &[], T, &events)?;
    let mut rng = Rng::new().map_err(|e| format!("rng: {e}"))?;
    let sessions = (0..o.streams)
        .map(|_| open(way, p.addr(), socks, &mut rng))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{tier} {}: {e}; log:\n{}", way.client(), p.tail()))?;
    check_live(&mut p, &dc, o.streams, tier)?;
    let (u0, s0) = p.cpu_split();
    let n0 = p.cpu().1;
    let t0 = Instant::now();
    let hs: Vec<_> = sessions
        .into_iter()
        .map(|mut s| std::thread::spawn(move || down_up(&mut s, packets, client::BULK_TIMEOUT)))
        .collect();
    let moved = client::join_moved(hs);
    let secs = t0.elapsed().as_secs_f64();
    let (u1, s1) = p.cpu_split();
    let n1 = p.cpu().1;
    let moved = moved.map_err(|e| format!("{tier} {}: {e}; log:\n{}", way.client(), p.tail()))?;
    check_records(&events, tier, way, o.streams, T)?;
    Ok(Row {
        tier,
        way,
        bytes: moved.up + moved.down,
        secs,
        utime: u1.saturating_sub(u0),
        stime: s1.saturating_sub(s0),
        sched_ns: n1.saturating_sub(n0),
        ir: None,
    })
}

/// Ir of one proxy under callgrind relaying `packets` × 1 MiB each way on one session of `way`
/// (0: opened and closed only) → (Ir, relayed bytes).
fn cg_run(o: &Opts, tier: &'static str, way: Way, packets: u32) -> Result<(u64, u64), String> {
    step(&format!(
        "direct: callgrind, {tier} tier, {}, {packets} MiB each way",
        way.client()
    ));
    let out = out_dir().join(format!("proxy-{tier}-{}-{packets}.out", way.tag()));
    let _ = std::fs::remove_file(&out);
    let events = out_dir().join(format!("cg-{tier}-{}-{packets}.jsonl", way.tag()));
    let dc = tier_dc(tier);
    let (mut p, socks) = start(
        o,
        tier,
        &dc,
        &callgrind::valgrind(&out),
        callgrind::VG_START,
        &events,
    )?;
    let mut rng = Rng::new().map_err(|e| format!("rng: {e}"))?;
    let mut s = open(way, p.addr(), socks, &mut rng)
        .map_err(|e| format!("{tier} {}: {e}; log:\n{}", way.client(), p.tail()))?;
    check_live(&mut p, &dc, 1, tier)?;
    let moved = down_up(&mut s, packets, callgrind::VG_TRANSFER)
        .map_err(|e| format!("callgrind {tier} {}: {e}; log:\n{}", way.client(), p.tail()))?;
    drop(s);
    check_records(&events, tier, way, 1, callgrind::VG_EXIT)?;
    if !p.terminate(callgrind::VG_EXIT) {
        return Err(format!(
            "callgrind {tier} {}: proxy did not exit after SIGTERM",
            way.client()
        ));
    }
    Ok((callgrind::total_ir(&out)?, moved.up + moved.down))
}

/// Waits (up to `timeout`) for `n` `session` records in `events` and checks every one names
/// `way`'s way in and relay mode and `tier`.
fn check_records(
    events: &Path,
    tier: &str,
    way: Way,
    n: usize,
    timeout: Duration,
) -> Result<(), String> {
    let sessions = || -> Vec<serde_json::Value> {
        std::fs::read_to_string(events)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["event"] == "session")
            .collect()
    };
    wait_for(timeout, || sessions().len() >= n);
    let got = sessions();
    let (way_in, mode) = way.expected();
    let wrong: Vec<String> = got
        .iter()
        .filter(|e| e["way"] != way_in || e["relay_mode"] != mode || e["tier"] != tier)
        .map(|e| {
            format!(
                "way {} tier {} relay_mode {}",
                e["way"], e["tier"], e["relay_mode"]
            )
        })
        .collect();
    if got.len() != n || !wrong.is_empty() {
        return Err(format!(
            "{tier} {}: {} session records, want {n} with way {way_in}, tier {tier}, relay_mode {mode}; others: {wrong:?} ({})",
            way.client(),
            got.len(),
            events.display()
        ));
    }
    Ok(())
}

/// The report section.
pub fn report(r: &mut String, o: &Opts, rows: &[Row]) {
    let _ = writeln!(
        r,
        "### Issue 21: the cheap relay end to end (SOCKS5 direct clients vs a proxy client)\n"
    );
    let _ = writeln!(
        r,
        "CPU: {} sessions at once, each {} × 1 MiB down then up, on a fresh proxy per row. Callgrind: one session, {} MiB each way, minus an open-only run. `relay_mode` is the session records' (checked for every session of every run). ratio = row / (a) on the same tier.\n",
        o.streams,
        per_stream_packets(o.gib, o.streams),
        o.cg_mib.max(1.0).ceil()
    );
    let _ = writeln!(
        r,
        "| tier | client | relay_mode | Ir / byte | ratio | Ir saved / GiB vs (a) | CPU relayed | proxy user + sys | s/GiB | ratio | schedstat s/GiB | MiB/s |"
    );
    let _ = writeln!(
        r,
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for x in rows {
        let a = rows
            .iter()
            .find(|y| y.tier == x.tier && y.way == Way::Proxy);
        let (ir, ir_ratio, saved) = match (x.ir_per_byte(), a.and_then(Row::ir_per_byte)) {
            (Some(v), Some(av)) => (
                format!("{v:.2}"),
                format!("{:.3}", v / av),
                if x.way == Way::Proxy {
                    "—".into()
                } else {
                    format!("{:.2e}", (av - v) * GIB)
                },
            ),
            (Some(v), None) => (format!("{v:.2}"), "—".into(), "—".into()),
            _ => ("not measured".into(), "—".into(), "—".into()),
        };
        let cpu_ratio = a.map_or("—".into(), |a| {
            format!("{:.2}", x.cpu_per_gib() / a.cpu_per_gib())
        });
        let tck = procfs::clk_tck() as f64;
        let _ = writeln!(
            r,
            "| {} | {} | {} | {ir} | {ir_ratio} | {saved} | {:.3} GiB | {:.2} + {:.2} s | {:.3} | {cpu_ratio} | {:.3} | {:.0} |",
            x.tier,
            x.way.client(),
            x.way.expected().1,
            x.gib(),
            x.utime as f64 / tck,
            x.stime as f64 / tck,
            x.cpu_per_gib(),
            x.sched_per_gib(),
            x.bytes as f64 / MIB / x.secs
        );
    }
    let _ = writeln!(
        r,
        "\nSession records and callgrind files in target/bench/direct/.\n"
    );
}
