//! `ctl metrics`: the [`Status`] counters in the Prometheus text exposition format 0.0.4.
//!
//! Every family has one `# HELP` and one `# TYPE` line before its samples; names carry the
//! prefix `tgwsproxy_`; counters end in `_total`; labels are `tier`, `route`, `dc`, `reason`
//! and `state`, values escaped (`\\`, `\"`, `\n`). Route series are labelled with the route id
//! (`route="3"`, as `ctl status` shows it), its tier and DC. Times are seconds, sizes bytes.

use std::fmt::Write;

use crate::config::Tier;

use super::status::{Counters, Status};

/// The exposition text of `s`.
pub fn render(s: &Status) -> String {
    let mut e = Exposition::default();
    session_families(&mut e, s);
    traffic_families(&mut e, &s.counters);
    attempt_families(&mut e, &s.counters);
    route_families(&mut e, s);
    process_families(&mut e, s);
    e.out
}

/// The build, uptime, session gauges and the session counters (accepted, closed, frozen).
fn session_families(e: &mut Exposition, s: &Status) {
    let c = &s.counters;
    e.family(
        "build_info",
        "gauge",
        "Always 1; the version label is the running binary's.",
    );
    e.sample("build_info", &[("version", s.version)], 1);
    e.family(
        "uptime_seconds",
        "gauge",
        "Seconds since the proxy started.",
    );
    e.sample_f("uptime_seconds", &[], s.uptime_ms as f64 / 1000.0);
    let sessions = [
        (
            "sessions_active",
            "Sessions open now (connecting or relaying).",
            s.sessions_active,
        ),
        (
            "sessions_capacity",
            "Sessions that may be open at once (--max-connections).",
            s.sessions_capacity,
        ),
    ];
    for (name, help, v) in sessions {
        e.single(name, "gauge", help, v as u64);
    }
    e.family(
        "sessions_relaying",
        "gauge",
        "Sessions relaying now, per tier.",
    );
    for t in Tier::ALL {
        e.sample(
            "sessions_relaying",
            &[("tier", t.name())],
            s.sessions_per_tier[t.index()] as u64,
        );
    }
    e.single(
        "accepted_total",
        "counter",
        "Client connections accepted.",
        c.accepted,
    );
    e.family(
        "closed_total",
        "counter",
        "Sessions closed, per close reason.",
    );
    for (r, n) in &c.closed {
        e.sample("closed_total", &[("reason", r)], *n);
    }
    e.single(
        "zero_byte_closes_total",
        "counter",
        "Sessions the client closed after receiving zero bytes.",
        c.zero_byte_closes,
    );
    e.family(
        "frozen_sessions_total",
        "counter",
        "Sessions whose upstream froze while the client waited, per form of the proof.",
    );
    for f in crate::error::Freeze::ALL {
        e.sample(
            "frozen_sessions_total",
            &[("form", f.name())],
            c.frozen[f.index()],
        );
    }
}

/// Payload bytes, hedges, probes, budget deferrals, pacing, the outbound proxy, pools and
/// memory trims: one unlabelled counter each.
fn traffic_families(e: &mut Exposition, c: &Counters) {
    let probes = [
        (
            "probes_started_total",
            "Background probes started.",
            c.probes[0],
        ),
        (
            "probes_ok_total",
            "Background probes that succeeded.",
            c.probes[1],
        ),
        (
            "probes_failed_total",
            "Background probes that failed.",
            c.probes[2],
        ),
    ];
    for (name, help, v) in [
        (
            "bytes_up_total",
            "Payload bytes client to Telegram.",
            c.bytes_up,
        ),
        (
            "bytes_down_total",
            "Payload bytes Telegram to client.",
            c.bytes_down,
        ),
        (
            "hedges_total",
            "Hedges started (a second route raced a slow first).",
            c.hedges,
        ),
    ]
    .into_iter()
    .chain(probes)
    {
        e.single(name, "counter", help, v);
    }
    for (name, help, v) in [
        (
            "probes_deferred_total",
            "Probes and pool fills put off by a spent Worker budget.",
            c.probes_deferred,
        ),
        (
            "unpaced_total",
            "Client handshakes started at once past --pace-max-wait.",
            c.unpaced,
        ),
        (
            "proxy_failures_total",
            "Failures of the outbound proxy itself (unreachable, auth refused, protocol error).",
            c.proxy_failures,
        ),
        (
            "pool_hits_total",
            "Sessions served from a warm pool.",
            c.pool_hits,
        ),
        ("pool_fills_total", "Pool fills started.", c.pool_fills),
        (
            "pool_retries_total",
            "Sessions replayed after a silent pooled upstream.",
            c.pool_retries,
        ),
        (
            "memory_trims_total",
            "Times freed memory was given back to the OS after a burst.",
            c.memory_trims,
        ),
    ] {
        e.single(name, "counter", help, v);
    }
}

