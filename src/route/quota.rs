//! Worker accounts: Cloudflare's daily request quota is the account's, shared by all its Workers.
//!
//! docs/protocol.md §4.2: the free plan allows about 100,000 Worker requests a day per account,
//! reset at 00:00 UTC, and a Worker past it answers 429. Cooling only the Worker that answered
//! sends the next sessions to its siblings on the same account, into the same wall. So Workers
//! are grouped by account ([`account_of`]: the `ACCOUNT` label of `NAME.ACCOUNT.workers.dev`,
//! or the `GROUP` of `--cf-worker-domain NAME@GROUP`; any other Worker is a group of its own)
//! and a 429 from any of them holds the whole group from new sessions ([`Accounts::on_429`])
//! until the next 00:00 UTC, or until the `Retry-After` the answer carried. Holds are told once,
//! when they begin. A probe that gets `resPQ` through a Worker of a held group ends the hold
//! early: the 429 was a short rate limit, or the owner raised the plan (a session does not: its
//! plan may predate the hold). Requests sent to each group are counted per UTC day for `ctl status`.
//!
//! Owns: the grouping, the holds and the per-day counts. Must not touch: sockets, clocks, route
//! health (the answering route's own cooldown is `route::health`'s), the background budgets
//! (`route::budget`; the ladder blocks every member's on a background 429). Sans-IO: `now` is
//! ms on the caller's monotonic clock, `wall_ms` is Unix time in ms (UTC), both parameters.

use crate::config::{CfEndpoint, Config};

/// Milliseconds in a UTC day (Unix time has no leap seconds).
pub const DAY_MS: u64 = 86_400_000;

/// The account a Worker belongs to: `group` when given (`--cf-worker-domain NAME@GROUP`), else
/// the label before `workers.dev` (`name.account.workers.dev` → `account`), else the host itself
/// (a custom domain: its own group until the owner names one).
pub fn account_of(ep: &CfEndpoint, group: Option<&str>) -> String {
    if let Some(g) = group {
        return g.to_string();
    }
    let labels: Vec<&str> = ep.host.split('.').collect();
    match labels.as_slice() {
        [.., account, "workers", "dev"] if labels.len() >= 4 => (*account).to_string(),
        _ => ep.host.clone(),
    }
}

/// Why a group is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// A 429 without `Retry-After`: the daily quota, until the next 00:00 UTC.
    DailyQuota,
    /// A 429 with `Retry-After` (seconds): until then.
    RetryAfter(u32),
}

/// A new hold, returned once when it begins (for the one log line and event).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Began {
    /// The group's name.
    pub group: String,
    /// Why.
    pub hold: Hold,
    /// How long, ms.
    pub for_ms: u64,
    /// Workers in the group (indices into `cfg.worker_domains`).
    pub members: Vec<usize>,
}

/// One group's state for `ctl status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupStatus {
    /// The account (redact it for display: a `workers.dev` account label is the owner's).
    pub name: String,
    /// Its Workers (indices into `cfg.worker_domains`).
    pub members: Vec<usize>,
    /// The hold running at `now`, and the ms left of it; `None` while serving.
    pub held: Option<(Hold, u64)>,
    /// Requests (client dials, probes, pool fills) sent to the group's Workers since the last
    /// 00:00 UTC.
    pub requests_today: u32,
}

#[derive(Clone, Debug)]
struct Group {
    name: String,
    members: Vec<usize>,
    /// No new sessions before this (ms, monotonic).
    held_until: u64,
    hold: Option<Hold>,
    /// UTC day number (`wall_ms / DAY_MS`) that `used` counts.
    day: u64,
    used: u32,
}

/// Every Worker group and each Worker's group.
#[derive(Clone, Debug, Default)]
pub struct Accounts {
    groups: Vec<Group>,
    /// Group index of each Worker (index into `cfg.worker_domains`).
    of: Vec<usize>,
}

impl Accounts {
    /// The groups of `cfg`'s Workers, all serving.
    pub fn new(cfg: &Config) -> Accounts {
        let mut a = Accounts::default();
        for (w, ep) in cfg.worker_domains.iter().enumerate() {
            let name = account_of(ep, cfg.worker_group(ep));
            let g = match a.groups.iter().position(|g| g.name == name) {
                Some(g) => g,
                None => {
                    a.groups.push(Group {
                        name,
                        members: Vec::new(),
                        held_until: 0,
                        hold: None,
                        day: 0,
                        used: 0,
                    });
                    a.groups.len() - 1
                }
            };
            a.groups[g].members.push(w);
            a.of.push(g);
        }
        a
    }

    /// A reload: groups are rebuilt from `cfg`; a group that keeps its name keeps its hold and
    /// its count for the day.
    pub fn reconfigure(&mut self, cfg: &Config) {
        let old = std::mem::take(&mut self.groups);
        *self = Accounts::new(cfg);
        for g in &mut self.groups {
            if let Some(o) = old.iter().find(|o| o.name == g.name) {
                g.held_until = o.held_until;
                g.hold = o.hold;
                g.day = o.day;
                g.used = o.used;
            }
        }
    }

