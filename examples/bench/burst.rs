//! Burst scenario (issue 6: "500 sessions arriving at 100/s and 1,000 arriving at 200/s for one
//! DC over the ws tier: all served, setup median and p99 reported, target p99 ≤ 300 ms on
//! loopback, with the default flags").
//!
//! Each run gets a fresh fake TLS + WS front and a fresh proxy with its default flags; the only
//! flags are the test seams: `--dc-ip 2:<fake front>`, `--ca-file` (and `--host`/`--port`/
//! `--stats-interval 0` from [`ProxyProc`]), plus `--tier-order ws`, because by default the
//! ladder also has a raw-TCP tier whose built-in table points at Telegram's real addresses, and
//! the bench never leaves 127.0.0.1. A reference run adds `--handshake-pace 0` (`--burst-ref`).
//! The front either answers at once or holds each WS upgrade answer `--burst-front-ms` after
//! TLS, a stand-in for a front that is not 0 ms away: how long an upstream takes to get ready
//! decides how much of a burst the warm pool can absorb and what a client's own dial costs.
//! Every DC is first mapped to the closed port 127.0.0.1:9 ([`ProxyProc`]), so the default
//! startup probes stay on loopback too.
//!
//! The clients are one non-blocking mio loop in this thread: session `i` starts its TCP connect
//! at `t0 + i / rate` (by the clock; how late the loop started each one is reported), sends the
//! obfuscated2 init and a `req_pq_multi` in one write, and its setup time is from the connect
//! call to the decoded `resPQ`. Served sessions stay open until every session has an outcome,
//! then all close together. The loop is bounded by [`SESSION_TIMEOUT`] per session and a
//! deadline for the whole burst; outcomes the client cannot see (why the proxy closed) come from
//! the proxy's own log lines for that client's address. The fake front runs on its own threads
//! in this process and competes for the same cores (the report gives the proxy's CPU time).

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use tg_ws_proxy::mtproto::framing::{self, Decoder};
use tg_ws_proxy::mtproto::obfs2::{self, Cipher, Secret, Tag};
use tg_ws_proxy::mtproto::packet;
use tg_ws_proxy::rng::Rng;

use super::fakedc::{DcConfig, FakeDc};
use super::proxy::ProxyProc;
use super::{client, procfs, step, wait_for, Opts};

/// The target for the setup p99 (loopback).
pub const TARGET_P99_MS: u64 = 300;
/// Bench-side bound on one session's setup; the proxy's own connect budget (3 s) ends first.
const SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// Slack past the last arrival's [`SESSION_TIMEOUT`] before the whole burst is cut off.
const BURST_SLACK: Duration = Duration::from_secs(2);
/// Period of the sweep that expires sessions and re-drives every pending one.
const SWEEP: Duration = Duration::from_millis(50);
/// Reads per session per drive (a session only ever receives one `resPQ`).
const READ_CAP: usize = 16;
/// How long to wait for the proxy's log lines about this run's sessions.
const LOG_WAIT: Duration = Duration::from_secs(10);
/// Descriptors beyond 3 per session that this process and the proxy need.
const FD_SPARE: u64 = 128;

/// One burst to run: `sessions` arriving at `rate` per second (`--burst 500@100,1000@200`).
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub sessions: usize,
    pub rate: u32,
}

impl Spec {
    /// Parses `N@R`, both positive.
    pub fn parse(s: &str) -> Result<Spec, String> {
        let (n, r) = s
            .trim()
            .split_once('@')
            .ok_or_else(|| format!("--burst {s:?}: want N@RATE, e.g. 500@100"))?;
        let sessions: usize = n.parse().map_err(|_| format!("--burst {s:?}: bad N"))?;
        let rate: u32 = r.parse().map_err(|_| format!("--burst {s:?}: bad RATE"))?;
        if sessions == 0 || rate == 0 {
            return Err(format!("--burst {s:?}: N and RATE must be > 0"));
        }
        Ok(Spec { sessions, rate })
    }
}