/// Upstream attempts per tier, clients masked per reason, and the fake-TLS gate's counters.
fn attempt_families(e: &mut Exposition, c: &Counters) {
    for (i, (name, help)) in [
        ("attempts_total", "Upstream attempts started, per tier."),
        ("attempts_ok_total", "Upstream attempts that won, per tier."),
        (
            "attempts_failed_total",
            "Upstream attempts that failed, per tier.",
        ),
        (
            "attempts_cancelled_total",
            "Upstream attempts cancelled by a winning race, per tier.",
        ),
    ]
    .iter()
    .enumerate()
    {
        e.family(name, "counter", help);
        for t in Tier::ALL {
            e.sample(name, &[("tier", t.name())], c.attempts[t.index()][i]);
        }
    }
    e.family(
        "masked_total",
        "counter",
        "Clients handed to the mask host, per reason.",
    );
    for (r, n) in &c.masked {
        e.sample("masked_total", &[("reason", r)], *n);
    }
    e.single(
        "tls_accepted_total",
        "counter",
        "Fake-TLS hellos accepted.",
        c.tls[0],
    );
    e.family(
        "tls_refused_total",
        "counter",
        "Fake-TLS hellos refused, per reason.",
    );
    e.sample("tls_refused_total", &[("reason", "replay")], c.tls[1]);
    e.sample("tls_refused_total", &[("reason", "stale")], c.tls[2]);
    e.single(
        "tls_unchecked_total",
        "counter",
        "Fake-TLS hellos accepted with the clock untrusted.",
        c.tls[3],
    );
    e.single(
        "tls_replay_evicted_total",
        "counter",
        "Replay cache entries pushed out by a full cache.",
        c.tls[4],
    );
}

/// Worker budgets, and what the process knows of itself when it could read it: descriptors,
/// RSS, reloads.
fn process_families(e: &mut Exposition, s: &Status) {
    e.family(
        "worker_budget_left",
        "gauge",
        "Requests left today in each Worker's budget (route = index:redacted host).",
    );
    for (i, (w, left)) in s.budgets.iter().enumerate() {
        e.sample(
            "worker_budget_left",
            &[("route", &format!("{i}:{w}"))],
            u64::from(*left),
        );
    }
    e.family(
        "worker_account_held",
        "gauge",
        "1 while a Worker account is held by its daily quota or Retry-After (account = redacted).",
    );
    for a in &s.accounts {
        e.sample(
            "worker_account_held",
            &[("account", &a.name)],
            u64::from(a.held.is_some()),
        );
    }
    e.family(
        "worker_account_requests_today",
        "gauge",
        "Requests sent to a Worker account's Workers since 00:00 UTC.",
    );
    for a in &s.accounts {
        e.sample(
            "worker_account_requests_today",
            &[("account", &a.name)],
            u64::from(a.requests_today),
        );
    }
    if let Some(fds) = s.fds_used {
        e.single("fds_used", "gauge", "Open file descriptors.", fds);
    }
    if let Some(limit) = s.fds_limit {
        e.single(
            "fds_limit",
            "gauge",
            "The soft limit on open file descriptors (RLIMIT_NOFILE).",
            limit,
        );
    }
    if let Some(kib) = s.rss_kib {
        e.single(
            "resident_memory_bytes",
            "gauge",
            "Resident set size.",
            kib.saturating_mul(1024),
        );
    }
    if let Some((applied, rejected)) = s.reloads {
        e.single("reloads_total", "counter", "Reloads applied.", applied);
        e.single(
            "reloads_rejected_total",
            "counter",
            "Reloads rejected (the old configuration kept).",
            rejected,
        );
    }
}

