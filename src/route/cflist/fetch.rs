//! The shared Cloudflare domain list's I/O shell (`--cf-domain-list`, docs/design.md §4
//! "Shared domain list"): one fetch at a time through [`get::Getter`] (the reactor-driven HTTPS
//! GET this list shares with Telegram's range list, `reactor::tgranges`: DNS from the reactor's
//! resolver, TCP + TLS through `net::dial`, so the dial stages every upstream gets apply here
//! too; then an HTTP/1.1 GET parsed by `route::cflist::http`), reading a FILE source, the cache file (read at start, written atomically: temp file, then
//! rename) and handing accepted lists to the ladder as `Config::cf_shared_domains` the way a
//! reload does (`Ladder::reconfigure`: new domains get routes, removed ones are retired,
//! unchanged ones keep their health).
//!
//! Owns the [`token::CFLIST`] socket and the fetch deadline (`--cf-domain-list-timeout`, one
//! bound over DNS, TLS, request, response and every redirect). Decisions (decoding, the accept
//! rule, limits and the count of names dropped past them, the schedule) are `route::cflist`'s;
//! whether a dial through the outbound proxy may start (a down proxy: the fetch waits for its
//! re-check within its deadline) and what the dial said about the proxy are the ladder's.
//!
//! The file lives beside the list core, in `src/route/cflist/`, but is compiled as the
//! reactor's child module `reactor::cflist` (`#[path]` in `src/reactor/mod.rs`): it is an
//! `impl Reactor` driving the resolver, a dial and the ladder, and `route` must not import the
//! reactor. The core never imports this file. Its file I/O (a FILE source, the cache file) is
//! `files.rs`; the GET itself is `get.rs` (`reactor::cflist::get`).

use std::path::PathBuf;

use log::{debug, info, warn};

use super::Reactor;
use crate::config::{CfEndpoint, Config};
use crate::route::cflist::{self, Accepted, Schedule, Source};
use crate::token;

mod files;
pub(super) mod get;

pub(crate) use files::{cached_shared_domains, write_if_changed};
use files::{read_cache, read_list_file, write_cache};
use get::{Deps, DialDeps, Gate, Getter};

/// Largest list body taken (bytes).
pub const MAX_BODY: usize = 64 * 1024;

/// Fetch counters and the last result, for `ctl status`.
#[derive(Clone, Debug, Default)]
pub struct ListStatus {
    /// Fetches finished, and how many of them failed or were rejected.
    pub fetches: u64,
    /// Of `fetches`.
    pub failures: u64,
    /// The last result (`accepted N domains`, or why not) and when (reactor ms).
    pub last: Option<(u64, String)>,
    /// The last accepted list: names taken, and valid names dropped past the cap of
    /// `route::cflist::MAX_DOMAINS`.
    pub kept: usize,
    /// Of the last accepted list.
    pub dropped: usize,
}

/// The list's state in the reactor.
pub(super) struct CfList {
    source: Option<Source>,
    cache: Option<PathBuf>,
    schedule: Schedule,
    next_at: Option<u64>,
    get: Getter,
    pub(super) status: ListStatus,
}

type Done = Result<Accepted, String>;

impl CfList {
    /// The list for `cfg`, first fetch due at `now`, and the cached domains if the cache file
    /// holds an acceptable list (a missing file is silent; an unreadable or bad one is logged).
    pub(super) fn new(cfg: &Config, now: u64) -> (CfList, Option<Vec<String>>) {
        let source = cfg
            .cf_domain_list
            .as_deref()
            .and_then(|s| cflist::parse_source(s).ok().flatten());
        let cached = match (&source, &cfg.cf_domain_cache) {
            (Some(_), Some(path)) => read_cache(path),
            _ => None,
        };
        let timeout_ms = cfg.cf_domain_list_timeout.as_millis() as u64;
        let list = CfList {
            next_at: source.is_some().then_some(now),
            source,
            cache: cfg.cf_domain_cache.clone(),
            schedule: Schedule::new(
                cfg.cf_domain_list_refresh.as_millis() as u64,
                cfg.cf_domain_list_retry.as_millis() as u64,
            ),
            get: Getter::new(token::CFLIST, timeout_ms, MAX_BODY),
            status: ListStatus {
                kept: cached.as_ref().map_or(0, Vec::len),
                ..ListStatus::default()
            },
        };
        (list, cached)
    }

    /// The next time [`CfList::tick`] has work.
    pub(super) fn next_deadline(&self) -> Option<u64> {
        if self.get.busy() {
            return self.get.next_deadline();
        }
        self.next_at
    }