/// Why a session got no `resPQ`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Fail {
    /// The TCP connect (or the first write) failed.
    Connect,
    /// EOF from the proxy before the `resPQ`.
    ClosedByProxy,
    /// RST from the proxy before the `resPQ`.
    ResetByProxy,
    /// A reply that is not the `resPQ` for our nonce.
    BadReply,
    /// Nothing within [`SESSION_TIMEOUT`] or before the burst deadline.
    Timeout,
}

impl Fail {
    fn by_proxy(self) -> bool {
        matches!(self, Fail::ClosedByProxy | Fail::ResetByProxy)
    }

    fn name(self) -> &'static str {
        match self {
            Fail::Connect => "connect failed",
            Fail::ClosedByProxy => "closed by the proxy (EOF) before resPQ",
            Fail::ResetByProxy => "reset by the proxy before resPQ",
            Fail::BadReply => "bad reply",
            Fail::Timeout => "no resPQ within the bench bound",
        }
    }
}

/// One client session's lifecycle.
enum State {
    /// Not started yet.
    Idle,
    /// `connect()` issued; waiting for the socket to become writable.
    Connecting,
    /// Connected; this many bytes of the init + `req_pq_multi` are written.
    Sending(usize),
    /// Everything sent; waiting for the `resPQ`.
    Waiting,
    /// `resPQ` arrived this long after the connect started; held open until the burst ends.
    Held(Duration),
    /// Served, then closed by the proxy before the burst ended.
    Dropped(Duration),
    /// No `resPQ`; the socket is closed. The duration is from connect start to the failure.
    Failed(Fail, Duration),
}

struct Session {
    state: State,
    /// The init followed by the encrypted, framed `req_pq_multi` (built before the burst).
    wire: Vec<u8>,
    nonce: [u8; 16],
    decrypt: Cipher,
    decoder: Decoder,
    stream: Option<TcpStream>,
    /// When its connect was scheduled and when it was issued.
    due: Instant,
    started: Instant,
    /// Our side of the TCP connection: how the proxy's log names this client.
    local: Option<SocketAddr>,
}

impl Session {
    fn new(tag: Tag, key: &[u8; 16], due: Instant, rng: &mut Rng) -> Session {
        let start = obfs2::initiate(tag, 2, Some(key), rng);
        let mut encrypt = start.encrypt;
        let mut nonce = [0u8; 16];
        rng.fill(&mut nonce);
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let mut pkt = framing::encode(tag, &packet::req_pq_multi(&nonce, packet::msg_id(ms)), rng);
        encrypt.apply(&mut pkt);
        let mut wire = start.init.to_vec();
        wire.extend_from_slice(&pkt);
        Session {
            state: State::Idle,
            wire,
            nonce,
            decrypt: start.decrypt,
            decoder: Decoder::new(tag),
            stream: None,
            due,
            started: due,
            local: None,
        }
    }

    /// Connecting, sending or waiting: an outcome is still to come.
    fn pending(&self) -> bool {
        matches!(
            self.state,
            State::Connecting | State::Sending(_) | State::Waiting
        )
    }

    fn fail(&mut self, why: Fail) {
        self.state = State::Failed(why, self.started.elapsed());
        self.stream = None;
    }

    /// Issues the non-blocking connect and registers the socket under `token`.
    fn start(&mut self, proxy: SocketAddr, poll: &Poll, token: Token) {
        self.started = Instant::now();
        self.state = State::Connecting;
        let mut s = match TcpStream::connect(proxy) {
            Ok(s) => s,
            Err(_) => return self.fail(Fail::Connect),
        };
        if poll
            .registry()
            .register(&mut s, token, Interest::READABLE | Interest::WRITABLE)
            .is_err()
        {
            return self.fail(Fail::Connect);
        }
        self.stream = Some(s);
    }

    /// Advances as far as the socket allows; safe to call at any time (a socket that is not
    /// ready answers `WouldBlock`).
    fn drive(&mut self, buf: &mut [u8]) {
        if matches!(self.state, State::Connecting) {
            self.check_connected();
        }
        if let State::Sending(sent) = self.state {
            self.send(sent);
        }
        if matches!(self.state, State::Waiting | State::Held(_)) {
            self.receive(buf);
        }
    }