    /// Worker `w` answered 429 at `now` (`wall_ms` UTC), with `retry_after` seconds if the
    /// answer had one: its whole group is held until then, or without one until the next 00:00
    /// UTC. `Some` only when a hold begins (a group already held is extended silently, never
    /// shortened).
    pub fn on_429(
        &mut self,
        w: usize,
        now: u64,
        wall_ms: u64,
        retry_after: Option<u32>,
    ) -> Option<Began> {
        let g = self.groups.get_mut(*self.of.get(w)?)?;
        let (hold, for_ms) = match retry_after {
            Some(s) => (Hold::RetryAfter(s), (u64::from(s) * 1000).min(DAY_MS)),
            None => (Hold::DailyQuota, DAY_MS - wall_ms % DAY_MS),
        };
        let until = now.saturating_add(for_ms);
        let began = now >= g.held_until;
        if began || until > g.held_until {
            g.held_until = g.held_until.max(until);
            g.hold = Some(hold);
        }
        began.then(|| Began {
            group: g.name.clone(),
            hold,
            for_ms,
            members: g.members.clone(),
        })
    }

    /// A probe of Worker `w` got through at `now`: a hold on its group ends. Returns the group's
    /// name when one was running.
    pub fn on_success(&mut self, w: usize, now: u64) -> Option<String> {
        let g = self.groups.get_mut(*self.of.get(w)?)?;
        if now < g.held_until {
            g.held_until = 0;
            g.hold = None;
            return Some(g.name.clone());
        }
        None
    }

    /// Whether Worker `w`'s group is held at `now`.
    pub fn held(&self, w: usize, now: u64) -> bool {
        self.of
            .get(w)
            .and_then(|&g| self.groups.get(g))
            .is_some_and(|g| now < g.held_until)
    }

    /// One request to Worker `w` was sent at `wall_ms`.
    pub fn note_request(&mut self, w: usize, wall_ms: u64) {
        let Some(g) = self.of.get(w).and_then(|&g| self.groups.get_mut(g)) else {
            return;
        };
        let day = wall_ms / DAY_MS;
        if g.day != day {
            g.day = day;
            g.used = 0;
        }
        g.used = g.used.saturating_add(1);
    }

    /// Every group at `now` / `wall_ms`, in the order of their first Worker.
    pub fn status(&self, now: u64, wall_ms: u64) -> Vec<GroupStatus> {
        let day = wall_ms / DAY_MS;
        self.groups
            .iter()
            .map(|g| GroupStatus {
                name: g.name.clone(),
                members: g.members.clone(),
                held: g
                    .hold
                    .filter(|_| now < g.held_until)
                    .map(|h| (h, g.held_until - now)),
                requests_today: if g.day == day { g.used } else { 0 },
            })
            .collect()
    }

    /// The members of Worker `w`'s group, `w` included (empty for an unknown index).
    pub fn siblings(&self, w: usize) -> &[usize] {
        self.of
            .get(w)
            .and_then(|&g| self.groups.get(g))
            .map_or(&[], |g| g.members.as_slice())
    }
}

