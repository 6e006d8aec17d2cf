//! The `--json` form of `ctl status` ([`json`]): one object, one line.
//!
//! JSON is written by hand (a small writer with RFC 8259 string escaping) rather than with a
//! serialisation crate: the shape is fixed and small, and the router binary stays smaller; the
//! tests (in `render.rs`) parse the output with `serde_json` (a dev-dependency only). Times are
//! ms, sizes KiB unless the name says otherwise; absent values are `null`.

use crate::config::{Tier, WayIn};
use crate::logging::events::quote;
use crate::route::ladder::RouteStatus;

use super::loopback_only;
use crate::control::status::{Counters, DnsStatus, RangesStatus, SharedList, Status};

/// The `dns` object of the `--json` form.
fn dns_json(d: &DnsStatus) -> String {
    let mut o = Obj::new();
    let c = &d.counters;
    o.num("queries", c.queries);
    o.num("answers", c.answers);
    o.num("ignored", c.ignored);
    o.num("failures", c.failures);
    o.raw(
        "doh_fallback",
        if d.doh_fallback { "true" } else { "false" },
    );
    let servers: Vec<String> = d
        .doh
        .iter()
        .map(|h| {
            let mut so = Obj::new();
            so.str("url", &h.url);
            so.str("state", h.state);
            so.num("queries", h.queries);
            so.num("answers", h.answers);
            so.num("failures", h.failures);
            match &h.last_error {
                Some((why, age)) => {
                    so.str("last_error", why);
                    so.num("last_error_age_ms", *age);
                }
                None => so.raw("last_error", "null"),
            }
            so.end()
        })
        .collect();
    o.raw("doh", &format!("[{}]", servers.join(",")));
    o.end()
}

/// `{"verdict": …, "for_ms": …, "tried": [{"tier", "routes", "failure"}]}`.
fn telegram_json(s: &Status) -> String {
    let t = &s.telegram;
    let mut o = Obj::new();
    o.str("verdict", t.verdict);
    o.num("for_ms", t.for_ms);
    let tried: Vec<String> = (t.tried.iter())
        .map(|(tier, n, f)| {
            let mut to = Obj::new();
            to.str("tier", tier);
            to.num("routes", u64::from(*n));
            to.str("failure", f);
            to.end()
        })
        .collect();
    o.raw("tried", &format!("[{}]", tried.join(",")));
    o.end()
}

/// The `--json` form: one object, one line.
pub fn json(s: &Status) -> String {
    let mut o = Obj::new();
    o.str("version", s.version);
    o.num("uptime_ms", s.uptime_ms);
    o.str("listen", &s.listen.to_string());
    o.raw(
        "listen_loopback_only",
        if loopback_only(s) { "true" } else { "false" },
    );
    o.raw("pin", &s.pin.as_deref().map_or("null".into(), quote));
    o.raw("telegram", &telegram_json(s));
    o.raw("sessions", &sessions_json(s));
    let routes: Vec<String> = s.routes.iter().map(route_json).collect();
    o.raw("routes", &format!("[{}]", routes.join(",")));
    let budgets: Vec<String> = s
        .budgets
        .iter()
        .map(|(w, left)| {
            let mut b = Obj::new();
            b.str("worker", w);
            b.num("left", u64::from(*left));
            b.end()
        })
        .collect();
    o.raw("budgets", &format!("[{}]", budgets.join(",")));
    let accounts: Vec<String> = s
        .accounts
        .iter()
        .map(|a| {
            let mut b = Obj::new();
            b.str("account", &a.name);
            let ws: Vec<String> = a.workers.iter().map(|w| quote(w)).collect();
            b.raw("workers", &format!("[{}]", ws.join(",")));
            b.str("state", if a.held.is_some() { "held" } else { "serving" });
            b.raw("why", &a.held.map_or("null".into(), |(w, _)| quote(w)));
            b.num("held_for_ms", a.held.map_or(0, |(_, ms)| ms));
            b.num("requests_today", u64::from(a.requests_today));
            b.end()
        })
        .collect();
    o.raw("accounts", &format!("[{}]", accounts.join(",")));
    let c = &s.counters;
    o.num("zero_byte_closes", c.zero_byte_closes);
    let mut fds = Obj::new();
    fds.opt("used", s.fds_used);
    fds.opt("limit", s.fds_limit);
    o.raw("fds", &fds.end());
    o.opt("rss_kib", s.rss_kib);
    let reloads = s.reloads.map_or("null".into(), |(a, r)| {
        let mut ro = Obj::new();
        ro.num("applied", a);
        ro.num("rejected", r);
        ro.end()
    });
    o.raw("reloads", &reloads);
    let shared = s
        .shared_list
        .as_ref()
        .map_or("null".into(), shared_list_json);
    o.raw("shared_list", &shared);
    o.raw("dns", &dns_json(&s.dns));
    let ranges = s.tg_ranges.as_ref().map_or("null".into(), ranges_json);
    o.raw("tg_ranges", &ranges);
    let frozen: Vec<String> = s
        .frozen
        .iter()
        .map(|(f, ago)| {
            let mut fo = Obj::new();
            fo.str("client", &f.peer.to_string());
            fo.num("route", f.route as u64);
            fo.str("form", f.freeze.name());
            fo.num("after_bytes", f.after_bytes);
            fo.num("ago_ms", *ago);
            fo.end()
        })
        .collect();
    o.raw("frozen_sessions", &format!("[{}]", frozen.join(",")));
    o.raw("counters", &counters_json(c));
    o.raw("ways", &ways_json(s));
    let mut dcs = Obj::new();
    for (dc, n) in &s.dcs {
        dcs.num(dc, *n as u64);
    }
    o.raw("dcs", &dcs.end());
    let unknown: Vec<String> = (s.unknown_destinations.iter())
        .map(|(ip, n, ago)| {
            let mut u = Obj::new();
            u.str("address", &ip.to_string());
            u.num("closes", *n);
            u.num("ago_ms", *ago);
            u.end()
        })
        .collect();
    o.raw("unknown_destinations", &format!("[{}]", unknown.join(",")));
    let edges: Vec<String> = (s.edges.iter())
        .map(|e| {
            let mut eo = Obj::new();
            eo.str("address", &e.ip.to_string());
            eo.str("source", &e.source);
            eo.str("state", e.state);
            eo.raw("why", &e.why.as_deref().map_or("null".into(), quote));
            let ids: Vec<String> = e.routes.iter().map(|r| r.to_string()).collect();
            eo.raw("routes", &format!("[{}]", ids.join(",")));
            eo.end()
        })
        .collect();
    o.raw("edges", &format!("[{}]", edges.join(",")));
    let mut learned = Obj::new();
    for (ip, dc) in &s.learned_dcs {
        learned.str(&ip.to_string(), dc);
    }
    o.raw("learned_dcs", &learned.end());
    let mut text = o.end();
    text.push('\n');
    text
}

