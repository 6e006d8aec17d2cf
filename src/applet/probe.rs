//! The `probe` applet: judges a proxy the way the Telegram app does (DESIGN.md §7) — TCP connect,
//! obfuscated2 init with the secret, one `req_pq_multi`, wait for a `resPQ` echoing our nonce —
//! timed, repeatable and optionally parallel.
//!
//! Also the blocking MTProto client library ([`MtClient`], [`probe_once`], [`Summary`]) used by
//! the black-box tests and `examples/demo.rs`. Blocking std sockets and threads are fine here: this
//! is a tool, not the reactor. It owns no wire format: the init and ciphers come from `obfs2`,
//! packet boundaries from `framing`, message bytes from `packet`. Fake-TLS (`ee`) clients are not
//! implemented here.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::cli::{self, parse_duration};
use crate::mtproto::framing::{self, Decoder};
use crate::mtproto::obfs2::{self, Cipher, Secret, SecretKind, Tag};
use crate::mtproto::packet;
use crate::rng::Rng;

/// Size of one socket read in [`MtClient::recv_packet`], bytes.
const READ_CHUNK: usize = 16 * 1024;

/// What to connect to and how to speak, for [`MtClient`] and [`probe_once`].
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// The proxy (or, with `secret: None`, a DC or fake DC).
    pub addr: SocketAddr,
    /// `Some`: client init hashed with the key (§1.3), as the Telegram app sends to a proxy.
    /// `None`: raw relay init (§3.1), as a proxy sends to a DC.
    pub secret: Option<Secret>,
    /// Transport inside obfuscated2.
    pub tag: Tag,
    /// Signed DC index written into the init (negative = media, ±10000 = test DC, §1.4).
    pub dc: i16,
    /// Connect timeout, and the per-operation socket read/write timeout of [`MtClient`];
    /// for [`probe_once`] the bound on the whole attempt.
    pub timeout: Duration,
}

/// A blocking obfuscated2 MTProto transport client over one TCP connection.
pub struct MtClient {
    stream: TcpStream,
    tag: Tag,
    encrypt: Cipher,
    decrypt: Cipher,
    decoder: Decoder,
    rng: Rng,
    timeout: Duration,
    bytes_up: usize,
    bytes_down: usize,
}

impl MtClient {
    /// Connects (bounded by `opts.timeout`) and sends the 64-byte init. Seeds its own [`Rng`]
    /// from the OS. Errors: connect/write errors as returned by std; no entropy → `Other`.
    pub fn connect(opts: &ClientOptions) -> io::Result<MtClient> {
        let mut rng = Rng::new().map_err(|e| io::Error::other(format!("no OS randomness: {e}")))?;
        MtClient::connect_with(opts, &mut rng)
    }

    /// [`MtClient::connect`] drawing the init and this client's own padding generator from `rng`.
    pub fn connect_with(opts: &ClientOptions, rng: &mut Rng) -> io::Result<MtClient> {
        let stream = TcpStream::connect_timeout(&opts.addr, opts.timeout)?;
        MtClient::handshake(stream, opts, rng)
    }

