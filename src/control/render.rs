//! Drawing a [`Status`]: the human table of `ctl status` ([`table`]); its `--json` form
//! ([`json`]) is `render::json`'s. Shared by both: [`duration`] and what "loopback only" means.

use std::fmt::Write;

use crate::config::{Tier, WayIn};

use super::status::{DnsStatus, Status};

mod json;
pub use json::json;

/// The human form: a header, the route table with aligned columns, budgets and counters.
pub fn table(s: &Status) -> String {
    let mut out = String::new();
    table_head(&mut out, s);
    table_routes(&mut out, s);
    for (worker, left) in &s.budgets {
        let _ = writeln!(out, "budget: worker {worker}: {left} requests left today");
    }
    for a in &s.accounts {
        let state = match a.held {
            None => "serving".to_string(),
            Some((why, ms)) => format!("held for {} ({why})", duration(ms)),
        };
        let _ = writeln!(
            out,
            "account: {} ({} worker(s)): {state}, {} requests sent today",
            a.name,
            a.workers.len(),
            a.requests_today
        );
    }
    table_counters(&mut out, s);
    table_tail(&mut out, s);
    out
}

/// The table's first lines: version, uptime, listener (marked when it is loopback only), pin;
/// sessions per tier.
fn table_head(out: &mut String, s: &Status) {
    let _ = writeln!(
        out,
        "tg-ws-proxy {}, up {}, listening on {}{}, pin: {}",
        s.version,
        duration(s.uptime_ms),
        s.listen,
        if loopback_only(s) {
            " (loopback only: the LAN cannot connect, see --host)"
        } else {
            ""
        },
        s.pin.as_deref().unwrap_or("none")
    );
    let tiers: Vec<String> = Tier::ALL
        .iter()
        .map(|t| format!("{} {}", t.name(), s.sessions_per_tier[t.index()]))
        .collect();
    let _ = writeln!(
        out,
        "sessions: {}/{} ({}, connecting {})",
        s.sessions_active,
        s.sessions_capacity,
        tiers.join(", "),
        s.sessions_connecting()
    );
    let t = &s.telegram;
    let tried: Vec<String> = (t.tried.iter())
        .map(|(tier, n, f)| format!("{tier} {n} route(s) {f}"))
        .collect();
    let tried = if tried.is_empty() {
        String::new()
    } else {
        format!(" (tried: {})", tried.join(", "))
    };
    let _ = writeln!(
        out,
        "telegram: {} for {}{tried}",
        t.verdict,
        duration(t.for_ms)
    );
}

/// The route table with aligned columns and its legend (or a line saying there are none).
fn table_routes(out: &mut String, s: &Status) {
    let mut rows = vec![[
        "ID",
        "ROUTE",
        "STATE",
        "COOLDOWN",
        "RTT-P95",
        "LAST-FAILURE",
        "PROBE",
        "POOL",
        "SESSIONS",
        "FROZEN",
    ]
    .map(String::from)
    .to_vec()];
    for r in &s.routes {
        rows.push(vec![
            format!("#{}{}", r.id, if r.pinned { "*" } else { "" }),
            r.label.clone(),
            r.state.to_string(),
            if r.cooldown_left_ms > 0 {
                duration(r.cooldown_left_ms)
            } else {
                "-".into()
            },
            r.rtt_p95_ms.map_or("-".into(), |v| format!("{v}ms")),
            r.last_failure
                .map_or("-".into(), |(f, ago)| format!("{f} {} ago", duration(ago))),
            r.probe.to_string(),
            format!("{}/{}", r.pool.0, r.pool.1),
            r.sessions.to_string(),
            match r.last_freeze {
                Some((_, bytes, _)) => {
                    format!("{} (after {})", r.frozen, crate::stats::human_bytes(bytes))
                }
                None => "-".into(),
            },
        ]);
    }
    if s.routes.is_empty() {
        out.push_str("routes: none yet (created on a DC's first use or by the startup probes)\n");
    } else {
        out.push_str(&columns(&rows));
        if s.routes.iter().any(|r| r.pinned) {
            out.push_str("(* pinned; POOL = warm/filling)\n");
        } else {
            out.push_str("(POOL = warm/filling)\n");
        }
    }
}