/// Per-route families: state (one series per route, the state as a label), cooldown left,
/// RTT p95, pool, sessions, pin.
fn route_families(e: &mut Exposition, s: &Status) {
    let ids: Vec<String> = s.routes.iter().map(|r| r.id.to_string()).collect();
    let dcs: Vec<String> = s.routes.iter().map(|r| r.dc.label()).collect();
    let labels = |i: usize| {
        let r = &s.routes[i];
        [
            ("route", ids[i].as_str()),
            ("tier", r.tier.name()),
            ("dc", dcs[i].as_str()),
        ]
    };
    e.family(
        "route_state",
        "gauge",
        "1 for each route, labelled with its health state (unknown, up, suspect, down) or retired.",
    );
    for (i, r) in s.routes.iter().enumerate() {
        let [a, b, c] = labels(i);
        e.sample("route_state", &[a, b, c, ("state", r.state)], 1);
    }
    e.family(
        "route_cooldown_seconds",
        "gauge",
        "Cooldown left of each route (0 unless down and cooling).",
    );
    for (i, r) in s.routes.iter().enumerate() {
        e.sample_f(
            "route_cooldown_seconds",
            &labels(i),
            r.cooldown_left_ms as f64 / 1000.0,
        );
    }
    e.family(
        "route_rtt_p95_seconds",
        "gauge",
        "95th percentile connect RTT of each route with enough samples.",
    );
    for (i, r) in s.routes.iter().enumerate() {
        if let Some(ms) = r.rtt_p95_ms {
            e.sample_f("route_rtt_p95_seconds", &labels(i), ms as f64 / 1000.0);
        }
    }
    e.family(
        "route_pool_warm",
        "gauge",
        "Warm pooled upstreams of each route.",
    );
    for (i, r) in s.routes.iter().enumerate() {
        e.sample("route_pool_warm", &labels(i), r.pool.0 as u64);
    }
    e.family(
        "route_sessions_total",
        "counter",
        "Sessions started on each route.",
    );
    for (i, r) in s.routes.iter().enumerate() {
        e.sample("route_sessions_total", &labels(i), r.sessions);
    }
    e.family(
        "route_frozen_sessions_total",
        "counter",
        "Sessions on each route whose upstream froze while the client waited.",
    );
    for (i, r) in s.routes.iter().enumerate() {
        e.sample("route_frozen_sessions_total", &labels(i), r.frozen);
    }
    e.family(
        "route_pinned",
        "gauge",
        "1 for routes the operator's pin selects (ctl pin), else 0.",
    );
    for (i, r) in s.routes.iter().enumerate() {
        e.sample("route_pinned", &labels(i), u64::from(r.pinned));
    }
}

/// The text being built.
#[derive(Default)]
struct Exposition {
    out: String,
}

impl Exposition {
    /// `# HELP` and `# TYPE` of family `name` (without the prefix).
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP tgwsproxy_{name} {help}");
        let _ = writeln!(self.out, "# TYPE tgwsproxy_{name} {kind}");
    }

    /// A family of one unlabelled sample: its `# HELP`, `# TYPE` and the sample.
    fn single(&mut self, name: &str, kind: &str, help: &str, v: u64) {
        self.family(name, kind, help);
        self.sample(name, &[], v);
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: u64) {
        self.line(name, labels, &v.to_string());
    }

    fn sample_f(&mut self, name: &str, labels: &[(&str, &str)], v: f64) {
        self.line(name, labels, &format!("{v}"));
    }

    fn line(&mut self, name: &str, labels: &[(&str, &str)], v: &str) {
        let _ = write!(self.out, "tgwsproxy_{name}");
        if !labels.is_empty() {
            let parts: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
                .collect();
            let _ = write!(self.out, "{{{}}}", parts.join(","));
        }
        let _ = writeln!(self.out, " {v}");
    }
}