    /// Sends the init on an already connected `stream` (`opts.addr` is ignored) and sets its
    /// read/write timeouts to `opts.timeout` and `TCP_NODELAY`.
    pub fn handshake(stream: TcpStream, opts: &ClientOptions, rng: &mut Rng) -> io::Result<Self> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(opts.timeout))?;
        stream.set_write_timeout(Some(opts.timeout))?;
        let key = opts.secret.as_ref().map(|s| &s.key);
        let started = obfs2::initiate(opts.tag, opts.dc, key, rng);
        let mut seed = [0u8; 48];
        rng.fill(&mut seed);
        let mut client = MtClient {
            stream,
            tag: opts.tag,
            encrypt: started.encrypt,
            decrypt: started.decrypt,
            decoder: Decoder::new(opts.tag),
            rng: Rng::from_seed(seed),
            timeout: opts.timeout,
            bytes_up: 0,
            bytes_down: 0,
        };
        client.write_wire(&started.init)?;
        Ok(client)
    }

    /// Transport-encodes `payload` as one packet of this client's tag (padded intermediate adds
    /// 0–15 random bytes), encrypts and writes it. `payload.len()` ≤ `framing::MAX_PACKET`;
    /// abridged payloads should be a multiple of 4 (they are zero-padded otherwise).
    pub fn send_packet(&mut self, payload: &[u8]) -> io::Result<()> {
        if payload.len() > framing::MAX_PACKET {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "payload over MAX_PACKET",
            ));
        }
        let mut wire = framing::encode(self.tag, payload, &mut self.rng);
        self.encrypt.apply(&mut wire);
        self.write_wire(&wire)
    }

    /// Encrypts and writes bytes the caller already framed (or deliberately mis-framed).
    pub fn send_raw_plain(&mut self, plain: &[u8]) -> io::Result<()> {
        let mut wire = plain.to_vec();
        self.encrypt.apply(&mut wire);
        self.write_wire(&wire)
    }

    /// Reads, decrypts and decodes the next packet; each socket read waits at most the
    /// configured timeout. Returns the payload without its length header (padded intermediate:
    /// padding included). Errors: EOF → `UnexpectedEof`; timeout → `TimedOut`; a bad length
    /// header → `InvalidData`.
    pub fn recv_packet(&mut self) -> io::Result<Vec<u8>> {
        self.recv_packet_until(Instant::now() + self.timeout)
    }

    /// [`MtClient::recv_packet`] bounded by an absolute monotonic `deadline` instead.
    pub fn recv_packet_until(&mut self, deadline: Instant) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            match self.decoder.next() {
                Ok(Some(p)) => return Ok(p),
                Ok(None) => {}
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::ErrorKind::TimedOut.into());
            }
            self.stream.set_read_timeout(Some(left))?;
            let n = match self.stream.read(&mut buf) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Err(io::ErrorKind::TimedOut.into())
                }
                Err(e) => return Err(e),
            };
            self.bytes_down += n;
            self.decrypt.apply(&mut buf[..n]);
            self.decoder.push(&buf[..n]);
        }
    }

    /// Half-closes: no more bytes from us; the peer sees EOF.
    pub fn shutdown_write(&mut self) -> io::Result<()> {
        self.stream.shutdown(Shutdown::Write)
    }

    /// The transport this client speaks.
    pub fn tag(&self) -> Tag {
        self.tag
    }

    /// The socket (for peer/local addresses or timeouts).
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Bytes written so far, init included.
    pub fn bytes_up(&self) -> usize {
        self.bytes_up
    }

    /// Bytes read from the socket so far.
    pub fn bytes_down(&self) -> usize {
        self.bytes_down
    }

    /// Decrypted bytes read but not yet returned as a packet.
    pub fn buffered(&self) -> usize {
        self.decoder.buffered()
    }

    /// The socket and the two ciphers (encrypt = us→peer, decrypt = peer→us), for tests that
    /// drive the stream by hand. Bytes already buffered by the decoder are dropped.
    pub fn into_parts(self) -> (TcpStream, Cipher, Cipher) {
        (self.stream, self.encrypt, self.decrypt)
    }

    /// The socket alone.
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }

    fn write_wire(&mut self, wire: &[u8]) -> io::Result<()> {
        self.stream.write_all(wire).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock => io::ErrorKind::TimedOut.into(),
            _ => e,
        })?;
        self.bytes_up += wire.len();
        Ok(())
    }
}

/// How one probe attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A `resPQ` echoing our nonce arrived in time.
    Ok,
    /// Connected, but no complete reply before the deadline.
    Timeout,
    /// The proxy closed or reset the connection before replying.
    ClosedEarly,
    /// A reply arrived but is not a valid `resPQ` for our nonce (or its framing is broken).
    BadReply,
    /// TCP connect refused, unreachable or timed out.
    ConnectFailed,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Outcome::Ok => "OK",
            Outcome::Timeout => "TIMEOUT",
            Outcome::ClosedEarly => "CLOSED",
            Outcome::BadReply => "BAD_REPLY",
            Outcome::ConnectFailed => "CONNECT_FAILED",
        })
    }
}

/// One timed probe attempt.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub outcome: Outcome,
    /// Monotonic milliseconds from the start of the connect to the outcome.
    pub ms: u64,
    /// Bytes written (init + `req_pq_multi` packet when all went out).
    pub bytes_up: usize,
    /// Bytes read from the socket.
    pub bytes_down: usize,
    /// Empty on success; otherwise why (human-readable).
    pub detail: String,
}

