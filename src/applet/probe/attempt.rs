//! One timed probe attempt ([`probe_once`]: connect, init, `req_pq_multi`, wait for `resPQ`,
//! check our nonce) and the totals over many ([`Summary`]: outcome counts, nearest-rank
//! percentiles).
//!
//! Owns the outcome vocabulary of the `probe` applet and of the tests that use it; message
//! bytes come from `mtproto::packet`, the transport from [`MtClient`]. Blocking, on the
//! caller's thread.

use std::fmt;
use std::io;
use std::net::TcpStream;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::client::{ClientOptions, MtClient};
use crate::error::Failure;
use crate::mtproto::obfs2::SecretKind;
use crate::mtproto::packet;
use crate::rng::Rng;

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
    /// TCP connect refused, timed out or no route to the host (`EHOSTUNREACH`: on the local
    /// network, nothing answered its address): nothing answers at that address (or it is
    /// blocked).
    ConnectFailed,
    /// The connect failed in this host's OS before any packet left: network unreachable or
    /// down, no local address (`ENETUNREACH`, `ENETDOWN`, `EADDRNOTAVAIL`): the local network
    /// is down, not the proxy. (`EHOSTUNREACH` is [`Outcome::ConnectFailed`]: a LAN address
    /// that does not answer.)
    NetworkDown,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Outcome::Ok => "OK",
            Outcome::Timeout => "TIMEOUT",
            Outcome::ClosedEarly => "CLOSED",
            Outcome::BadReply => "BAD_REPLY",
            Outcome::ConnectFailed => "CONNECT_FAILED",
            Outcome::NetworkDown => "NETWORK_DOWN",
        })
    }
}

/// One timed probe attempt.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// How it ended.
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