/// The outbound proxy's failures, the counters, closes per reason, descriptors, RSS, reloads.
fn table_counters(out: &mut String, s: &Status) {
    let c = &s.counters;
    if c.proxy_failures > 0 {
        let _ = writeln!(
            out,
            "outbound proxy: {} failures of the proxy itself (no route cooled down for them)",
            c.proxy_failures
        );
    }
    let _ = writeln!(
        out,
        "counters: accepted={} closed={} zero-byte-closes={} up={} down={} hedges={} probes={}/{}/{} pool={}/{}",
        c.accepted,
        c.closed_total(),
        c.zero_byte_closes,
        crate::stats::human_bytes(c.bytes_up),
        crate::stats::human_bytes(c.bytes_down),
        c.hedges,
        c.probes[0],
        c.probes[1],
        c.probes[2],
        c.pool_hits,
        c.pool_fills
    );
    let closed: Vec<String> = c
        .closed
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(r, n)| format!("{r}={n}"))
        .collect();
    if !closed.is_empty() {
        let _ = writeln!(out, "closed: {}", closed.join(" "));
    }
    let opt = |v: Option<u64>| v.map_or("?".to_string(), |v| v.to_string());
    let _ = write!(
        out,
        "fds: {}/{}  rss: {}KiB",
        opt(s.fds_used),
        opt(s.fds_limit),
        opt(s.rss_kib)
    );
    if let Some((applied, rejected)) = s.reloads {
        let _ = write!(out, "  reloads: {applied} applied, {rejected} rejected");
    }
    out.push('\n');
}

/// Recent frozen sessions and the shared CF domain list.
fn table_tail(out: &mut String, s: &Status) {
    let ways: Vec<String> = WayIn::ALL
        .iter()
        .map(|w| match s.ways[w.index()] {
            (Some(a), n) => format!("{} {a} ({n})", w.name()),
            (None, n) if n > 0 => format!("{} closed ({n})", w.name()),
            (None, _) => format!("{} off", w.name()),
        })
        .collect();
    let _ = writeln!(out, "ways in: {}", ways.join(", "));
    if !s.dcs.is_empty() {
        let dcs: Vec<String> = s.dcs.iter().map(|(dc, n)| format!("{dc} {n}")).collect();
        let _ = writeln!(out, "sessions per DC: {}", dcs.join(", "));
    }
    for (ip, n, ago) in &s.unknown_destinations {
        let _ = writeln!(
            out,
            "unknown destination: {ip}: {n} closes, last {} ago (--dc-addr IP=DC if it is a DC)",
            duration(*ago)
        );
    }
    for e in &s.edges {
        let why = e
            .why
            .as_deref()
            .map_or(String::new(), |w| format!(" ({w})"));
        let _ = writeln!(
            out,
            "cf edge {}: {}{why}, {}, {} route(s)",
            e.ip,
            e.state,
            e.source,
            e.routes.len()
        );
    }
    for (ip, dc) in &s.learned_dcs {
        let _ = writeln!(out, "learned: {ip} is {dc}");
    }
    for (f, ago) in &s.frozen {
        let _ = writeln!(
            out,
            "frozen: client {} on route #{} after {} down ({}), {} ago",
            f.peer,
            f.route,
            crate::stats::human_bytes(f.after_bytes),
            f.freeze,
            duration(*ago)
        );
    }
    if let Some(r) = &s.tg_ranges {
        let said = |x: &Option<(bool, String, u64)>, none: &str| {
            x.as_ref().map_or(none.to_string(), |(_, what, age)| {
                format!("{what} ({}s ago)", age / 1000)
            })
        };
        let no_fetch = if r.url.is_some() {
            "none yet"
        } else {
            "none (no refresh)"
        };
        let _ = writeln!(
            out,
            "telegram ranges: {} IPv4, {} IPv6 from {}; refresh {}: fetches {} ({} failed), \
             last: {}; firewall sets: {}",
            r.v4,
            r.v6,
            r.source,
            r.url.as_deref().unwrap_or("off"),
            r.fetches,
            r.failures,
            said(&r.last, no_fetch),
            said(
                &r.nft,
                "not updated by the proxy yet (`firewall install` sets them)"
            )
        );
    }
    table_dns(out, &s.dns);
    if let Some(l) = &s.shared_list {
        let last = l
            .last
            .as_ref()
            .map_or("none yet".to_string(), |(what, age)| {
                format!("{what} ({}s ago)", age / 1000)
            });
        let _ = writeln!(
            out,
            "shared cf domains: {} in use from {} (list: {} kept, {} dropped over the cap of \
             {}); fetches {} ({} failed); last: {last}",
            l.in_use,
            l.source,
            l.kept,
            l.dropped,
            crate::route::cflist::MAX_DOMAINS,
            l.fetches,
            l.failures
        );
    }
}

