//! What `check` prints: one [`Row`] per dial option with its [`Attempt`]s, the aligned table
//! ([`render`]), one [`Verdict`] per DC ([`verdicts`]) and the `diagnosis:` lines over every
//! row ([`diagnosis`]: network down, Telegram unreachable on every tier, init refused, a
//! freezing tier). Pure formatting and arithmetic over the results; the probing is `mod.rs`'s.

use std::net::IpAddr;

use crate::config::Tier;
use crate::error::Failure;
use crate::mtproto::dc::DcId;
use crate::net::dial::DialSpec;
use crate::route::probe::{INIT_CLOSED, INIT_RESET};

/// The class `check` shows for a probe's init answered by a close or a reset with nothing sent
/// back (`closed-early` / `reset` with [`INIT_CLOSED`] / [`INIT_RESET`]).
pub const INIT_REFUSED: &str = "init-refused";

/// One round's result for one dial option.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// `resPQ` arrived after this many ms.
    Ok(u64),
    /// Failed after `ms`: failure class (`timeout`, `http-302`, `dns`…) and a detail.
    Failed {
        /// Failure class as logged by the proxy.
        class: String,
        /// Time from the probe's start to the failure (ms).
        ms: u64,
        /// Human detail.
        detail: String,
    },
}

/// One dial option of one route (a `ws` route has two: one per `kws` name).
#[derive(Clone, Debug)]
pub struct Row {
    /// DC with its media flag.
    pub dc: DcId,
    /// Tier of the route.
    pub tier: Tier,
    /// `ws:DC2 kws2.web.telegram.org@149.154.167.220:443`, `tcp:DC2 149.154.167.51:443`, …
    /// (Worker and CF names redacted as in the logs).
    pub label: String,
    /// What to dial; `None` when the route's host name did not resolve.
    pub spec: Option<DialSpec>,
    /// Why the host name did not resolve (with `spec == None`).
    pub unresolved: Option<String>,
    /// One entry per round.
    pub attempts: Vec<Attempt>,
    /// The Cloudflare edge (`--cf-ip`) a Worker or cfproxy row dials, if any.
    pub edge: Option<IpAddr>,
}

impl Row {
    /// Rounds that got a `resPQ`.
    pub fn ok_count(&self) -> usize {
        self.attempts
            .iter()
            .filter(|a| matches!(a, Attempt::Ok(_)))
            .count()
    }

    /// More than half of the rounds got a `resPQ`.
    pub fn works(&self) -> bool {
        !self.attempts.is_empty() && self.ok_count() * 2 > self.attempts.len()
    }

    /// `OK`, `FLAKY k/N`, or the first failure's class.
    pub fn result(&self) -> String {
        let ok = self.ok_count();
        let n = self.attempts.len();
        if n > 0 && ok == n {
            return "OK".to_string();
        }
        if ok > 0 {
            return format!("FLAKY {ok}/{n}");
        }
        self.first_failure()
            .map_or_else(|| "-".to_string(), |(class, _)| class.to_string())
    }

    /// Median latency (ms) of the OK rounds, or of every round when none was OK.
    pub fn median_ms(&self) -> Option<u64> {
        let mut ms: Vec<u64> = self
            .attempts
            .iter()
            .filter_map(|a| match a {
                Attempt::Ok(ms) => Some(*ms),
                Attempt::Failed { .. } => None,
            })
            .collect();
        if ms.is_empty() {
            ms = self
                .attempts
                .iter()
                .map(|a| match a {
                    Attempt::Ok(ms) | Attempt::Failed { ms, .. } => *ms,
                })
                .collect();
        }
        median(&mut ms)
    }

    fn first_failure(&self) -> Option<(&str, &str)> {
        self.attempts.iter().find_map(|a| match a {
            Attempt::Failed { class, detail, .. } => Some((class.as_str(), detail.as_str())),
            Attempt::Ok(_) => None,
        })
    }
}

/// Lower median (`None` when empty); sorts `v`.
pub fn median(v: &mut [u64]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(v[(v.len() - 1) / 2])
}