    fn check_connected(&mut self) {
        let Some(s) = &self.stream else { return };
        if !matches!(s.take_error(), Ok(None)) {
            return self.fail(Fail::Connect);
        }
        match s.peer_addr() {
            Ok(_) => {
                self.local = s.local_addr().ok();
                self.state = State::Sending(0);
            }
            Err(e) if e.kind() == io::ErrorKind::NotConnected => {}
            Err(_) => self.fail(Fail::Connect),
        }
    }

    fn send(&mut self, mut sent: usize) {
        let Some(s) = &mut self.stream else { return };
        while sent < self.wire.len() {
            match s.write(&self.wire[sent..]) {
                Ok(0) => return self.fail(Fail::Connect),
                Ok(k) => sent += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_reset(&e) => return self.fail(Fail::ResetByProxy),
                Err(_) => return self.fail(Fail::Connect),
            }
        }
        self.state = if sent == self.wire.len() {
            State::Waiting
        } else {
            State::Sending(sent)
        };
    }

    fn receive(&mut self, buf: &mut [u8]) {
        for _ in 0..READ_CAP {
            let Some(s) = &mut self.stream else { return };
            let n = match s.read(buf) {
                Ok(0) => return self.closed(Fail::ClosedByProxy),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if is_reset(&e) => return self.closed(Fail::ResetByProxy),
                Err(_) => return self.closed(Fail::ClosedByProxy),
            };
            if !matches!(self.state, State::Waiting) {
                continue; // held: nothing more is expected, and nothing more is read into it
            }
            self.decrypt.apply(&mut buf[..n]);
            self.decoder.push(&buf[..n]);
            match self.decoder.next() {
                Ok(None) => {}
                Ok(Some(p)) => match packet::parse_res_pq(&p, &self.nonce) {
                    Ok(_) => self.state = State::Held(self.started.elapsed()),
                    Err(_) => return self.fail(Fail::BadReply),
                },
                Err(_) => return self.fail(Fail::BadReply),
            }
        }
    }

    /// The proxy ended the connection: a failure while waiting, a drop while held.
    fn closed(&mut self, why: Fail) {
        match self.state {
            State::Held(setup) => {
                self.state = State::Dropped(setup);
                self.stream = None;
            }
            _ => self.fail(why),
        }
    }
}

fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionAborted
    )
}

/// What one burst measured.
pub struct Run {
    pub spec: Spec,
    /// How long the fake front held each WS upgrade answer (after TLS), ms.
    pub front_ms: u64,
    /// Proxy flags beyond the seams (`""` = defaults).
    pub extra: &'static str,
    /// Setup times of served sessions (held to the end or dropped later), ascending, µs.
    setups_us: Vec<u64>,
    /// Served sessions the proxy closed before the burst ended.
    dropped: usize,
    /// Failures by kind, and how long each took to fail (µs, ascending per kind).
    fails: Vec<(Fail, Vec<u64>)>,
    /// Proxy log explanations of the failures: (text, count), most frequent first.
    reasons: Vec<(String, usize)>,
    /// Arrival lag (connect issued − scheduled), p99 and max, µs.
    lag_p99_us: u64,
    lag_max_us: u64,
    /// First to last connect, and first connect to the last outcome, seconds.
    arrival_span_s: f64,
    burst_s: f64,
    /// Proxy CPU (user + system) over the run, seconds.
    proxy_cpu_s: f64,
    load_before: String,
    load_after: String,
    /// Session lines the proxy logged for this run's clients, and how many of them `via ws`.
    logged: usize,
    via_ws: usize,
    /// The proxy's own `connect=` of served sessions: median and p99, ms.
    proxy_connect: Option<(u64, u64)>,
    /// Where this run's proxy log was written.
    log_file: Option<String>,
}

impl Run {
    fn served(&self) -> usize {
        self.setups_us.len()
    }

    fn failed(&self, by_proxy: bool) -> usize {
        self.fails
            .iter()
            .filter(|(f, _)| f.by_proxy() == by_proxy)
            .map(|(_, v)| v.len())
            .sum()
    }

    fn flags(&self) -> &'static str {
        if self.extra.is_empty() {
            "defaults"
        } else {
            self.extra
        }
    }

    fn front(&self) -> String {
        if self.front_ms == 0 {
            "instant".to_string()
        } else {
            format!("+{} ms", self.front_ms)
        }
    }

    fn met(&self) -> bool {
        self.served() == self.spec.sessions
            && self.dropped == 0
            && percentile(&self.setups_us, 99) <= TARGET_P99_MS * 1000
    }
}