    fn source_label(&self) -> String {
        match &self.source {
            Some(Source::Url(u)) => u.to_string(),
            Some(Source::File(p)) => p.display().to_string(),
            None => "off".into(),
        }
    }

    /// Starts a due fetch, ends one past its deadline, or re-checks a pending name (or a down
    /// outbound proxy, `gate`).
    fn tick(
        &mut self,
        now: u64,
        deps: Deps<'_>,
        rng: &mut crate::rng::Rng,
        gate: &mut Gate<'_>,
    ) -> Option<Done> {
        if self.get.busy() {
            return self.get.tick(now, deps, gate).map(decode);
        }
        if self.next_at.is_none_or(|t| t > now) {
            return None;
        }
        self.next_at = None;
        match self.source.clone()? {
            Source::File(path) => Some(read_list_file(&path)),
            Source::Url(mut url) => {
                let mut cb = [0u8; 6];
                rng.fill(&mut cb);
                let q: String = cb.iter().map(|b| format!("{b:02x}")).collect();
                url.path
                    .push(if url.path.contains('?') { '&' } else { '?' });
                url.path.push_str(&format!("cb={q}"));
                self.get.start(url, true, now, deps, gate).map(decode)
            }
        }
    }

    /// Socket readiness for the fetch.
    fn on_event(
        &mut self,
        now: u64,
        deps: Deps<'_>,
        dial: DialDeps<'_>,
        gate: &mut Gate<'_>,
    ) -> Option<Done> {
        self.get.on_event(now, deps, dial, gate).map(decode)
    }
}

/// A finished GET as a list: decoded and judged by the core's rule.
fn decode(got: get::Got) -> Done {
    got.and_then(|b| cflist::accept(cflist::decode_list(&String::from_utf8_lossy(&b))))
}

impl Reactor {
    /// The list's state for `ctl status`; `None` when it is off.
    pub(super) fn cflist_status(&self) -> Option<crate::control::status::SharedList> {
        let l = &self.cflist;
        l.source.as_ref()?;
        let st = &l.status;
        Some(crate::control::status::SharedList {
            source: l.source_label(),
            in_use: self.s.cfg.cf_shared_domains.len(),
            kept: st.kept,
            dropped: st.dropped,
            fetches: st.fetches,
            failures: st.failures,
            last: st
                .last
                .clone()
                .map(|(at, what)| (what, self.now.saturating_sub(at))),
        })
    }

    /// Runs due list work (`expire`).
    pub(super) fn cflist_tick(&mut self) {
        let s = &mut self.s;
        let ladder = &mut s.ladder;
        let done = self.cflist.tick(
            self.now,
            (self.poll.registry(), &mut s.dns, s.outbound.as_deref()),
            &mut s.rng,
            &mut |now| ladder.proxy_may_dial(now),
        );
        self.cflist_proxy_news();
        if let Some(done) = done {
            self.cflist_done(done);
        }
    }

    /// A [`token::CFLIST`] event (`dispatch`).
    pub(super) fn cflist_event(&mut self) {
        let s = &mut self.s;
        let r = self.poll.registry();
        let ladder = &mut s.ladder;
        let io = (r, &mut s.dns, s.outbound.as_deref());
        let dial = (&s.tls, s.wall_s, &mut s.rng);
        let done = self
            .cflist
            .on_event(self.now, io, dial, &mut |now| ladder.proxy_may_dial(now));
        self.cflist_proxy_news();
        if let Some(done) = done {
            self.cflist_done(done);
        }
    }

    /// Tells the ladder what the fetch's dial through the outbound proxy said about it.
    fn cflist_proxy_news(&mut self) {
        match self.cflist.get.proxy_news.take() {
            // Said as its handshake with the proxy ends: a fact of now.
            Some(Ok(())) => self.s.ladder.proxy_worked(self.now, self.now),
            Some(Err(f)) => self
                .s
                .ladder
                .proxy_failed(f, "the shared list's fetch", self.now),
            None => {}
        }
    }

