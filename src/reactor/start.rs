//! Building the reactor at start: what is sized or opened once (poll, signal pipe, control
//! socket, listener, slab, buffer pools, resolver, fake-TLS gate, ladder), before
//! [`Reactor::apply`] (`reload`) applies the configuration's live settings, the path a reload
//! takes too. The loop itself is `reactor`'s; nothing here runs after `new` returns.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use log::{info, warn};
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Registry};
use slab::Slab;

use super::listen::{self, AfterBindError, BindRetry};
use super::shared::Shared;
use super::signals::SignalPipe;
use super::tgranges::{initial_ranges, TgRefresh};
use super::{cflist, control, drain::Life, wall_clock_s, Accept, Reactor};
use super::{BAD_LOG_INTERVAL_MS, FOLD_KINDS, WHEEL_SLOTS, WHEEL_TICK_MS};
use crate::buf::BufPool;
use crate::config::Config;
use crate::conn::mask::MaskConns;
use crate::conn::per_ip::{Limits, PerIp};
use crate::dns::{Resolver, ResolverConfig};
use crate::logging::{Folds, RateLimited};
use crate::mem::trim::Trim;
use crate::mtproto::faketls::gate::{EeKey, Gate};
use crate::net::dial::Upstream;
use crate::net::tls;
use crate::relay::Scratch;
use crate::rng::Rng;
use crate::route::dc_table::{DcTable, UnknownDsts};
use crate::route::ladder::Ladder;
use crate::route::prober::{Prober, SuspendWatch};
use crate::stats::Stats;
use crate::timer::Wheel;
use crate::token::{self, DNS};

/// The relay scratch holds this many relay buffers (`--buf-kb` each; 64 KiB at the default).
const SCRATCH_BUFS: usize = 4;

/// Returned relay buffers kept resident for reuse; the rest go back to the OS.
const WARM_BLOCKS: usize = 8;

/// Sessions on pooled upstreams that may keep a replay prefix (one `--buf-kb` block each) at
/// once, at most: one chunk of the buffer pool's address space (1 MiB at the default 16 KiB).
/// A session that finds none free cannot be replayed (docs/design.md §5).
const REPLAY_BLOCKS: usize = 64;

impl Reactor {
    /// Builds what is sized or opened once (poll, listener, slab, pools, resolver, control
    /// socket, gate), then applies `cfg`'s live settings through [`Reactor::apply`], the path a
    /// reload takes too.
    pub(super) fn new(mut cfg: Config) -> io::Result<Reactor> {
        let tls = client_tls(&cfg)?;
        let randomness = |e| io::Error::other(format!("randomness: {e}"));
        let rng = Rng::new().map_err(randomness)?;
        let ladder_rng = Rng::new().map_err(randomness)?;
        let poll = Poll::new()?;
        // Before the listener: once `listening on` is logged, a SIGHUP must not kill us.
        let signals = SignalPipe::new(poll.registry())?;
        // Before the listener: a second instance on the same control socket stops here.
        let control = (cfg.control_socket.as_deref())
            .map(|p| control::Control::open(p, poll.registry()))
            .transpose()?;
        let (listener, bind_retry) = bind_at_start(&cfg, poll.registry())?;
        let ways = super::ways::Ways::start(&cfg, poll.registry())?;
        let listen = listener
            .as_ref()
            .map_or(Ok(cfg.listen), TcpListener::local_addr)?;
        let capacity = cfg.max_connections.min(token::MAX_SLOT);
        let (clock, now) = (Instant::now(), 1);
        let (gate, ee_keys, wall_s) = gate(&cfg, now);
        let dns = start_resolver(&cfg, poll.registry())?;
        let (ladder, cflist) = ladder(&mut cfg, listen, ladder_rng, now);
        let stats_ms = cfg.stats_interval.as_millis() as u64;
        let fold_ms = cfg.log_fold_interval.as_millis() as u64;
        let trim = Trim::new(cfg.mem_trim_delay.as_millis() as u64);
        let (tg_ranges, tg_source) = initial_ranges(&cfg);
        let tgranges = TgRefresh::new(&cfg, now, tg_source);
        let doh = super::doh::Doh::new(&cfg);
        let mut r = Reactor {
            poll,
            listener,
            slab: Slab::with_capacity(capacity),
            capacity,
            s: Shared {
                keys: cfg.secrets.iter().map(|s| s.key).collect(),
                wheel: Wheel::new(WHEEL_TICK_MS, WHEEL_SLOTS, now),
                rng,
                tls,
                stats: Stats::default(),
                bad_log: RateLimited::new(BAD_LOG_INTERVAL_MS),
                attempt_log: Folds::new(fold_ms, FOLD_KINDS),
                client_log: Folds::new(fold_ms, FOLD_KINDS),
                unserved_log: std::array::from_fn(|_| RateLimited::new(fold_ms)),
                per_ip: PerIp::new(Limits::of(&cfg), capacity),
                mask_conns: MaskConns::new(capacity),
                listen,
                ladder,
                prober: Prober::new(crate::route::ladder::MAX_BACKGROUND),
                dns,
                outbound: None,
                watch: SuspendWatch::new(now),
                scratch: scratch(&cfg, capacity),
                wall_s,
                wall_clock: false,
                gate,
                ee_keys,
                dc_table: DcTable::new(),
                unknown_dsts: UnknownDsts::default(),
                tg_ranges,
                cfg,
            },
            clock,
            now,
            events: Events::with_capacity(256),
            ready: Vec::with_capacity(256),
            again: VecDeque::new(),
            expired: Vec::new(),
            finished: Vec::new(),
            globals: [(stats_ms > 0).then_some(now + stats_ms), None],
            accept: Accept::Idle,
            next_id: 0,
            full_log: RateLimited::new(BAD_LOG_INTERVAL_MS),
            fd_log: RateLimited::new(fold_ms),
            signals,
            signalled: false,
            reloader: None,
            life: Life::Running,
            bind_retry,
            control,
            cflist,
            tgranges,
            doh,
            trim,
            ways,
        };
        r.apply(r.s.cfg.clone(), None);
        // After the settings' own lines (the outbound proxy's), as before start and reload
        // shared one path: `listening on` ends the start lines.
        if r.listener.is_some() {
            info!("listening on {listen} (max {capacity} sessions)");
        }
        Ok(r)
    }
}