/// Every `--burst` spec against a fake front answering each upgrade instantly or `N` ms late
/// (each of `--burst-front-ms`), at default flags, each followed by its `--handshake-pace 0`
/// reference when `--burst-ref` is given.
pub fn runs(o: &Opts) -> Result<Vec<Run>, String> {
    let need = o
        .bursts
        .iter()
        .map(|s| 3 * s.sessions as u64 + FD_SPARE)
        .max()
        .unwrap_or(0);
    if let Some(have) = procfs::nofile() {
        if have < need {
            return Err(format!(
                "burst: open-file soft limit {have} is below the {need} this needs (the proxy's \
                 default --max-connections is (limit − 32) / 3; this process holds each client \
                 and the fake front's 2 descriptors per upstream): `ulimit -n {need}` or more \
                 (bench/run.sh raises the soft limit to 4096 when the hard limit allows)"
            ));
        }
    }
    let mut out = Vec::new();
    for &front_ms in &o.burst_front_ms {
        for &spec in &o.bursts {
            out.push(run(o, spec, front_ms, "")?);
            if o.burst_ref {
                out.push(run(o, spec, front_ms, "--handshake-pace 0")?);
            }
        }
    }
    Ok(out)
}

fn run(o: &Opts, spec: Spec, front_ms: u64, extra: &'static str) -> Result<Run, String> {
    let flags = if extra.is_empty() {
        "default flags"
    } else {
        extra
    };
    step(&format!(
        "burst: {} sessions at {}/s, front +{front_ms} ms ({flags})",
        spec.sessions, spec.rate
    ));
    let dc = FakeDc::start_tls_ws(DcConfig {
        delay: Duration::from_millis(front_ms),
        ..DcConfig::default()
    });
    let mut args: Vec<String> = vec![
        "--dc-ip".into(),
        format!("2:{}", dc.addr()),
        "--tier-order".into(),
        "ws".into(),
    ];
    args.extend(extra.split_whitespace().map(String::from));
    let mut p = ProxyProc::start(&o.proxy, &o.ca, client::SECRET, &args)?;
    let load_before = procfs::loadavg();
    let cpu0 = p.cpu_split();
    let mut sessions = burst(p.addr(), spec)?;
    let cpu1 = p.cpu_split();
    let load_after = procfs::loadavg();
    if !p.alive() {
        return Err(format!("burst: proxy exited; log tail:\n{}", p.tail()));
    }

    // Why did the proxy close the ones it closed? Its lines may trail the close a little.
    let peer = |s: &Session| s.local.map(|a| a.to_string());
    let failed_peers: HashSet<String> = sessions
        .iter()
        .filter(|s| matches!(s.state, State::Failed(..) | State::Dropped(_)))
        .filter_map(peer)
        .collect();
    wait_for(LOG_WAIT, || {
        logged_peers(&p.lines(), &failed_peers) == failed_peers.len()
    });
    let before_close = p.lines();
    // The burst is over: close every held session, then wait for the proxy's line for each.
    for s in &mut sessions {
        s.stream = None;
    }
    let all_peers: HashSet<String> = sessions.iter().filter_map(peer).collect();
    wait_for(LOG_WAIT, || {
        logged_peers(&p.lines(), &all_peers) == all_peers.len()
    });
    let lines = p.lines();
    p.stop();
    let log_file = o.burst_logs.as_deref().and_then(|dir| {
        let name = format!(
            "burst-{}at{}-front{front_ms}ms{}.log",
            spec.sessions,
            spec.rate,
            if extra.is_empty() { "" } else { "-pace0" }
        );
        write_log(dir, &name, &lines)
    });

    let mut setups_us = Vec::new();
    let mut dropped = 0;
    let mut fails: HashMap<Fail, Vec<u64>> = HashMap::new();
    let mut lags = Vec::new();
    let mut reasons: HashMap<String, usize> = HashMap::new();
    for s in &sessions {
        lags.push(s.started.saturating_duration_since(s.due).as_micros() as u64);
        match s.state {
            State::Held(d) => setups_us.push(d.as_micros() as u64),
            State::Dropped(d) => {
                setups_us.push(d.as_micros() as u64);
                dropped += 1;
            }
            State::Failed(f, d) => {
                fails.entry(f).or_default().push(d.as_micros() as u64);
                let why = peer(s)
                    .map(|a| explain(&before_close, &a))
                    .unwrap_or_else(|| "never connected: no proxy line".into());
                *reasons.entry(format!("{}: {why}", f.name())).or_default() += 1;
            }
            State::Idle | State::Connecting | State::Sending(_) | State::Waiting => {
                // burst() resolves every session; a pending one here is a driver bug.
                return Err("burst: a session was left without an outcome".into());
            }
        }
    }
    setups_us.sort_unstable();
    lags.sort_unstable();
    let mut fails: Vec<(Fail, Vec<u64>)> = fails.into_iter().collect();
    for (_, v) in &mut fails {
        v.sort_unstable();
    }
    fails.sort_by_key(|(f, _)| f.name());
    let mut reasons: Vec<(String, usize)> = reasons.into_iter().collect();
    reasons.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));

    let (logged, via_ws, mut connects) = session_lines(&lines, &all_peers);
    connects.sort_unstable();
    let first = sessions.iter().map(|s| s.started).min();
    let last = sessions.iter().map(|s| s.started).max();
    let ends = sessions.iter().map(|s| match s.state {
        State::Held(d) | State::Dropped(d) | State::Failed(_, d) => s.started + d,
        _ => s.started,
    });
    let end = ends.max();
    let secs = |a: Option<Instant>, b: Option<Instant>| match (a, b) {
        (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64(),
        _ => 0.0,
    };
    let ticks = (cpu1.0 + cpu1.1).saturating_sub(cpu0.0 + cpu0.1);
    Ok(Run {
        spec,
        front_ms,
        extra,
        dropped,
        fails,
        reasons,
        lag_p99_us: percentile(&lags, 99),
        lag_max_us: lags.last().copied().unwrap_or(0),
        arrival_span_s: secs(first, last),
        burst_s: secs(first, end),
        proxy_cpu_s: ticks as f64 / procfs::clk_tck() as f64,
        load_before,
        load_after,
        logged,
        via_ws,
        proxy_connect: (!connects.is_empty())
            .then(|| (percentile(&connects, 50), percentile(&connects, 99))),
        log_file,
        setups_us,
    })
}