/// An account's name for logs and `ctl status`: a `workers.dev` account label is the owner's
/// (`route::table::redact` keeps its first two letters); a domain is redacted like a host.
pub fn redact_account(name: &str) -> String {
    if name.contains('.') {
        crate::route::table::redact(name)
    } else {
        let first: String = name.chars().take(2).collect();
        format!("{first}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(host: &str) -> CfEndpoint {
        CfEndpoint {
            host: host.into(),
            port: 443,
        }
    }

    fn cfg(hosts: &[&str], groups: &[(&str, &str)]) -> Config {
        let mut c = Config::with_secrets(Vec::new());
        c.worker_domains = hosts.iter().map(|h| ep(h)).collect();
        c.worker_groups = groups
            .iter()
            .map(|(h, g)| (ep(h), (*g).to_string()))
            .collect();
        c
    }

    /// 2026-12-05 22:00:00 UTC.
    const WALL: u64 = 1_796_508_000_000;

    #[test]
    fn accounts_come_from_the_workers_dev_label_or_the_named_group() {
        assert_eq!(account_of(&ep("a.alice.workers.dev"), None), "alice");
        assert_eq!(
            account_of(&ep("tunnel.example.org"), None),
            "tunnel.example.org"
        );
        assert_eq!(account_of(&ep("workers.dev"), None), "workers.dev");
        assert_eq!(account_of(&ep("x.workers.dev"), None), "x.workers.dev");
        assert_eq!(
            account_of(&ep("tunnel.example.org"), Some("alice")),
            "alice"
        );
        let c = cfg(
            &[
                "a.alice.workers.dev",
                "b.alice.workers.dev",
                "c.bob.workers.dev",
                "t.example.org",
            ],
            &[("t.example.org", "bob")],
        );
        let a = Accounts::new(&c);
        let st = a.status(1, WALL);
        let groups: Vec<(&str, &[usize])> = st
            .iter()
            .map(|g| (g.name.as_str(), g.members.as_slice()))
            .collect();
        assert_eq!(groups, [("alice", &[0, 1][..]), ("bob", &[2, 3][..])]);
        assert_eq!(a.siblings(3), [2, 3]);
        assert_eq!(redact_account("alice"), "al…");
        assert_eq!(redact_account("tunnel.example.org"), "tu…example.org");
    }

    #[test]
    fn a_429_holds_the_whole_account_until_midnight_utc_and_is_told_once() {
        let c = cfg(
            &[
                "a.alice.workers.dev",
                "b.alice.workers.dev",
                "c.bob.workers.dev",
            ],
            &[],
        );
        let mut a = Accounts::new(&c);
        let now = 5_000;
        let began = a.on_429(1, now, WALL, None).expect("a hold begins");
        assert_eq!(began.group, "alice");
        assert_eq!(began.hold, Hold::DailyQuota);
        assert_eq!(began.for_ms, 2 * 3_600_000, "22:00 → 00:00 UTC");
        assert_eq!(began.members, [0, 1]);
        assert!(a.held(0, now) && a.held(1, now), "both of alice's Workers");
        assert!(!a.held(2, now), "bob keeps serving");
        // The sibling's own 429 a moment later is the same episode: not told again.
        assert_eq!(a.on_429(0, now + 10, WALL + 10, None), None);
        let end = now + 2 * 3_600_000;
        assert!(a.held(0, end - 1));
        assert!(!a.held(0, end), "the quota resets at 00:00 UTC");
        assert_eq!(a.status(end - 1, WALL)[0].held, Some((Hold::DailyQuota, 1)));
        assert_eq!(a.status(end, WALL)[0].held, None);
    }

    #[test]
    fn retry_after_sets_the_hold_and_a_later_one_only_extends() {
        let c = cfg(&["a.alice.workers.dev"], &[]);
        let mut a = Accounts::new(&c);
        let b = a.on_429(0, 0, WALL, Some(30)).expect("begins");
        assert_eq!((b.hold, b.for_ms), (Hold::RetryAfter(30), 30_000));
        assert_eq!(a.on_429(0, 1_000, WALL, Some(5)), None);
        assert!(a.held(0, 29_999), "a shorter Retry-After never shortens");
        assert!(!a.held(0, 30_000));
        // Retry-After is capped at a day.
        let b = a
            .on_429(0, 40_000, WALL, Some(u32::MAX))
            .expect("a new hold");
        assert_eq!(b.for_ms, DAY_MS);
    }

    #[test]
    fn a_proven_worker_ends_its_groups_hold() {
        let c = cfg(&["a.alice.workers.dev", "b.alice.workers.dev"], &[]);
        let mut a = Accounts::new(&c);
        a.on_429(0, 0, WALL, None);
        assert_eq!(a.on_success(1, 100).as_deref(), Some("alice"));
        assert!(!a.held(0, 101) && !a.held(1, 101));
        assert_eq!(a.on_success(1, 200), None, "nothing to end");
        assert!(
            a.on_429(0, 300, WALL, None).is_some(),
            "a new episode is told"
        );
    }

    #[test]
    fn requests_are_counted_per_utc_day() {
        let c = cfg(
            &[
                "a.alice.workers.dev",
                "b.alice.workers.dev",
                "c.bob.workers.dev",
            ],
            &[],
        );
        let mut a = Accounts::new(&c);
        a.note_request(0, WALL);
        a.note_request(1, WALL + 1);
        a.note_request(2, WALL + 2);
        let st = a.status(1, WALL + 3);
        assert_eq!((st[0].requests_today, st[1].requests_today), (2, 1));
        // After 00:00 UTC yesterday's count is gone, before any new request too.
        let tomorrow = WALL + 2 * 3_600_000;
        assert_eq!(a.status(1, tomorrow)[0].requests_today, 0);
        a.note_request(0, tomorrow);
        assert_eq!(a.status(1, tomorrow)[0].requests_today, 1);
        // Out-of-range Worker indices are ignored, never a panic.
        a.note_request(9, WALL);
        assert_eq!(a.on_429(9, 0, WALL, None), None);
        assert!(!a.held(9, 0));
    }

    #[test]
    fn a_reload_keeps_a_named_groups_hold_and_count() {
        let c = cfg(&["a.alice.workers.dev"], &[]);
        let mut a = Accounts::new(&c);
        a.on_429(0, 0, WALL, None);
        a.note_request(0, WALL);
        let c2 = cfg(&["c.carol.workers.dev", "b.alice.workers.dev"], &[]);
        a.reconfigure(&c2);
        assert!(!a.held(0, 1), "carol is new");
        assert!(a.held(1, 1), "alice's hold carried to its new Worker");
        assert_eq!(a.status(1, WALL)[1].requests_today, 1);
    }
}