/// The resolver's lines: counters, and one line per DoH server.
fn table_dns(out: &mut String, d: &DnsStatus) {
    let c = &d.counters;
    let doh = if d.doh.is_empty() {
        "plain DNS".to_string()
    } else {
        format!(
            "DoH ({} server(s), fallback to plain DNS {})",
            d.doh.len(),
            if d.doh_fallback { "on" } else { "off" }
        )
    };
    let _ = writeln!(
        out,
        "dns: {doh}; queries {}, answers {}, ignored {}, failed {}",
        c.queries, c.answers, c.ignored, c.failures
    );
    for (i, h) in d.doh.iter().enumerate() {
        let last = h.last_error.as_ref().map_or(String::new(), |(why, age)| {
            format!("; last error {}s ago: {why}", age / 1000)
        });
        let _ = writeln!(
            out,
            "dns: doh {} {}: {}, {} exchanges ({} answered, {} failed){last}",
            i + 1,
            h.url,
            h.state,
            h.queries,
            h.answers,
            h.failures
        );
    }
}

/// Whether the proxy listener takes only this machine's own connections (127.0.0.0/8, ::1):
/// phones and other LAN devices cannot reach it (issue 23: `run` without `--host`).
pub(super) fn loopback_only(s: &Status) -> bool {
    s.listen.ip().is_loopback()
}

/// `3723000` ms → `1h02m`; `61000` → `1m01s`; `1500` → `1.5s`; `40` → `40ms`.
pub fn duration(ms: u64) -> String {
    let s = ms / 1000;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if ms >= 1000 {
        format!("{}.{}s", s, (ms % 1000) / 100)
    } else {
        format!("{ms}ms")
    }
}