/// A label value escaped for the text format: `\` → `\\`, `"` → `\"`, line feed → `\n`.
pub fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::status::tests::sample;
    use std::collections::{HashMap, HashSet};

    fn valid_name(n: &str) -> bool {
        let mut b = n.bytes();
        b.next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_' || c == b':')
            && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
    }

    /// Splits a sample line into (name, labels text, value), honouring escapes in label values.
    fn split(line: &str) -> (String, String, String) {
        let name_end = line.find(['{', ' ']).expect("name");
        let name = line[..name_end].to_string();
        let rest = &line[name_end..];
        if let Some(body) = rest.strip_prefix('{') {
            let mut esc = false;
            let mut quoted = false;
            for (i, c) in body.char_indices() {
                match c {
                    _ if esc => esc = false,
                    '\\' if quoted => esc = true,
                    '"' => quoted = !quoted,
                    '}' if !quoted => {
                        let value = body[i + 1..].trim().to_string();
                        return (name, body[..i].to_string(), value);
                    }
                    _ => {}
                }
            }
            panic!("unclosed labels: {line}");
        }
        (name, String::new(), rest.trim().to_string())
    }

    #[test]
    fn exposition_follows_the_text_format_rules() {
        let mut st = sample();
        st.reloads = Some((2, 1));
        let text = render(&st);
        let mut types: HashMap<String, String> = HashMap::new();
        let mut helps = HashSet::new();
        let mut series = HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap();
                assert!(helps.insert(name.to_string()), "two HELP for {name}");
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut w = rest.split(' ');
                let (name, kind) = (w.next().unwrap(), w.next().unwrap());
                assert!(helps.contains(name), "TYPE before HELP: {name}");
                assert!(["counter", "gauge"].contains(&kind), "{line}");
                assert!(
                    types.insert(name.to_string(), kind.to_string()).is_none(),
                    "one TYPE per family: {name}"
                );
                assert_eq!(
                    kind == "counter",
                    name.ends_with("_total"),
                    "counters end in _total: {name}"
                );
                continue;
            }
            assert!(!line.starts_with('#'), "{line}");
            let (name, labels, value) = split(line);
            assert!(
                valid_name(&name) && name.starts_with("tgwsproxy_"),
                "{name}"
            );
            assert!(types.contains_key(&name), "sample before its TYPE: {line}");
            assert!(value.parse::<f64>().is_ok(), "value of {line}");
            for pair in split_labels(&labels) {
                let (k, _) = pair.split_once('=').expect("k=v");
                assert!(
                    ["tier", "route", "dc", "reason", "state", "version", "form", "account"]
                        .contains(&k),
                    "label {k}"
                );
            }
            assert!(
                series.insert(format!("{name}{{{labels}}}")),
                "duplicate series {line}"
            );
        }
        assert!(text.ends_with('\n'));
        assert!(text.contains("tgwsproxy_accepted_total 5\n"), "{text}");
        assert!(text.contains("tgwsproxy_closed_total{reason=\"client-eof\"} 2\n"));
        assert!(text.contains(
            "tgwsproxy_route_state{route=\"1\",tier=\"tcp\",dc=\"DC2\",state=\"down\"} 1\n"
        ));
        assert!(text.contains(
            "tgwsproxy_route_rtt_p95_seconds{route=\"0\",tier=\"ws\",dc=\"DC2\"} 0.041\n"
        ));
        assert!(text.contains("tgwsproxy_reloads_rejected_total 1\n"));
        assert!(text.contains("tgwsproxy_sessions_relaying{tier=\"ws\"} 2\n"));
    }

    /// `a="x",b="y\"z"` → [`a="x"`, `b="y\"z"`].
    fn split_labels(s: &str) -> Vec<String> {
        let mut out = Vec::new();
        let (mut cur, mut quoted, mut esc) = (String::new(), false, false);
        for c in s.chars() {
            match c {
                _ if esc => esc = false,
                '\\' if quoted => esc = true,
                '"' => quoted = !quoted,
                ',' if !quoted => {
                    out.push(std::mem::take(&mut cur));
                    continue;
                }
                _ => {}
            }
            cur.push(c);
        }
        if !cur.is_empty() {
            out.push(cur);
        }
        out
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let mut st = sample();
        st.budgets = vec![("we\"ird\\\n".into(), 1)];
        let text = render(&st);
        assert!(
            text.contains("tgwsproxy_worker_budget_left{route=\"0:we\\\"ird\\\\\\n\"} 1\n"),
            "{text}"
        );
    }
}