/// One probe (DESIGN.md §7): connect, init, `req_pq_multi` with a random nonce, wait for `resPQ`,
/// check the nonce with `packet::parse_res_pq`. `opts.timeout` bounds the whole attempt.
pub fn probe_once(opts: &ClientOptions, rng: &mut Rng) -> Attempt {
    let start = Instant::now();
    let deadline = start + opts.timeout;
    let done = |outcome, up, down, detail: String| Attempt {
        outcome,
        ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
        bytes_up: up,
        bytes_down: down,
        detail,
    };
    let stream = match TcpStream::connect_timeout(&opts.addr, opts.timeout) {
        Ok(s) => s,
        Err(e) => return done(Outcome::ConnectFailed, 0, 0, format!("connect: {e}")),
    };
    let mut opts_left = opts.clone();
    opts_left.timeout = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    let mut client = match MtClient::handshake(stream, &opts_left, rng) {
        Ok(c) => c,
        Err(e) => return done(io_outcome(&e), 0, 0, format!("sending init: {e}")),
    };
    let mut nonce = [0u8; 16];
    rng.fill(&mut nonce);
    let msg_id = packet::msg_id(unix_ms());
    let sent = client.send_packet(&packet::req_pq_multi(&nonce, msg_id));
    let (up, down) = (client.bytes_up(), client.bytes_down());
    if let Err(e) = sent {
        return done(
            io_outcome(&e),
            up,
            down,
            format!("sending req_pq_multi: {e}"),
        );
    }
    let reply = client.recv_packet_until(deadline);
    let (up, down) = (client.bytes_up(), client.bytes_down());
    match reply {
        Ok(p) => match packet::parse_res_pq(&p, &nonce) {
            Ok(_) => done(Outcome::Ok, up, down, String::new()),
            Err(e) => done(Outcome::BadReply, up, down, format!("reply: {e}")),
        },
        Err(e) if e.kind() == io::ErrorKind::TimedOut => {
            let d = format!("no resPQ within {}", fmt_duration(opts.timeout));
            done(Outcome::Timeout, up, down, d)
        }
        Err(e) => done(io_outcome(&e), up, down, format!("waiting for resPQ: {e}")),
    }
}

fn io_outcome(e: &io::Error) -> Outcome {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => Outcome::Timeout,
        io::ErrorKind::InvalidData => Outcome::BadReply,
        _ => Outcome::ClosedEarly,
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Latency and outcome totals over a run of attempts. Percentiles are nearest-rank over the
/// `ms` of **all** attempts (a failure costs the user its waiting time too); 0 when empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub count: usize,
    pub ok: usize,
    pub timeout: usize,
    pub closed_early: usize,
    pub bad_reply: usize,
    pub connect_failed: usize,
    pub median_ms: u64,
    pub p90_ms: u64,
    pub p99_ms: u64,
    pub max_ms: u64,
    /// Attempts with `ms > 1000`.
    pub over_1s: usize,
    /// Attempts with `ms > 3000`.
    pub over_3s: usize,
}

impl Summary {
    pub fn from(attempts: &[Attempt]) -> Summary {
        let mut ms: Vec<u64> = attempts.iter().map(|a| a.ms).collect();
        ms.sort_unstable();
        let count_of = |o| attempts.iter().filter(|a| a.outcome == o).count();
        Summary {
            count: attempts.len(),
            ok: count_of(Outcome::Ok),
            timeout: count_of(Outcome::Timeout),
            closed_early: count_of(Outcome::ClosedEarly),
            bad_reply: count_of(Outcome::BadReply),
            connect_failed: count_of(Outcome::ConnectFailed),
            median_ms: percentile(&ms, 50),
            p90_ms: percentile(&ms, 90),
            p99_ms: percentile(&ms, 99),
            max_ms: ms.last().copied().unwrap_or(0),
            over_1s: ms.iter().filter(|&&m| m > 1000).count(),
            over_3s: ms.iter().filter(|&&m| m > 3000).count(),
        }
    }
}