/// Rows padded to aligned columns (two spaces apart, the last column unpadded), two-space indent.
fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::from(" ");
        for (i, c) in r.iter().enumerate() {
            line.push(' ');
            line.push_str(c);
            if i + 1 < r.len() {
                let pad = widths[i] - c.chars().count();
                line.extend(std::iter::repeat_n(' ', pad + 1));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::status::tests::sample;
    use crate::logging::events::quote;

    #[test]
    fn json_parses_and_carries_every_field() {
        let st = sample();
        let text = json(&st);
        assert!(text.ends_with('\n') && text.lines().count() == 1);
        let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(v["version"], "0.1.0");
        assert_eq!(v["listen"], "127.0.0.1:1443");
        assert_eq!(v["listen_loopback_only"], true);
        let mut lan = sample();
        lan.listen = "192.168.1.1:1443".parse().unwrap();
        let v2: serde_json::Value = serde_json::from_str(&json(&lan)).expect("valid JSON");
        assert_eq!(v2["listen_loopback_only"], false);
        assert!(table(&lan)
            .starts_with("tg-ws-proxy 0.1.0, up 1h02m, listening on 192.168.1.1:1443, pin"));
        assert_eq!(v["pin"], "tier tcp");
        assert_eq!(v["sessions"]["active"], 3);
        assert_eq!(v["sessions"]["per_tier"]["ws"], 2);
        assert_eq!(v["sessions"]["connecting"], 1);
        assert_eq!(v["sessions"]["waiting_on_client"], 1);
        let r = &v["routes"];
        assert_eq!(r.as_array().unwrap().len(), 2);
        assert_eq!(
            r[0]["label"], "ws:DC2 \"x\\y\"@127.0.0.1:443",
            "escaped and back"
        );
        assert_eq!(r[0]["state"], "up");
        assert_eq!(r[0]["rtt_p95_ms"], 41);
        assert!(r[0]["last_failure"].is_null());
        assert_eq!(r[1]["last_failure"]["class"], "http-502");
        assert_eq!(r[1]["last_failure"]["ago_ms"], 2500);
        assert_eq!(r[1]["cooldown_left_ms"], 1500);
        assert_eq!(r[1]["pinned"], true);
        assert_eq!(r[1]["dc"], "DC2");
        assert_eq!(v["budgets"][0]["left"], 99_000);
        assert_eq!(v["edges"][0]["address"], "104.16.1.2");
        assert_eq!(v["edges"][0]["state"], "frozen");
        assert_eq!(v["edges"][0]["why"], "stalled");
        assert_eq!(v["edges"][0]["source"], "sampled from 104.16.0.0/13");
        assert_eq!(v["edges"][0]["routes"][0], 1);
        assert_eq!(v["accounts"][0]["state"], "held");
        assert_eq!(v["accounts"][0]["why"], "daily-quota");
        assert_eq!(v["accounts"][0]["held_for_ms"], 7_200_000);
        assert_eq!(v["accounts"][0]["requests_today"], 1_000);
        assert_eq!(v["fds"]["used"], 12);
        assert_eq!(v["dns"]["queries"], 9);
        assert_eq!(v["dns"]["doh_fallback"], false);
        assert_eq!(v["dns"]["doh"][0]["state"], "down");
        assert_eq!(v["dns"]["doh"][0]["last_error"], "HTTP 502");
        assert_eq!(v["dns"]["doh"][0]["last_error_age_ms"], 1_500);
        assert!(table(&sample()).contains("dns: doh 1 https://127.0.0.1:8443/dns-query: down"));
        assert!(v["reloads"].is_null());
        assert_eq!(v["counters"]["closed_by_reason"]["client-eof"], 2);
        assert_eq!(v["counters"]["attempts"]["ws"]["ok"], 3);
        assert_eq!(v["zero_byte_closes"], 1);
        assert_eq!(r[0]["frozen"], 0);
        assert!(r[0]["last_freeze"].is_null());
        assert_eq!(r[1]["frozen"], 2);
        assert_eq!(r[1]["last_freeze"]["form"], "no-ack");
        assert_eq!(r[1]["last_freeze"]["after_bytes"], 16_384);
        let f = &v["frozen_sessions"][0];
        assert_eq!(f["client"], "192.168.1.20:50000");
        assert_eq!(
            (f["route"].as_u64(), f["ago_ms"].as_u64()),
            (Some(0), Some(900))
        );
        assert_eq!(v["counters"]["frozen"]["no-ack"], 0);
    }

    #[test]
    fn quote_escapes_what_json_requires() {
        for s in ["plain", "q\"b\\s", "nl\nt\tcr\r", "\u{1}\u{1f}", "ünï…"] {
            let back: String = serde_json::from_str(&quote(s)).expect("valid string");
            assert_eq!(back, s);
        }
        assert_eq!(quote("\u{1}"), "\"\\u0001\"");
    }

    #[test]
    fn table_aligns_columns_and_says_what_it_knows() {
        let t = table(&sample());
        assert!(
            t.starts_with(
                "tg-ws-proxy 0.1.0, up 1h02m, listening on 127.0.0.1:1443 (loopback only: the LAN \
                 cannot connect, see --host), pin: tier tcp\n"
            ),
            "{t}"
        );
        assert!(
            t.contains("sessions: 3/100 (ws 2, front 0, worker 0, cfproxy 0, mtproto 0, cfproxy-ws 0, tcp 0, \
             connecting 1)"),
            "{t}"
        );
        let lines: Vec<&str> = t.lines().filter(|l| l.starts_with("  ")).collect();
        assert_eq!(lines.len(), 3, "{t}");
        let col = |l: &str, w: &str| l.find(w).unwrap_or_else(|| panic!("{w} in {l}"));
        let state = col(lines[0], "STATE");
        assert_eq!(col(lines[1], "up"), state, "{t}");
        assert_eq!(col(lines[2], "down"), state, "{t}");
        assert!(lines[2].contains("#1*"), "{t}");
        assert!(lines[2].contains("http-502 2.5s ago"), "{t}");
        assert!(lines[2].contains("1.5s"), "{t}");
        assert!(lines[1].contains("41ms"), "{t}");
        assert!(t.contains("budget: worker w…workers.dev:443: 99000 requests left today"));
        assert!(t.contains("closed: client-eof=2"), "{t}");
        assert!(t.contains("fds: 12/1024  rss: 3000KiB"), "{t}");
        assert_eq!(duration(40), "40ms");
        assert_eq!(duration(61_000), "1m01s");
    }
}
