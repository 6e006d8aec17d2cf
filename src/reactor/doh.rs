//! DNS over HTTPS in the running proxy (`--doh`, docs/design.md §6 "DoH"): runs the DoH tries
//! the resolver queues ([`Resolver::take_doh`](crate::dns::Resolver::take_doh)) as HTTPS GETs
//! (RFC 8484 `?dns=`, `Accept: application/dns-message`) through the shared GET machinery
//! (`reactor::cflist::get`: TCP + TLS through `net::dial`, the outbound proxy where it
//! applies, the HTTP/1.1 parser with its limits) and hands each end back to the resolver
//! ([`Resolver::on_doh_reply`](crate::dns::Resolver::on_doh_reply)), which judges the answer
//! and caches it like any other.
//!
//! Owns: up to [`MAX_DOH_CONNS`] exchanges at once, one socket each under
//! [`token::doh_conn`]; tries waiting for a free one; each server's state for `ctl status` and
//! the log (a server going down is logged once with its reason, coming back once). One
//! connection per exchange (`Connection: close`), see docs/design.md. What an answer means,
//! retries and failover are `dns::cache`'s; the wire form and the answer's check `dns::doh`'s.

use std::collections::VecDeque;

use log::{info, warn};

use super::cflist::get::{Getter, Got};
use super::Reactor;
use crate::config::Config;
use crate::control::status::{DnsStatus, DohServerStatus};
use crate::dns::{doh, DohQuery};
use crate::route::cflist::Url;
use crate::token::{self, MAX_DOH_CONNS};

/// One exchange slot: its GET machinery and the try it runs.
struct Slot {
    get: Getter,
    /// (server, query id) of the try running.
    job: Option<(u8, u16)>,
}

/// One DoH server's record.
#[derive(Default)]
struct Server {
    queries: u64,
    answers: u64,
    failures: u64,
    /// `None` until its first exchange ends; then whether the last one gave a usable answer.
    up: Option<bool>,
    /// The latest failure and when (reactor ms).
    last_error: Option<(u64, String)>,
}

/// The DoH exchanges of the reactor. Inert (no slots) without `--doh`.
pub(super) struct Doh {
    urls: Vec<Url>,
    fallback: bool,
    slots: Vec<Slot>,
    queue: VecDeque<DohQuery>,
    servers: Vec<Server>,
}

impl Doh {
    /// The exchanges for `cfg.doh` (at most `dns::MAX_DOH` servers), each bounded by
    /// `--doh-timeout`.
    pub(super) fn new(cfg: &Config) -> Doh {
        let urls: Vec<Url> = (cfg.doh.iter())
            .take(crate::dns::MAX_DOH)
            .filter_map(|u| crate::route::cflist::parse_url(u).ok())
            .collect();
        let timeout_ms = cfg.doh_timeout.as_millis() as u64;
        let n = if urls.is_empty() { 0 } else { MAX_DOH_CONNS };
        Doh {
            slots: (0..n)
                .map(|i| Slot {
                    get: Getter::new(token::doh_conn(i), timeout_ms, doh::MAX_BODY)
                        .for_media(doh::MEDIA_TYPE),
                    job: None,
                })
                .collect(),
            servers: urls.iter().map(|_| Server::default()).collect(),
            fallback: cfg.doh_fallback,
            urls,
            queue: VecDeque::new(),
        }
    }

    /// The next time [`Reactor::doh_tick`] has work: a running exchange's deadline or
    /// pending name, or at once when a queued try has a free slot.
    pub(super) fn next_deadline(&self) -> Option<u64> {
        let free = self.slots.iter().any(|s| s.job.is_none());
        let run = self
            .slots
            .iter()
            .filter_map(|s| s.get.next_deadline())
            .min();
        if free && !self.queue.is_empty() {
            return Some(0);
        }
        run
    }

    /// The resolver's part of `ctl status`.
    pub(super) fn status(&self, counters: crate::dns::Counters, now: u64) -> DnsStatus {
        DnsStatus {
            counters,
            doh_fallback: self.fallback,
            doh: self
                .urls
                .iter()
                .zip(&self.servers)
                .map(|(u, s)| DohServerStatus {
                    url: u.to_string(),
                    state: match s.up {
                        None => "unknown",
                        Some(true) => "up",
                        Some(false) => "down",
                    },
                    queries: s.queries,
                    answers: s.answers,
                    failures: s.failures,
                    last_error: s
                        .last_error
                        .as_ref()
                        .map(|(at, why)| (why.clone(), now.saturating_sub(*at))),
                })
                .collect(),
        }
    }
}