    fn cflist_done(&mut self, done: Done) {
        let src = self.cflist.source_label();
        let now = self.now;
        let st = &mut self.cflist.status;
        st.fetches += 1;
        match done {
            Ok(accepted) => {
                // The cache first: once "accepted" is logged, the file holds the list.
                if let Some(path) = &self.cflist.cache {
                    if let Err(e) = write_cache(path, &accepted.domains) {
                        warn!(
                            "cf-domain-list: cache {}: cannot write: {e}",
                            path.display()
                        );
                    }
                }
                let line = accepted.summary();
                info!("cf-domain-list: {src}: {line}");
                let (kept, dropped) = (accepted.domains.len(), accepted.dropped);
                crate::logging::events::emit(|| cflist_event("accepted", kept, dropped, None));
                st.last = Some((now, line));
                (st.kept, st.dropped) = (accepted.domains.len(), accepted.dropped);
                let list = accepted.domains;
                self.cflist.next_at =
                    Some(self.cflist.schedule.after_success(now, &mut self.s.rng));
                self.cflist_apply(list);
            }
            Err(why) => {
                st.failures += 1;
                let n = self.s.cfg.cf_shared_domains.len();
                // The same failure as the last fetch's (offline: every retry) is said once.
                let again = st.last.as_ref().is_some_and(|(_, last)| *last == why);
                if again {
                    debug!("cf-domain-list: {src}: {why} again; keeping the {n} shared domain(s)");
                } else {
                    warn!(
                        "cf-domain-list: {src}: {why}; keeping the {n} shared domain(s) in use; \
                         retried in the background, said again only if the reason changes"
                    );
                }
                crate::logging::events::emit(|| cflist_event("refused", n, 0, Some(&why)));
                st.last = Some((now, why));
                self.cflist.next_at =
                    Some(self.cflist.schedule.after_failure(now, &mut self.s.rng));
            }
        }
    }

    /// Makes `list` the shared domains in use: routes for new ones, retired routes for removed
    /// ones, unchanged ones keep their health.
    fn cflist_apply(&mut self, list: Vec<String>) {
        let eps = shared_endpoints(&self.s.cfg, list);
        if eps == self.s.cfg.cf_shared_domains {
            return;
        }
        self.s.cfg.cf_shared_domains = eps;
        for name in &super::dns_names(&self.s.cfg) {
            self.s.dns.watch(name);
        }
        let mut ladder_cfg = self.s.cfg.clone();
        ladder_cfg.listen = self.s.listen;
        self.s.ladder.reconfigure(&ladder_cfg, self.now);
    }

    /// A reload's part: the new `cfg` keeps the shared domains in use (unless the list was
    /// turned off); a changed source or cache path fetches again now.
    pub(super) fn cflist_reload(&mut self, cfg: &mut Config) {
        let old = &self.s.cfg;
        let list: Vec<String> = old
            .cf_shared_domains
            .iter()
            .map(|e| e.host.clone())
            .collect();
        let refetch =
            cfg.cf_domain_list != old.cf_domain_list || cfg.cf_domain_cache != old.cf_domain_cache;
        let timing_changed = cfg.cf_domain_list_refresh != old.cf_domain_list_refresh
            || cfg.cf_domain_list_retry != old.cf_domain_list_retry
            || cfg.cf_domain_list_timeout != old.cf_domain_list_timeout;
        if refetch || timing_changed {
            let status = std::mem::take(&mut self.cflist.status);
            let (mut next, _) = CfList::new(cfg, self.now);
            next.status = status;
            if !refetch {
                next.next_at = self.cflist.next_at.or(next.next_at);
            }
            self.cflist = next;
        }
        cfg.cf_shared_domains = if cfg.cf_domain_list.is_some() {
            shared_endpoints(cfg, list)
        } else {
            Vec::new()
        };
    }
}

/// The endpoints for `list` under `cfg`: every name not already a `--cf-domain`, on
/// `--cf-domain-list-port`.
pub(super) fn shared_endpoints(cfg: &Config, list: Vec<String>) -> Vec<CfEndpoint> {
    list.into_iter()
        .filter(|h| {
            !cfg.cf_domains
                .iter()
                .any(|e| e.host.eq_ignore_ascii_case(h))
        })
        .map(|host| CfEndpoint {
            host,
            port: cfg.cf_domain_list_port,
        })
        .collect()
}

/// The `cflist` event (`logging::events`): the shared list was `accepted`, `refused` (with
/// `why`; `kept` is then the count of shared domains still in use) or read from the `cached`
/// file at start, and how many names were kept and dropped past the cap.
fn cflist_event(
    result: &str,
    kept: usize,
    dropped: usize,
    why: Option<&str>,
) -> crate::logging::events::Event {
    crate::logging::events::Event::new("cflist")
        .str("result", result)
        .num("kept", kept as u64)
        .num("dropped", dropped as u64)
        .opt("why", why)
}