/// Runs the arrivals and the client loop until every session has an outcome (or the burst
/// deadline passed, which fails the rest as timeouts). Served sessions are returned open.
fn burst(proxy: SocketAddr, spec: Spec) -> Result<Vec<Session>, String> {
    let n = spec.sessions;
    let key = Secret::parse(client::SECRET)
        .map_err(|e| format!("secret: {e:?}"))?
        .key;
    let mut rng = Rng::new().map_err(|e| format!("rng: {e}"))?;
    let mut poll = Poll::new().map_err(|e| format!("poll: {e}"))?;
    let mut events = Events::with_capacity(1024);
    let gap_ns = 1_000_000_000u64 / spec.rate as u64;
    // The first arrival is one gap from now, so building the sessions is not on the clock.
    let t0 = Instant::now() + Duration::from_millis(20);
    let mut sessions: Vec<Session> = (0..n)
        .map(|i| {
            let due = t0 + Duration::from_nanos(i as u64 * gap_ns);
            Session::new(Tag::Intermediate, &key, due, &mut rng)
        })
        .collect();
    let deadline = t0 + Duration::from_nanos(n as u64 * gap_ns) + SESSION_TIMEOUT + BURST_SLACK;
    let mut buf = vec![0u8; 16 * 1024];
    let mut next = 0;
    let mut pending = 0usize;
    let mut next_sweep = t0;
    loop {
        let now = Instant::now();
        while next < n && sessions[next].due <= now {
            let s = &mut sessions[next];
            s.start(proxy, &poll, Token(next));
            s.drive(&mut buf);
            pending += usize::from(s.pending());
            next += 1;
        }
        if now >= next_sweep {
            next_sweep = now + SWEEP;
            for s in sessions[..next].iter_mut().filter(|s| s.pending()) {
                s.drive(&mut buf);
                if s.pending() && s.started.elapsed() >= SESSION_TIMEOUT {
                    s.fail(Fail::Timeout);
                }
                pending -= usize::from(!s.pending());
            }
        }
        if next == n && pending == 0 {
            return Ok(sessions);
        }
        if now >= deadline {
            for s in sessions.iter_mut().filter(|s| s.pending()) {
                s.fail(Fail::Timeout);
            }
            return Ok(sessions);
        }
        let mut wake = next_sweep.min(deadline);
        if next < n {
            wake = wake.min(sessions[next].due);
        }
        match poll.poll(&mut events, Some(wake.saturating_duration_since(now))) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("poll: {e}")),
        }
        for ev in events.iter() {
            let Some(s) = sessions.get_mut(ev.token().0) else {
                continue;
            };
            let was = s.pending();
            s.drive(&mut buf);
            pending -= usize::from(was && !s.pending());
        }
    }
}