/// The `ways` object of the `--json` form: per way in, `null` when it has no listener, else
/// its address and sessions.
fn ways_json(s: &Status) -> String {
    let mut ways = Obj::new();
    for w in WayIn::ALL {
        let (listen, n) = s.ways[w.index()];
        let mut wo = Obj::new();
        wo.raw(
            "listen",
            &listen.map_or("null".into(), |a| quote(&a.to_string())),
        );
        wo.num("sessions", n as u64);
        ways.raw(w.name(), &wo.end());
    }
    ways.end()
}

/// The `sessions` object of the `--json` form.
fn sessions_json(s: &Status) -> String {
    let mut per_tier = Obj::new();
    for t in Tier::ALL {
        per_tier.num(t.name(), s.sessions_per_tier[t.index()] as u64);
    }
    let mut sessions = Obj::new();
    sessions.num("active", s.sessions_active as u64);
    sessions.num("capacity", s.sessions_capacity as u64);
    sessions.raw("per_tier", &per_tier.end());
    sessions.num("connecting", s.sessions_connecting() as u64);
    sessions.num("waiting_on_client", s.sessions_waiting_on_client as u64);
    sessions.end()
}

/// One route of the `--json` form.
fn route_json(r: &RouteStatus) -> String {
    let mut ro = Obj::new();
    ro.num("id", r.id as u64);
    ro.str("label", &r.label);
    ro.str("tier", r.tier.name());
    ro.str("dc", &r.dc.label());
    ro.str("state", r.state);
    ro.num("cooldown_left_ms", r.cooldown_left_ms);
    ro.opt("rtt_p95_ms", r.rtt_p95_ms);
    let lf = r.last_failure.map_or("null".into(), |(f, ago)| {
        let mut fo = Obj::new();
        fo.str("class", &f.to_string());
        fo.num("ago_ms", ago);
        fo.end()
    });
    ro.raw("last_failure", &lf);
    ro.str("probe", r.probe);
    let mut pool = Obj::new();
    pool.num("warm", r.pool.0 as u64);
    pool.num("filling", r.pool.1 as u64);
    ro.raw("pool", &pool.end());
    ro.num("sessions", r.sessions);
    ro.raw("pinned", if r.pinned { "true" } else { "false" });
    ro.raw("retired", if r.retired { "true" } else { "false" });
    ro.num("frozen", r.frozen);
    let lf = r.last_freeze.map_or("null".into(), |(f, bytes, ago)| {
        let mut fo = Obj::new();
        fo.str("form", f.name());
        fo.num("after_bytes", bytes);
        fo.num("ago_ms", ago);
        fo.end()
    });
    ro.raw("last_freeze", &lf);
    ro.end()
}