/// The TLS client configuration every dial shares (`--ca-file`, the certificate check,
/// `--tls-cipher`). Errors: an unusable `--ca-file` (`InvalidInput`).
fn client_tls(cfg: &Config) -> io::Result<Arc<rustls::ClientConfig>> {
    tls::client_config_with(
        cfg.ca_file.as_deref(),
        cfg.accept_invalid_certs,
        cfg.tls_cipher,
    )
    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

/// The fake-TLS gate at `now`, the `ee` keys it checks hellos against, and the wall clock it
/// was started at (Unix s). No `ee` secret: no hello is ever checked, so the replay cache
/// takes no memory.
fn gate(cfg: &Config, now: u64) -> (Gate, Vec<EeKey>, u64) {
    let wall_s = wall_clock_s();
    let ee_keys = EeKey::from_secrets(&cfg.secrets);
    let replay_entries = if ee_keys.is_empty() {
        0
    } else {
        cfg.replay_cache
    };
    let gate = Gate::new(cfg.tls_time_window.as_secs(), replay_entries, wall_s, now);
    (gate, ee_keys, wall_s)
}

/// The ladder over `cfg` with the listener's real address (`listen`, so no route dials us)
/// and the shared CF domain list's shell; the list's cache, if any, fills
/// `cfg.cf_shared_domains` first, so the first plans can use it.
fn ladder(
    cfg: &mut Config,
    listen: SocketAddr,
    rng: Rng,
    now: u64,
) -> (Ladder<Upstream>, cflist::CfList) {
    let (cflist, cached) = cflist::CfList::new(cfg, now);
    cfg.cf_shared_domains = cflist::shared_endpoints(cfg, cached.unwrap_or_default());
    let mut ladder_cfg = cfg.clone();
    ladder_cfg.listen = listen;
    (Ladder::new(&ladder_cfg, rng, now), cflist)
}

/// Binds the listener at start. With `--bind-retry` an address not assigned yet is not fatal:
/// `None` and the retry armed (one warning). Errors: any other bind error.
fn bind_at_start(
    cfg: &Config,
    registry: &Registry,
) -> io::Result<(Option<TcpListener>, BindRetry)> {
    let mut bind_retry = BindRetry::new(cfg.bind_retry.as_millis() as u64);
    let listener = match listen::bind(cfg.listen, registry) {
        Ok(l) => Some(l),
        Err(e) => match bind_retry.failed(&e, 1) {
            AfterBindError::Fatal => {
                return Err(listen::bind_error(&e, cfg.listen, listen::PROXY_FLAGS))
            }
            AfterBindError::RetryAt(_) => {
                warn!(
                    "cannot listen on {}: {e}; retrying every {:?} (--bind-retry) and on SIGHUP",
                    cfg.listen, cfg.bind_retry
                );
                None
            }
        },
    };
    Ok((listener, bind_retry))
}

/// The resolver over `--hosts-file`, `--resolv-conf` and `--doh`, its socket registered as
/// [`DNS`].
fn start_resolver(cfg: &Config, registry: &Registry) -> io::Result<Resolver> {
    // A DoH server given by name is looked up over the nameservers (bootstrap), never over
    // DoH itself.
    let doh_bootstrap = (cfg.doh.iter())
        .filter_map(|u| crate::route::cflist::parse_url(u).ok())
        .filter(|u| u.host.parse::<std::net::IpAddr>().is_err())
        .filter_map(|u| crate::dns::canonical_name(&u.host).ok())
        .collect();
    let mut dns = Resolver::new(ResolverConfig {
        hosts_path: cfg.hosts_file.clone(),
        resolv_path: cfg.resolv_conf.clone(),
        doh_servers: cfg.doh.len(),
        doh_fallback: cfg.doh_fallback,
        doh_timeout_ms: cfg.doh_timeout.as_millis() as u64,
        doh_bootstrap,
        ..ResolverConfig::default()
    })?;
    registry.register(dns.socket(), DNS, Interest::READABLE)?;
    Ok(dns)
}

/// The relay scratch with the buffer pools sized once for `capacity` sessions of `--buf-kb`.
fn scratch(cfg: &Config, capacity: usize) -> Scratch {
    // Two relay buffers per session at most (the connect phase's one is its upstream one).
    let pool = BufPool::new(2 * capacity, cfg.buf_size, WARM_BLOCKS);
    // Replay prefixes live apart, so they never take a block that bounds a session's own two.
    let replay = BufPool::new(REPLAY_BLOCKS.min(capacity), cfg.buf_size, 2);
    Scratch::new(SCRATCH_BUFS * cfg.buf_size, Some(pool)).with_replay(replay)
}