/// The peer of a `session PEER DC… via …` close line.
fn session_peer(line: &str) -> Option<&str> {
    let rest = &line[line.find("session ")? + "session ".len()..];
    let peer = rest.split_whitespace().next()?;
    rest.contains(" closed-by=").then_some(peer)
}

/// How many of `peers` have a session close line.
fn logged_peers(lines: &[String], peers: &HashSet<String>) -> usize {
    let seen: HashSet<&str> = lines
        .iter()
        .filter_map(|l| session_peer(l))
        .filter(|p| peers.contains(*p))
        .collect();
    seen.len()
}

/// Close lines of `peers`: (count, count via ws, their `connect=` values in ms).
fn session_lines(lines: &[String], peers: &HashSet<String>) -> (usize, usize, Vec<u64>) {
    let (mut logged, mut via_ws, mut connects) = (0, 0, Vec::new());
    for l in lines {
        if !session_peer(l).is_some_and(|p| peers.contains(p)) {
            continue;
        }
        logged += 1;
        via_ws += usize::from(l.contains(" via ws "));
        let connect = l
            .split_whitespace()
            .find_map(|w| w.strip_prefix("connect="))
            .and_then(|v| v.strip_suffix("ms"))
            .and_then(|v| v.parse::<u64>().ok());
        connects.extend(connect);
    }
    (logged, via_ws, connects)
}

/// The proxy's account of why it closed `peer`: the close line's `closed-by=… reason=…`, and
/// the text of a `client PEER DCn: …` warning about it, if any (up to its first parenthesis).
fn explain(lines: &[String], peer: &str) -> String {
    let close = lines
        .iter()
        .find(|l| session_peer(l) == Some(peer))
        .and_then(|l| l.find("closed-by=").map(|i| l[i..].trim().to_string()));
    let tag = format!("client {peer} ");
    let warn = lines.iter().find_map(|l| {
        let rest = &l[l.find(&tag)? + tag.len()..];
        let text = rest.split_once(": ")?.1;
        Some(text.split(" (").next().unwrap_or(text).trim().to_string())
    });
    match (close, warn) {
        (Some(c), Some(w)) => format!("{c} — {w}"),
        (Some(c), None) => c,
        (None, Some(w)) => w,
        (None, None) => "no proxy line for this client".into(),
    }
}

fn write_log(dir: &Path, name: &str, lines: &[String]) -> Option<String> {
    std::fs::create_dir_all(dir).ok()?;
    let path = dir.join(name);
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(&path, text).ok()?;
    Some(path.display().to_string())
}