/// Nearest-rank percentile of an ascending slice: element `ceil(p/100 · n) − 1`.
fn percentile(sorted: &[u64], p: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} attempts: {} OK", self.count, self.ok)?;
        let fails = [
            (self.timeout, Outcome::Timeout),
            (self.closed_early, Outcome::ClosedEarly),
            (self.bad_reply, Outcome::BadReply),
            (self.connect_failed, Outcome::ConnectFailed),
        ];
        for (n, o) in fails.iter().filter(|(n, _)| *n > 0) {
            write!(f, ", {n} {o}")?;
        }
        write!(
            f,
            " | ms: median {} p90 {} p99 {} max {} | over 1s: {}, over 3s: {}",
            self.median_ms, self.p90_ms, self.p99_ms, self.max_ms, self.over_1s, self.over_3s
        )
    }
}

fn fmt_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// `tg-ws-proxy probe --help` before the duration grammar.
const HELP_HEAD: &str = "\
tg-ws-proxy probe: check a proxy the way the Telegram app does
(obfuscated2 init, req_pq_multi -> resPQ), timed and repeatable.

USAGE: tg-ws-proxy probe [--server] HOST:PORT [--secret HEX] [OPTIONS]

  --server HOST:PORT   proxy to probe (or give it as the first positional argument)
  --port N             port, when --server is a bare host
  --secret HEX         proxy secret: 32 hex, dd+32 hex (first of a comma list is used);
                       also TG_SECRET or --secret-file PATH. ee (fake-TLS) is not supported yet
  --raw                no secret: send a raw relay init (talk to a DC directly)
  --dc N               DC number (default 2); --media for the media DC
  --tag T              abridged | intermediate | padded
                       (default: padded for dd secrets, else intermediate)
  --count N            attempts (default 1)
  --interval D         between attempt starts, per worker (default 1s)
  --timeout D          bound on one whole attempt (default 3s)
  --parallel N         attempts running at a time (default 1)
  -q, --quiet          print only the summary
  -h, --help           this text
";

/// `tg-ws-proxy probe --help` after the duration grammar.
const HELP_TAIL: &str = "\
Exit status: 0 if every attempt got a resPQ, 1 otherwise, 2 on bad flags.
";

/// `tg-ws-proxy probe --help`: flags, the shared duration grammar, exit status.
pub fn help() -> String {
    format!("{HELP_HEAD}\n{}\n\n{HELP_TAIL}", cli::DURATION_HELP)
}

/// Parsed `probe` flags.
#[derive(Debug)]
struct ProbeArgs {
    client: ClientOptions,
    count: usize,
    interval: Duration,
    parallel: usize,
    quiet: bool,
}

fn flag<T>(
    args: &mut pico_args::Arguments,
    name: &'static str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<T>, String> {
    let v: Option<String> = args.opt_value_from_str(name).map_err(|e| e.to_string())?;
    v.map(|s| parse(&s).map_err(|e| format!("{name}: {e}")))
        .transpose()
}

fn positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("expected a positive integer, got '{s}'")),
    }
}