/// The table: a header, then one aligned line per row.
pub fn render(rows: &[Row]) -> String {
    let mut lines: Vec<[String; 5]> = vec![[
        "DC".into(),
        "route".into(),
        "result".into(),
        "ms".into(),
        "detail".into(),
    ]];
    for r in rows {
        let detail = match (r.first_failure(), r.ok_count() > 0) {
            (Some((class, d)), true) => format!("{class}: {d}"),
            (Some((_, d)), false) => d.to_string(),
            (None, _) => String::new(),
        };
        lines.push([
            r.dc.label(),
            r.label.clone(),
            r.result(),
            r.median_ms().map_or_else(|| "-".into(), |m| m.to_string()),
            detail,
        ]);
    }
    let mut width = [0usize; 4];
    for l in &lines {
        for (w, cell) in width.iter_mut().zip(l.iter()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for l in &lines {
        let mut line = String::new();
        for (k, cell) in l.iter().enumerate() {
            if k == 3 {
                // Latency right-aligned.
                line.push_str(&format!("{:>w$}  ", cell, w = width[3]));
            } else if k < 4 {
                line.push_str(&format!("{:<w$}  ", cell, w = width[k]));
            } else {
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Verdict for one DC (with its media flag).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The DC.
    pub dc: DcId,
    /// At least one route works.
    pub ok: bool,
    /// `DC2   ok via ws, tcp` / `DC2m  FAILED: no working route` / `DC7 FAILED: no route …`.
    pub line: String,
}

/// The production DCs `dcs` × {non-media, media}, in that order: what `check` covers.
pub fn dc_ids(dcs: &[u16]) -> impl Iterator<Item = DcId> + '_ {
    dcs.iter().flat_map(|&dc| {
        [false, true].map(|media| DcId {
            dc,
            media,
            test: false,
        })
    })
}

/// True if `row` was tried and every round failed because this host has no path at all:
/// network unreachable or no local address (of the network-class failures,
/// `Failure::is_network`, host unreachable names one host, not this host's network).
fn network_only(row: &Row) -> bool {
    let network = [Failure::NetUnreachable, Failure::AddrUnavailable].map(|f| f.to_string());
    !row.attempts.is_empty()
        && row.attempts.iter().all(|a| match a {
            Attempt::Failed { class, .. } => network.contains(class),
            Attempt::Ok(_) => false,
        })
}

/// True if `row` was tried and every round failed at the outbound proxy itself
/// (`Failure::is_proxy`: unreachable, credentials refused, protocol error).
fn proxy_only(row: &Row) -> bool {
    let proxy = [
        Failure::ProxyUnreachable,
        Failure::ProxyAuth,
        Failure::ProxyProtocol,
    ]
    .map(|f| f.to_string());
    !row.attempts.is_empty()
        && row.attempts.iter().all(|a| match a {
            Attempt::Failed { class, .. } => proxy.contains(class),
            Attempt::Ok(_) => false,
        })
}

/// One line per `--cf-ip` edge the rows dialled, in first-seen order: `cf edge IP: works
/// (k of N routes)` when a route through it got its `resPQ` in most rounds, else `cf edge IP:
/// failed: DETAIL` with the first failure seen on it.
pub fn edge_lines(rows: &[Row]) -> Vec<String> {
    let mut edges: Vec<IpAddr> = Vec::new();
    for ip in rows.iter().filter_map(|r| r.edge) {
        if !edges.contains(&ip) {
            edges.push(ip);
        }
    }
    edges
        .into_iter()
        .map(|ip| {
            let on: Vec<&Row> = rows.iter().filter(|r| r.edge == Some(ip)).collect();
            let works = on.iter().filter(|r| r.works()).count();
            if works > 0 {
                format!("cf edge {ip}: works ({works} of {} routes)", on.len())
            } else {
                let why = on
                    .iter()
                    .find_map(|r| r.first_failure())
                    .map_or("no answer".to_string(), |(c, d)| format!("{c}: {d}"));
                format!("cf edge {ip}: failed: {why}")
            }
        })
        .collect()
}

/// One verdict per DC in `dcs` × {non-media, media}.
pub fn verdicts(rows: &[Row], dcs: &[u16]) -> Vec<Verdict> {
    let mut out = Vec::new();
    for dc in dc_ids(dcs) {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.dc == dc).collect();
        let mut tiers: Vec<&str> = mine
            .iter()
            .filter(|r| r.works())
            .map(|r| r.tier.name())
            .collect();
        tiers.dedup();
        let (ok, text) = if mine.is_empty() {
            (
                false,
                "FAILED: no route configured (no --dc-ip / --tcp-dc-ip, not in the built-in table)"
                    .to_string(),
            )
        } else if tiers.is_empty() && mine.iter().all(|r| network_only(r)) {
            (
                false,
                "FAILED: network unreachable from this host (no route is at fault)".to_string(),
            )
        } else if tiers.is_empty() && mine.iter().all(|r| proxy_only(r)) {
            (
                false,
                "FAILED: the outbound proxy failed (--outbound-proxy; no route is at fault)"
                    .to_string(),
            )
        } else if tiers.is_empty() {
            (false, "FAILED: no working route".to_string())
        } else {
            (true, format!("ok via {}", tiers.join(", ")))
        };
        out.push(Verdict {
            dc,
            ok,
            line: format!("{:<5} {text}", dc.label()),
        });
    }
    out
}

/// The class a failed round shows: the failure's own, except a close or reset in answer to our
/// init with nothing sent back ([`INIT_REFUSED`]): the peer was reached and refused us.
pub fn class_of(f: Failure, detail: &str) -> String {
    let refused = match f {
        Failure::ClosedEarly => detail.starts_with(INIT_CLOSED),
        Failure::Reset => detail.starts_with(INIT_RESET),
        _ => false,
    };
    if refused {
        INIT_REFUSED.to_string()
    } else {
        f.to_string()
    }
}

/// What this host's OS answered, for a network-class failure shown as `class`.
fn os_error(class: &str) -> &'static str {
    if class == Failure::AddrUnavailable.to_string() {
        "EADDRNOTAVAIL, cannot assign requested address: no local address of that family"
    } else if class == Failure::HostUnreachable.to_string() {
        "EHOSTUNREACH, no route to host"
    } else {
        "ENETUNREACH, network is unreachable: no route out of this host (link down, no \
         default route)"
    }
}

/// The `diagnosis:` lines over every row that was tried, telling apart (issue 23 §6):
/// * this host's network is down: every row failed with network unreachable or no local
///   address (the OS error named) — nothing else is said;
/// * Telegram unreachable on every tier: no row works and none was answered at all (each
///   tier with its routes and commonest failure);
/// * per tier, routes whose init was refused ([`INIT_REFUSED`]) and routes that freeze
///   (`stalled`, with the bytes they let through);
/// * otherwise, Telegram reachable and via which tiers.
pub fn diagnosis(rows: &[Row]) -> Vec<String> {
    let tried: Vec<&Row> = rows.iter().filter(|r| !r.attempts.is_empty()).collect();
    if tried.is_empty() {
        return Vec::new();
    }
    if tried.iter().all(|r| network_only(r)) {
        let class = tried[0].first_failure().map_or("", |(c, _)| c);
        return vec![format!(
            "diagnosis: this host's network is down: all {} route(s) failed before leaving it \
             (the OS: {}); not Telegram, not the routes",
            tried.len(),
            os_error(class)
        )];
    }
    let mut out = Vec::new();
    let mut tiers: Vec<Tier> = Vec::new();
    for r in &tried {
        if !tiers.contains(&r.tier) {
            tiers.push(r.tier);
        }
    }
    let failed_with =
        |r: &Row, class: &str| !r.works() && r.first_failure().is_some_and(|(c, _)| c == class);
    for &tier in &tiers {
        let mine: Vec<&Row> = tried.iter().copied().filter(|r| r.tier == tier).collect();
        let refused: Vec<&Row> = mine
            .iter()
            .copied()
            .filter(|r| failed_with(r, INIT_REFUSED))
            .collect();
        if let Some(first) = refused.first() {
            out.push(format!(
                "diagnosis: {}: reached, but our init was refused on {} route(s) (answered by a \
                 close, nothing sent back; e.g. {}): a wrong secret for the upstream proxy, or \
                 not an MTProto server",
                tier.name(),
                refused.len(),
                first.label
            ));
        }
        let stalled: Vec<&Row> = mine
            .iter()
            .copied()
            .filter(|r| failed_with(r, "stalled"))
            .collect();
        if let Some(first) = stalled.first() {
            let detail = first.first_failure().map_or("", |(_, d)| d);
            out.push(format!(
                "diagnosis: {}: freezes on {} route(s): bytes stop part-way ({detail}; the \
                 16 KB freeze), e.g. {}",
                tier.name(),
                stalled.len(),
                first.label
            ));
        }
    }
    let working: Vec<&str> = tiers
        .iter()
        .filter(|t| tried.iter().any(|r| r.tier == **t && r.works()))
        .map(|t| t.name())
        .collect();
    if !working.is_empty() {
        out.push(format!(
            "diagnosis: Telegram reachable via {}",
            working.join(", ")
        ));
        return out;
    }
    // Nothing works. Answered by nobody: no refusal, no freeze, no reply of any kind.
    let answered = ["stalled", INIT_REFUSED, "bad-reply"];
    let silent = tried.iter().all(|r| {
        r.first_failure()
            .is_some_and(|(c, _)| !answered.contains(&c))
    });
    if silent {
        let list: Vec<String> = tiers
            .iter()
            .map(|&t| {
                let mine: Vec<&Row> = tried.iter().copied().filter(|r| r.tier == t).collect();
                let mut classes: Vec<&str> = mine
                    .iter()
                    .filter_map(|r| r.first_failure().map(|(c, _)| c))
                    .collect();
                classes.sort_unstable();
                classes.dedup();
                format!(
                    "{} ({} route(s): {})",
                    t.name(),
                    mine.len(),
                    classes.join("/")
                )
            })
            .collect();
        out.push(format!(
            "diagnosis: Telegram unreachable on every tier tried: {}",
            list.join(", ")
        ));
    } else {
        out.push("diagnosis: no tier works (see the lines above)".to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(tier: Tier, label: &str, attempts: Vec<Attempt>) -> Row {
        Row {
            dc: DcId {
                dc: 2,
                media: false,
                test: false,
            },
            tier,
            label: label.into(),
            spec: None,
            unresolved: None,
            attempts,
            edge: None,
        }
    }

    fn failed(class: &str, detail: &str) -> Vec<Attempt> {
        vec![Attempt::Failed {
            class: class.into(),
            ms: 5,
            detail: detail.into(),
        }]
    }

    /// Issue 23 §6: `check` could not tell a wrong secret from an unreachable Telegram. The
    /// four cases each get their own line.
    #[test]
    fn diagnosis_tells_network_down_unreachable_refused_and_frozen_apart() {
        // The local network down: the OS error named, nothing else said.
        let down = [
            row(
                Tier::Ws,
                "ws:DC2 a",
                failed("network-unreachable", "could not start"),
            ),
            row(
                Tier::Tcp,
                "tcp:DC2 b",
                failed("network-unreachable", "could not start"),
            ),
        ];
        let d = diagnosis(&down);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(
            d[0].contains("network is down") && d[0].contains("ENETUNREACH"),
            "{d:?}"
        );

        // Telegram unreachable on every tier: each tier with its routes and failure.
        let dead = [
            row(Tier::Ws, "ws:DC2 a", failed("timeout", "deadline")),
            row(Tier::Ws, "ws:DC2 a2", failed("timeout", "deadline")),
            row(Tier::Tcp, "tcp:DC2 b", failed("refused", "connect")),
        ];
        let d = diagnosis(&dead);
        assert_eq!(
            d,
            vec![
                "diagnosis: Telegram unreachable on every tier tried: ws (2 route(s): timeout), \
                 tcp (1 route(s): refused)"
                    .to_string()
            ]
        );

        // Reached but refused: not "unreachable".
        let refused = [
            row(Tier::Ws, "ws:DC2 a", failed("timeout", "deadline")),
            row(
                Tier::Mtproto,
                "mtproto:DC2 up",
                failed(INIT_REFUSED, INIT_CLOSED),
            ),
        ];
        let d = diagnosis(&refused);
        assert!(d[0].starts_with("diagnosis: mtproto: reached, but our init was refused on 1"));
        assert_eq!(d[1], "diagnosis: no tier works (see the lines above)");

        // A freezing tier beside a working one.
        let frozen = [
            row(
                Tier::Ws,
                "ws:DC2 a",
                failed("stalled", "stalled after 16384 of 32768 bytes"),
            ),
            row(Tier::Tcp, "tcp:DC2 b", vec![Attempt::Ok(30)]),
        ];
        let d = diagnosis(&frozen);
        assert!(d[0].contains("ws: freezes on 1 route(s)") && d[0].contains("16384 of 32768"));
        assert_eq!(d[1], "diagnosis: Telegram reachable via tcp");
        assert!(diagnosis(&[]).is_empty());
    }

    /// A close or reset in answer to our init is `init-refused`; other closes keep their class.
    #[test]
    fn init_answered_by_a_close_is_init_refused() {
        assert_eq!(class_of(Failure::ClosedEarly, INIT_CLOSED), INIT_REFUSED);
        let reset = format!("{INIT_RESET}: Connection reset by peer (os error 104)");
        assert_eq!(class_of(Failure::Reset, &reset), INIT_REFUSED);
        assert_eq!(
            class_of(Failure::ClosedEarly, "closed after a partial reply"),
            "closed-early"
        );
        assert_eq!(class_of(Failure::Timeout, INIT_CLOSED), "timeout");
    }
}