/// Nearest-rank percentile of an ascending slice (element `ceil(p/100 · n) − 1`, as the probe
/// applet's summary); 0 when empty.
pub fn percentile(sorted: &[u64], p: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

fn ms(us: u64) -> String {
    if us < 10_000 {
        format!("{:.1} ms", us as f64 / 1000.0)
    } else {
        format!("{} ms", (us + 500) / 1000)
    }
}

/// The report section.
pub fn report(r: &mut String, runs: &[Run]) {
    let _ = writeln!(
        r,
        "\n### Burst of new sessions (DC 2, ws tier, fake front on loopback, a fresh proxy per run)\n"
    );
    let _ = writeln!(
        r,
        "Target: all served, setup p99 ≤ {TARGET_P99_MS} ms, default flags. Setup = from the client's \
         TCP connect call to its decoded `resPQ`, over served sessions (nearest rank). Proxy flags \
         besides the seams (`--dc-ip`/`--tcp-dc-ip` mapping DCs 1-5 and 203 to the closed port \
         127.0.0.1:9, then `--dc-ip 2:<fake front> --tier-order ws --ca-file tests/data/ca.pem \
         --host 127.0.0.1 --port 0 --stats-interval 0`) are the defaults: connect budget 3 s, hedge \
         delay 250 ms, handshake pace 20 ms with a burst of 8 (`--handshake-burst`) and at most \
         50 ms of pacing wait for a client (`--pace-max-wait`), demand-sized pools capped at 4 \
         (`--pool-size`), startup probes on. \"front +N ms\": the fake front holds \
         each WS upgrade answer N ms after TLS, so every upstream takes that much longer to be \
         ready (a stand-in for a front that is not zero milliseconds away).\n"
    );
    let _ = writeln!(
        r,
        "| front | sessions @ rate | proxy flags | served | closed by proxy | other failures | setup median | p99 | max | verdict |"
    );
    let _ = writeln!(r, "|---|---|---|---:|---:|---:|---:|---:|---:|---|");
    for x in runs {
        let (med, p99, max) = if x.setups_us.is_empty() {
            ("—".to_string(), "—".to_string(), "—".to_string())
        } else {
            (
                ms(percentile(&x.setups_us, 50)),
                ms(percentile(&x.setups_us, 99)),
                ms(x.setups_us.last().copied().unwrap_or(0)),
            )
        };
        let verdict = match (x.extra.is_empty(), x.met()) {
            (false, _) => "(reference)",
            (true, true) => "**met**",
            (true, false) => "**missed**",
        };
        let _ = writeln!(
            r,
            "| {} | {} @ {}/s | {} | {}/{} | {} | {} | {med} | {p99} | {max} | {verdict} |",
            x.front(),
            x.spec.sessions,
            x.spec.rate,
            x.flags(),
            x.served(),
            x.spec.sessions,
            x.failed(true),
            x.failed(false),
        );
    }
    let _ = writeln!(r);
    for x in runs {
        let _ = writeln!(
            r,
            "**{}, {} @ {}/s, {}:**",
            x.front(),
            x.spec.sessions,
            x.spec.rate,
            x.flags()
        );
        let rate = if x.arrival_span_s > 0.0 {
            (x.spec.sessions - 1) as f64 / x.arrival_span_s
        } else {
            0.0
        };
        let _ = writeln!(
            r,
            "* arrivals over {:.2} s ({rate:.0}/s); the driver issued each connect at most {} late \
             (p99 {}); last outcome {:.2} s after the first connect",
            x.arrival_span_s,
            ms(x.lag_max_us),
            ms(x.lag_p99_us),
            x.burst_s
        );
        let _ = writeln!(
            r,
            "* proxy CPU during the burst {:.2} s; load average {} before, {} after",
            x.proxy_cpu_s, x.load_before, x.load_after
        );
        let connect = x.proxy_connect.map_or("—".to_string(), |(m, p)| {
            format!("median {m} ms, p99 {p} ms")
        });
        let _ = writeln!(
            r,
            "* proxy log: {} session lines for these clients, {} via ws; its own `connect=` of \
             served sessions {connect}",
            x.logged, x.via_ws
        );
        if x.dropped > 0 {
            let _ = writeln!(
                r,
                "* {} served sessions were closed by the proxy before the burst ended",
                x.dropped
            );
        }
        for (f, v) in &x.fails {
            let _ = writeln!(
                r,
                "* {} × {}, after median {}, max {}",
                v.len(),
                f.name(),
                ms(percentile(v, 50)),
                ms(v.last().copied().unwrap_or(0))
            );
        }
        for (why, k) in &x.reasons {
            let _ = writeln!(r, "  * {k} × {why}");
        }
        if let Some(f) = &x.log_file {
            let _ = writeln!(r, "* proxy log file: `{f}`");
        }
        let _ = writeln!(r);
    }
}