/// Parses the flags (applet name already removed). `Ok(None)` = `--help`. `env_secret` is
/// `TG_SECRET`, passed in so tests do not touch the process environment.
fn parse_args(
    mut args: pico_args::Arguments,
    env_secret: Option<String>,
) -> Result<Option<ProbeArgs>, String> {
    if args.contains(["-h", "--help"]) {
        return Ok(None);
    }
    let quiet = args.contains(["-q", "--quiet"]);
    let raw = args.contains("--raw");
    let media = args.contains("--media");
    let server: Option<String> = flag(&mut args, "--server", |s| Ok(s.to_string()))?;
    let port = flag(&mut args, "--port", |s| {
        s.parse::<u16>()
            .map_err(|_| format!("expected a port number, got '{s}'"))
    })?;
    let secret_flag: Option<String> = flag(&mut args, "--secret", |s| Ok(s.to_string()))?;
    let secret_file = flag(&mut args, "--secret-file", |p| {
        std::fs::read_to_string(p).map_err(|e| format!("cannot read '{p}': {e}"))
    })?;
    let dc = flag(&mut args, "--dc", |s| match s.parse::<i16>() {
        Ok(n) if n != 0 => Ok(n),
        _ => Err(format!("expected a DC number, got '{s}'")),
    })?
    .unwrap_or(2);
    let tag = flag(&mut args, "--tag", |s| match s {
        "abridged" => Ok(Tag::Abridged),
        "intermediate" => Ok(Tag::Intermediate),
        "padded" | "padded-intermediate" => Ok(Tag::PaddedIntermediate),
        _ => Err(format!(
            "expected abridged, intermediate or padded, got '{s}'"
        )),
    })?;
    let count = flag(&mut args, "--count", positive)?.unwrap_or(1);
    let interval = flag(&mut args, "--interval", parse_duration)?.unwrap_or(Duration::from_secs(1));
    let timeout = flag(&mut args, "--timeout", |s| {
        parse_duration(s).and_then(|d| {
            if d.is_zero() {
                Err("must be above 0".to_string())
            } else {
                Ok(d)
            }
        })
    })?
    .unwrap_or(Duration::from_secs(3));
    let parallel = flag(&mut args, "--parallel", positive)?.unwrap_or(1);
    let positional: Option<String> = args.opt_free_from_str().map_err(|e| e.to_string())?;
    let rest = args.finish();
    if let Some(extra) = rest.first() {
        return Err(format!("unexpected argument '{}'", extra.to_string_lossy()));
    }

    let server = match (server, positional) {
        (Some(_), Some(p)) => return Err(format!("unexpected argument '{p}' (--server given)")),
        (Some(s), None) | (None, Some(s)) => s,
        (None, None) => return Err("--server: missing (HOST:PORT)".to_string()),
    };
    let addr = resolve(&server, port).map_err(|e| format!("--server: {e}"))?;

    let (secret_src, secret_text) = match (secret_flag, secret_file, env_secret) {
        (Some(s), _, _) => ("--secret", Some(s)),
        (None, Some(s), _) => ("--secret-file", Some(s)),
        (None, None, Some(s)) => ("TG_SECRET", Some(s)),
        (None, None, None) => ("--secret", None),
    };
    let secret = match (raw, secret_text) {
        (true, Some(_)) => return Err(format!("--raw: conflicts with {secret_src}")),
        (true, None) => None,
        (false, None) => {
            return Err("--secret: missing (or TG_SECRET, --secret-file, --raw)".to_string())
        }
        (false, Some(text)) => {
            let first = text.split(',').next().unwrap_or("").trim();
            let s = Secret::parse(first).map_err(|e| format!("{secret_src}: {e}"))?;
            if let SecretKind::Ee(_) = s.kind {
                return Err(format!(
                    "{secret_src}: ee (fake-TLS) secrets are not supported by probe yet"
                ));
            }
            Some(s)
        }
    };
    let default_tag = match secret.as_ref().map(|s| &s.kind) {
        Some(SecretKind::Dd) => Tag::PaddedIntermediate,
        _ => Tag::Intermediate,
    };
    let dc = if media { -dc.saturating_abs() } else { dc };
    Ok(Some(ProbeArgs {
        client: ClientOptions {
            addr,
            secret,
            tag: tag.unwrap_or(default_tag),
            dc,
            timeout,
        },
        count,
        interval,
        parallel,
        quiet,
    }))
}

fn resolve(server: &str, port: Option<u16>) -> Result<SocketAddr, String> {
    let found = match port {
        Some(p) => (server.trim_matches(|c| c == '[' || c == ']'), p).to_socket_addrs(),
        None => server.to_socket_addrs(),
    };
    let mut addrs = found.map_err(|e| format!("cannot resolve '{server}': {e}"))?;
    addrs
        .next()
        .ok_or_else(|| format!("'{server}' resolves to no address"))
}

/// Runs the applet; returns the exit status (0 all OK, 1 any failure, 2 bad flags).
pub fn main(args: pico_args::Arguments) -> i32 {
    let opts = match parse_args(args, std::env::var("TG_SECRET").ok()) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{}", help());
            return 0;
        }
        Err(e) => {
            eprintln!("probe: {e}");
            return 2;
        }
    };
    let mut rng = match Rng::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("probe: no OS randomness: {e}");
            return 1;
        }
    };
    if !opts.quiet {
        let c = &opts.client;
        let secret = c.secret.as_ref().map_or("raw".to_string(), Secret::masked);
        println!(
            "probing {} dc {} ({}, secret {}), {} attempt(s), {} at a time, timeout {}",
            c.addr,
            c.dc,
            c.tag.name(),
            secret,
            opts.count,
            opts.parallel,
            fmt_duration(c.timeout)
        );
    }
    let attempts = run_attempts(&opts, &mut rng);
    let summary = Summary::from(&attempts);
    println!("{summary}");
    if summary.ok == summary.count {
        0
    } else {
        1
    }
}