impl Reactor {
    /// Starts queued DoH tries on free slots (`expire`, after the resolver's tick).
    pub(super) fn doh_pump(&mut self) {
        let now = self.now;
        let fresh = self.s.dns.take_doh();
        self.doh.queue.extend(fresh);
        loop {
            let Some(i) = self.doh.slots.iter().position(|s| s.job.is_none()) else {
                return;
            };
            let Some(q) = self.doh.queue.pop_front() else {
                return;
            };
            let Some(base) = self.doh.urls.get(q.server as usize) else {
                continue;
            };
            let url = Url {
                path: doh::get_path(&base.path, &q.packet),
                ..base.clone()
            };
            let s = &mut self.s;
            let ladder = &mut s.ladder;
            let slot = &mut self.doh.slots[i];
            slot.job = Some((q.server, q.id));
            let deps = (self.poll.registry(), &mut s.dns, s.outbound.as_deref());
            let got = slot
                .get
                .start(url, true, now, deps, &mut |n| ladder.proxy_may_dial(n));
            self.doh_after(i, got);
        }
    }

    /// A [`token::doh_conn`] event (`dispatch`).
    pub(super) fn doh_event(&mut self, i: usize) {
        let Some(slot) = self.doh.slots.get_mut(i) else {
            return;
        };
        if slot.job.is_none() {
            return; // a late event of a finished exchange's socket
        }
        let s = &mut self.s;
        let ladder = &mut s.ladder;
        let io = (self.poll.registry(), &mut s.dns, s.outbound.as_deref());
        let dial = (&s.tls, s.wall_s, &mut s.rng);
        let got = slot
            .get
            .on_event(self.now, io, dial, &mut |n| ladder.proxy_may_dial(n));
        self.doh_after(i, got);
    }

    /// Deadlines and pending names of running exchanges, then queued tries (`expire`).
    pub(super) fn doh_tick(&mut self) {
        let now = self.now;
        for i in 0..self.doh.slots.len() {
            let s = &mut self.s;
            let ladder = &mut s.ladder;
            let slot = &mut self.doh.slots[i];
            if slot.job.is_none() || slot.get.next_deadline().is_none_or(|d| d > now) {
                continue;
            }
            let deps = (self.poll.registry(), &mut s.dns, s.outbound.as_deref());
            let got = slot.get.tick(now, deps, &mut |n| ladder.proxy_may_dial(n));
            self.doh_after(i, got);
        }
        self.doh_pump();
    }

    /// After a call into slot `i`'s GET: passes what its dial said about the outbound proxy to
    /// the ladder, and a finished exchange to the resolver.
    fn doh_after(&mut self, i: usize, got: Option<Got>) {
        match self.doh.slots[i].get.proxy_news.take() {
            Some(Ok(())) => self.s.ladder.proxy_worked(self.now, self.now),
            Some(Err(f)) => self.s.ladder.proxy_failed(f, "a DoH exchange", self.now),
            None => {}
        }
        let Some(got) = got else {
            return;
        };
        let Some((server, id)) = self.doh.slots[i].job.take() else {
            return;
        };
        let now = self.now;
        let reply = got.as_deref().map_err(Clone::clone);
        let (done, verdict) = self.s.dns.on_doh_reply(server, id, reply, now);
        let url = self.doh.urls[server as usize].to_string();
        let rec = &mut self.doh.servers[server as usize];
        rec.queries += 1;
        match verdict {
            Ok(()) => {
                rec.answers += 1;
                if rec.up == Some(false) {
                    info!("doh: {url} answers again");
                }
                rec.up = Some(true);
            }
            Err(why) => {
                rec.failures += 1;
                if rec.up != Some(false) {
                    warn!("doh: {url}: {why} (its tries fail over to the next server)");
                }
                rec.up = Some(false);
                rec.last_error = Some((now, why));
            }
        }
        if done.is_some() {
            self.s.resolve_outbound_proxy();
        }
    }
}