/// The `tg_ranges` object of the `--json` form: `last` and `nft` are `null` or
/// `{"ok":bool,"what":str,"age_ms":n}`.
fn ranges_json(r: &RangesStatus) -> String {
    let result = |x: &Option<(bool, String, u64)>| match x {
        Some((ok, what, age)) => {
            let mut lo = Obj::new();
            lo.raw("ok", if *ok { "true" } else { "false" });
            lo.str("what", what);
            lo.num("age_ms", *age);
            lo.end()
        }
        None => "null".into(),
    };
    let mut ro = Obj::new();
    ro.str("source", &r.source);
    ro.raw("url", &r.url.as_deref().map_or("null".into(), quote));
    ro.num("v4", r.v4 as u64);
    ro.num("v6", r.v6 as u64);
    ro.num("fetches", r.fetches);
    ro.num("failures", r.failures);
    ro.raw("last", &result(&r.last));
    ro.raw("nft", &result(&r.nft));
    ro.end()
}

/// The `shared_list` object of the `--json` form.
fn shared_list_json(l: &SharedList) -> String {
    let mut so = Obj::new();
    so.str("source", &l.source);
    so.num("in_use", l.in_use as u64);
    so.num("kept", l.kept as u64);
    so.num("dropped", l.dropped as u64);
    so.num("fetches", l.fetches);
    so.num("failures", l.failures);
    match &l.last {
        Some((what, age)) => {
            so.str("last", what);
            so.num("last_age_ms", *age);
        }
        None => so.raw("last", "null"),
    }
    so.end()
}

/// The `counters` object of the `--json` form.
fn counters_json(c: &Counters) -> String {
    let mut co = Obj::new();
    co.num("accepted", c.accepted);
    co.num("closed", c.closed_total());
    let mut by = Obj::new();
    for (r, n) in &c.closed {
        by.num(r, *n);
    }
    co.raw("closed_by_reason", &by.end());
    co.num("bytes_up", c.bytes_up);
    co.num("bytes_down", c.bytes_down);
    co.num("hedges", c.hedges);
    co.num("probes_started", c.probes[0]);
    co.num("probes_ok", c.probes[1]);
    co.num("probes_failed", c.probes[2]);
    co.num("probes_deferred", c.probes_deferred);
    co.num("unpaced", c.unpaced);
    co.num("proxy_failures", c.proxy_failures);
    co.num("pool_hits", c.pool_hits);
    co.num("pool_fills", c.pool_fills);
    co.num("pool_retries", c.pool_retries);
    co.num("memory_trims", c.memory_trims);
    let mut at = Obj::new();
    for t in Tier::ALL {
        let a = c.attempts[t.index()];
        let mut ao = Obj::new();
        ao.num("started", a[0]);
        ao.num("ok", a[1]);
        ao.num("failed", a[2]);
        ao.num("cancelled", a[3]);
        at.raw(t.name(), &ao.end());
    }
    co.raw("attempts", &at.end());
    let mut masked = Obj::new();
    for (r, n) in &c.masked {
        masked.num(r, *n);
    }
    co.raw("masked", &masked.end());
    let mut tls = Obj::new();
    for (k, v) in [
        "accepted",
        "replays",
        "stale",
        "unchecked",
        "replay_evicted",
    ]
    .iter()
    .zip(c.tls)
    {
        tls.num(k, v);
    }
    co.raw("tls", &tls.end());
    let mut fz = Obj::new();
    for f in crate::error::Freeze::ALL {
        fz.num(f.name(), c.frozen[f.index()]);
    }
    co.raw("frozen", &fz.end());
    co.end()
}

/// A JSON object under construction.
struct Obj(String);

impl Obj {
    fn new() -> Obj {
        Obj(String::from("{"))
    }

    /// `"key":` then `value` as given (already JSON).
    fn raw(&mut self, key: &str, value: &str) {
        if self.0.len() > 1 {
            self.0.push(',');
        }
        self.0.push_str(&quote(key));
        self.0.push(':');
        self.0.push_str(value);
    }

    fn str(&mut self, key: &str, value: &str) {
        self.raw(key, &quote(value));
    }

    fn num(&mut self, key: &str, value: u64) {
        self.raw(key, &value.to_string());
    }

    fn opt(&mut self, key: &str, value: Option<u64>) {
        self.raw(key, &value.map_or("null".into(), |v| v.to_string()));
    }

    fn end(mut self) -> String {
        self.0.push('}');
        self.0
    }
}