/// Runs `count` attempts on `parallel` worker threads, printing one line per attempt as it ends.
fn run_attempts(opts: &ProbeArgs, rng: &mut Rng) -> Vec<Attempt> {
    let start = Instant::now();
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<(usize, Instant, Attempt)>();
    let workers = opts.parallel.min(opts.count);
    let mut seeds = Vec::with_capacity(workers);
    for _ in 0..workers {
        let mut seed = [0u8; 48];
        rng.fill(&mut seed);
        seeds.push(seed);
    }
    let mut out = Vec::with_capacity(opts.count);
    std::thread::scope(|scope| {
        for seed in seeds {
            let tx = tx.clone();
            let next = &next;
            scope.spawn(move || {
                let mut rng = Rng::from_seed(seed);
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= opts.count {
                        break;
                    }
                    let began = Instant::now();
                    let a = probe_once(&opts.client, &mut rng);
                    if tx.send((n, began, a)).is_err() {
                        break;
                    }
                    if next.load(Ordering::Relaxed) < opts.count {
                        let wake = began + opts.interval;
                        std::thread::sleep(wake.saturating_duration_since(Instant::now()));
                    }
                }
            });
        }
        drop(tx);
        for (n, began, a) in rx {
            if !opts.quiet {
                println!("{}", attempt_line(n + 1, began.duration_since(start), &a));
            }
            out.push(a);
        }
    });
    out
}