/// One probe, as the Telegram app judges a proxy: connect, init, `req_pq_multi` with a random nonce, wait for `resPQ`,
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
        Err(e) if is_network_down(&e) => {
            return done(Outcome::NetworkDown, 0, 0, format!("connect: {e}"))
        }
        Err(e) => return done(Outcome::ConnectFailed, 0, 0, format!("connect: {e}")),
    };
    let mut opts_left = opts.clone();
    opts_left.timeout = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    let mut client = match MtClient::handshake(stream, &opts_left, rng) {
        Ok(c) => c,
        Err(e) => {
            let step = match opts.secret.as_ref().map(|s| &s.kind) {
                Some(SecretKind::Ee(_)) => "fake-TLS handshake or init",
                _ => "sending init",
            };
            return done(io_outcome(&e), 0, 0, format!("{step}: {e}"));
        }
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

/// True for a connect error of this host's network (the OS refused to send): see
/// [`Outcome::NetworkDown`]. `EHOSTUNREACH` is not one: on Linux a connect gets it when the
/// address is on the local network and nothing answers there (its ARP or neighbour lookup
/// failed: a router switched off, a mistyped LAN address), which is "nothing answers at the
/// address", not this host's network being down.
/// The dialler's own OS-error classes say it (`net::dial::classify_io`, what `check` counts as
/// "network only": network unreachable or down, no local address).
fn is_network_down(e: &io::Error) -> bool {
    matches!(
        crate::net::dial::classify_io(e),
        Failure::NetUnreachable | Failure::AddrUnavailable
    )
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
    /// Attempts summarised.
    pub count: usize,
    /// Attempts per [`Outcome`]: `Ok`, `Timeout`, `ClosedEarly`, `BadReply`, `ConnectFailed`.
    pub ok: usize,
    /// See [`Summary::ok`].
    pub timeout: usize,
    /// See [`Summary::ok`].
    pub closed_early: usize,
    /// See [`Summary::ok`].
    pub bad_reply: usize,
    /// See [`Summary::ok`].
    pub connect_failed: usize,
    /// See [`Summary::ok`].
    pub network_down: usize,
    /// Attempts closed in answer to our init with nothing sent back (`ClosedEarly`, 0 bytes
    /// down): the peer heard us and refused.
    pub init_refused: usize,
    /// Median attempt time, ms.
    pub median_ms: u64,
    /// 90th percentile attempt time, ms.
    pub p90_ms: u64,
    /// 99th percentile attempt time, ms.
    pub p99_ms: u64,
    /// Longest attempt, ms.
    pub max_ms: u64,
    /// Attempts with `ms > 1000`.
    pub over_1s: usize,
    /// Attempts with `ms > 3000`.
    pub over_3s: usize,
}

impl Summary {
    /// Totals over `attempts` (any order).
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
            network_down: count_of(Outcome::NetworkDown),
            init_refused: attempts
                .iter()
                .filter(|a| a.outcome == Outcome::ClosedEarly && a.bytes_down == 0)
                .count(),
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
            (self.network_down, Outcome::NetworkDown),
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

impl Summary {
    /// One line telling apart what the failures mean (issue 23 §6), or `None` when every
    /// attempt got its `resPQ`: this host's network down (the OS error as it is), nothing
    /// answering at the address, reached but the init answered by a close (a wrong secret, or
    /// a proxy that has no route to Telegram), connected but silent.
    pub fn diagnosis(&self, attempts: &[Attempt]) -> Option<String> {
        if self.ok == self.count {
            return None;
        }
        let first = |o: Outcome| {
            attempts
                .iter()
                .find(|a| a.outcome == o)
                .map_or(String::new(), |a| a.detail.clone())
        };
        let failed = self.count - self.ok;
        let line = if self.network_down == failed {
            format!(
                "this host's network is down: the OS refused to send ({}); not the proxy, not \
                 Telegram",
                first(Outcome::NetworkDown)
            )
        } else if self.connect_failed + self.network_down == failed {
            format!(
                "nothing answers at the address: {} (wrong host or port, the proxy not running, \
                 or the address blocked)",
                first(Outcome::ConnectFailed)
            )
        } else if self.init_refused == failed {
            "reached, but our init was answered by a close with nothing sent back: a wrong \
             secret (or the wrong proxy), or a proxy with no working route to Telegram (its \
             log and `ctl status` say which)"
                .to_string()
        } else if self.timeout == failed {
            "connected, but no resPQ in time: a proxy that cannot reach Telegram, one that \
             holds a wrong secret's connection open (masking, drain), or a frozen path"
                .to_string()
        } else {
            "mixed failures: see the attempt lines".to_string()
        };
        Some(format!("diagnosis: {line}"))
    }
}

/// `3s` for a whole number of seconds, else milliseconds (`250ms`, `1500ms`).
pub(super) fn fmt_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::mtproto::obfs2::Tag;

    /// An attempt with `outcome` after `ms`, no bytes (shared with the applet's tests).
    pub(in crate::applet::probe) fn attempt(outcome: Outcome, ms: u64) -> Attempt {
        Attempt {
            outcome,
            ms,
            bytes_up: 0,
            bytes_down: 0,
            detail: String::new(),
        }
    }

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

    /// Issue 23 §6: the failures say what they mean — the local network, nothing at the
    /// address, the init refused, silence — each in its own diagnosis.
    #[test]
    fn diagnosis_tells_network_down_refused_init_and_silence_apart() {
        let with = |o: Outcome, detail: &str| Attempt {
            detail: detail.into(),
            ..attempt(o, 1)
        };
        let diag = |v: &[Attempt]| Summary::from(v).diagnosis(v).unwrap_or_default();
        let down = [with(
            Outcome::NetworkDown,
            "connect: Network is unreachable (os error 101)",
        )];
        let d = diag(&down);
        assert!(
            d.contains("network is down") && d.contains("Network is unreachable (os error 101)"),
            "{d}"
        );
        assert!(Summary::from(&down).to_string().contains("1 NETWORK_DOWN"));
        let nothing = [with(Outcome::ConnectFailed, "connect: Connection refused")];
        assert!(
            diag(&nothing).contains("nothing answers"),
            "{}",
            diag(&nothing)
        );
        let refused = [
            attempt(Outcome::ClosedEarly, 3),
            attempt(Outcome::ClosedEarly, 4),
        ];
        assert!(
            diag(&refused).contains("wrong secret"),
            "{}",
            diag(&refused)
        );
        let mut late = attempt(Outcome::ClosedEarly, 3);
        late.bytes_down = 90;
        assert!(
            diag(&[late.clone()]).contains("mixed"),
            "a close after a reply is not a refusal"
        );
        assert!(diag(&[attempt(Outcome::Timeout, 3000)]).contains("no resPQ in time"));
        assert_eq!(
            Summary::from(&[attempt(Outcome::Ok, 3)]).diagnosis(&[]),
            None
        );
    }

    /// Review (issue 23 §6): a LAN address that does not answer (its ARP lookup fails, a
    /// router switched off or a mistyped address) fails the connect with `EHOSTUNREACH`; that
    /// is nothing answering at the address, not this host's network being down (whose
    /// diagnosis says "not the proxy"). The OS errors of a host without a network stay
    /// NETWORK_DOWN.
    #[test]
    fn no_route_to_a_lan_host_is_not_this_hosts_network_down() {
        let os = io::Error::from_raw_os_error;
        assert!(!is_network_down(&os(libc::EHOSTUNREACH)));
        for e in [libc::ENETUNREACH, libc::ENETDOWN, libc::EADDRNOTAVAIL] {
            assert!(is_network_down(&os(e)), "{}", os(e));
        }
        assert!(!is_network_down(&os(libc::ECONNREFUSED)));
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
}