/// `t+1.203s n=3 175ms OK up=44B down=104B` (+ ` (detail)` when there is one).
fn attempt_line(n: usize, since_start: Duration, a: &Attempt) -> String {
    let mut line = format!(
        "t+{}.{:03}s n={n} {}ms {} up={}B down={}B",
        since_start.as_secs(),
        since_start.subsec_millis(),
        a.ms,
        a.outcome,
        a.bytes_up,
        a.bytes_down
    );
    if !a.detail.is_empty() {
        line.push_str(&format!(" ({})", a.detail));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(outcome: Outcome, ms: u64) -> Attempt {
        Attempt {
            outcome,
            ms,
            bytes_up: 0,
            bytes_down: 0,
            detail: String::new(),
        }
    }

    fn args(v: &[&str]) -> pico_args::Arguments {
        pico_args::Arguments::from_vec(v.iter().map(Into::into).collect())
    }

    const KEY: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn summary_percentiles_nearest_rank() {
        let v: Vec<Attempt> = (1..=100).map(|i| attempt(Outcome::Ok, i * 10)).collect();
        let s = Summary::from(&v);
        assert_eq!((s.count, s.ok), (100, 100));
        assert_eq!(
            (s.median_ms, s.p90_ms, s.p99_ms, s.max_ms),
            (500, 900, 990, 1000)
        );
        assert_eq!((s.over_1s, s.over_3s), (0, 0));
    }

    #[test]
    fn summary_counts_failures_and_slow_attempts() {
        let v = [
            attempt(Outcome::Ok, 5),
            attempt(Outcome::Timeout, 3001),
            attempt(Outcome::ClosedEarly, 1001),
            attempt(Outcome::ConnectFailed, 0),
            attempt(Outcome::BadReply, 1000),
        ];
        let s = Summary::from(&v);
        assert_eq!(
            (
                s.ok,
                s.timeout,
                s.closed_early,
                s.bad_reply,
                s.connect_failed
            ),
            (1, 1, 1, 1, 1)
        );
        assert_eq!(
            (s.median_ms, s.max_ms, s.over_1s, s.over_3s),
            (1000, 3001, 2, 1)
        );
        let text = s.to_string();
        assert!(
            text.contains("1 TIMEOUT") && text.contains("1 CONNECT_FAILED"),
            "{text}"
        );
        assert_eq!(Summary::from(&[]).median_ms, 0);
        assert_eq!(Summary::from(&[attempt(Outcome::Ok, 7)]).p99_ms, 7);
    }

    #[test]
    fn flags_defaults_and_tag_choice() {
        let a = parse_args(args(&["127.0.0.1:1443", "--secret", KEY]), None)
            .unwrap()
            .unwrap();
        assert_eq!(a.client.addr, "127.0.0.1:1443".parse().unwrap());
        assert_eq!((a.client.tag, a.client.dc), (Tag::Intermediate, 2));
        assert_eq!((a.count, a.parallel, a.quiet), (1, 1, false));
        assert_eq!(
            (a.interval, a.client.timeout),
            (Duration::from_secs(1), Duration::from_secs(3))
        );

        let dd = format!("dd{KEY}");
        let v = [
            "--server",
            "127.0.0.1:9",
            "--secret",
            &dd,
            "--dc",
            "4",
            "--media",
            "-q",
        ];
        let a = parse_args(args(&v), None).unwrap().unwrap();
        assert_eq!(
            (a.client.tag, a.client.dc, a.quiet),
            (Tag::PaddedIntermediate, -4, true)
        );

        let v = [
            "127.0.0.1:9",
            "--tag",
            "abridged",
            "--count",
            "5",
            "--timeout",
            "250ms",
        ];
        let a = parse_args(args(&v), Some(KEY.to_string()))
            .unwrap()
            .unwrap();
        assert_eq!((a.client.tag, a.count), (Tag::Abridged, 5));
        assert_eq!(a.client.timeout, Duration::from_millis(250));
        assert_eq!(a.client.secret.unwrap().key_hex(), KEY);

        let a = parse_args(args(&["127.0.0.1:9", "--raw"]), None)
            .unwrap()
            .unwrap();
        assert!(a.client.secret.is_none());
        assert!(parse_args(args(&["--help"]), None).unwrap().is_none());
    }

    #[test]
    fn bad_flags_name_the_flag() {
        let cases: [(&[&str], &str); 8] = [
            (&["127.0.0.1:9", "--secret", KEY, "--count", "0"], "--count"),
            (
                &["127.0.0.1:9", "--secret", KEY, "--timeout", "0"],
                "--timeout",
            ),
            (&["127.0.0.1:9", "--secret", KEY, "--tag", "xx"], "--tag"),
            (&["127.0.0.1:9", "--secret", "zz"], "--secret"),
            (&["127.0.0.1:9"], "--secret"),
            (&["--secret", KEY], "--server"),
            (&["127.0.0.1:9", "--secret", KEY, "--bogus"], "--bogus"),
            (
                &["127.0.0.1:9", "--secret", KEY, "--interval"],
                "--interval",
            ),
        ];
        for (v, name) in cases {
            let e = parse_args(args(v), None).unwrap_err();
            assert!(e.contains(name), "{v:?}: {e}");
        }
        let ee = format!("ee{KEY}6578616d706c652e636f6d");
        let e = parse_args(args(&["127.0.0.1:9", "--secret", &ee]), None).unwrap_err();
        assert!(e.contains("ee"), "{e}");
    }

    #[test]
    fn connect_refused_is_connect_failed() {
        // Bind then drop: the port is (almost certainly) closed right after.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let opts = ClientOptions {
            addr,
            secret: None,
            tag: Tag::Intermediate,
            dc: 2,
            timeout: Duration::from_secs(2),
        };
        let a = probe_once(&opts, &mut Rng::from_seed([7; 48]));
        assert_eq!(a.outcome, Outcome::ConnectFailed, "{a:?}");
        assert_eq!(a.bytes_up, 0);
    }

    #[test]
    fn attempt_line_format() {
        let mut a = attempt(Outcome::Ok, 175);
        a.bytes_up = 44;
        a.bytes_down = 104;
        let l = attempt_line(3, Duration::from_millis(1203), &a);
        assert_eq!(l, "t+1.203s n=3 175ms OK up=44B down=104B");
        a.outcome = Outcome::Timeout;
        a.detail = "no resPQ within 3s".into();
        assert!(attempt_line(1, Duration::ZERO, &a)
            .ends_with("TIMEOUT up=44B down=104B (no resPQ within 3s)"));
    }
}
