//! docs/flags.md, generated from the option table ([`render`]): one table per `run --help`
//! section, one row per flag with its names and value placeholder, `TG_*` variables, default
//! and meaning. The meaning is the flag's help text, or its [`DOCS`] entry where the reference
//! says more than `--help` has room for (examples, close reasons, links into docs/); aliases
//! and "restart only" are added from the table entry.
//!
//! Test-only: nothing here is in the binary. The test below fails when the committed file
//! differs from [`render`]'s output; `TG_UPDATE_DOCS=1 cargo test --locked --lib flags_doc`
//! rewrites it.

use super::table::{Group, Opt, Reload, RUN_OPTIONS};

/// Longer meanings for docs/flags.md, by long name: markdown, links relative to docs/. A flag
/// without an entry shows its help text.
const DOCS: &[(&str, &str)] = &[
    ("--host", "listen address, IPv4 or IPv6 (use the LAN address on a router: without it, phones \
        on the LAN cannot connect)"),
    ("--secret", "client secrets: 32 hex, `dd`+32 hex, `ee`+32 hex+hex(domain) (fake-TLS, on the \
        same port: see [Fake-TLS](ways-in.md#fake-tls-ee)); repeatable, comma list; `ps` shows \
        the command line, so prefer `TG_SECRET` or `--secret-file`"),
    ("--secret-file", "secrets from a file, one per line or comma-separated, `#` comments; \
        created with a fresh secret (mode 0600) if missing (its directory is not) by `run` at \
        start only: `link` and a reload refuse a missing file, naming it, and `check` and \
        `firewall` never read it; see [setup.md](setup.md#by-hand-on-any-linux-box)"),
    ("--dc-ip", "WebSocket front per DC, IPv6 in brackets, port 443 if omitted (repeatable, comma \
        list; replaces the defaults); test DC N (init index 1000N) uses DC N's front (the path \
        `/apiws_test` picks the test DC) unless `1000N:` is given"),
    ("--tcp-dc-ip", "raw TCP target per DC, same forms (repeatable, comma list), also a Worker's \
        `dst`; test DC N is set only as `1000N:`, so a production override never receives \
        test-DC sessions (`check` checks the production DCs only)"),
    ("--fronting-domain", "domain fronting (tier `front`): a DC's WS front dialled with TLS SNI \
        `NAME`, `Host` still `kwsN.web.telegram.org`; the certificate is verified against \
        `NAME`; planned only after the `ws` route failed at TLS or upgrade (repeatable, comma \
        list); see [Domain fronting](tiers.md#domain-fronting)"),
    ("--cf-worker-domain", "Cloudflare Worker host (a pasted URL is normalised), repeatable, comma \
        list; `HOST@ACCOUNT` names the account whose daily quota it shares (Workers on \
        `*.ACCOUNT.workers.dev` are grouped without it); see [Worker setup](tiers.md#worker-setup)"),
    ("--cf-domain", "Cloudflare-proxied domain with `kwsN` records, repeatable, comma list; see \
        [Cloudflare-proxied domains](tiers.md#cloudflare-proxied-domains)"),
    ("--cf-ip", "Cloudflare edge addresses for the `worker`, `cfproxy` and `cfproxy-ws` tiers: an \
        address, a range to sample from (`104.16.0.0/13`), `auto` (Cloudflare's published IPv4 \
        ranges) or `auto6` (IPv6); each Worker/domain gets one route per edge **instead of** its \
        DNS answer, SNI and `Host` unchanged; a sampled edge whose routes all failed is replaced by \
        a fresh sample in the background, a given address is only cooled; at most 8 edges; \
        repeatable, comma list; `ctl status` and `check` list the edges"),
    ("--mtproto-proxy", "upstream MTProto proxy `HOST:PORT:SECRET` for the `mtproto` tier (IPv6 \
        in brackets; secret plain, `dd` or `ee`), repeatable, comma list; see \
        [Chaining](tiers.md#chaining-to-another-mtproto-proxy-mtproto-tier)"),
    ("--cf-domain-list", "shared Cloudflare domain list (an `https://` URL or a file path), tried \
        after `--cf-domain`; `off` turns it off (see \
        [Shared domain list](tiers.md#shared-domain-list): the default contacts GitHub)"),
    ("--cf-domain-cache", "keep the last accepted shared domain list in PATH: read at start and \
        used until a fetch succeeds (e.g. after a reboot without network); rewritten only when \
        the list changes"),
    ("--mtproto-hello", "the ClientHello of the `mtproto` tier's `ee` hops: `classic` = Chrome's \
        with post-quantum key agreement off (517 bytes; every server takes it, JA4 one extension \
        away from Chrome's default); `chrome` = Chrome's as shipped with the X25519MLKEM768 share \
        (~1.7 KB, Chrome's JA4; mtg, telemt and this proxy take it, **the official MTProxy \
        refuses it** and masks the session, so the route fails); see \
        [protocol.md §2.6](protocol.md#26-our-clienthello-a-browsers-here)"),
    ("--cfproxy-ws", "the `cfproxy-ws` tier: the `--cf-domain` (and shared list) names over plain \
        `ws://` to `--cf-ws-port`, no TLS, after the TLS tiers; for networks that throttle TLS to \
        Cloudflare by SNI (MTProto inside stays obfuscated and encrypted; the session line says \
        `(ws://, no TLS)`; see [the ladder](tiers.md#the-ladder))"),
    ("--cf-connect-timeout", "the same for worker, cfproxy and cfproxy-ws attempts (TCP, TLS \
        where there is one, upgrade)"),
    ("--ws-ping-interval", "WS ping of a session idle for D toward Telegram's front, directly (ws) \
        or through a Cloudflare-proxied domain (cfproxy and cfproxy-ws, which pass it on); 0 = \
        never: that front reportedly closes on client pings"),
    ("--media-tier-order", "tiers to try for media DCs (downloads: DC -N), in order, e.g. to keep \
        the heavy traffic off a Worker's daily quota; same names as `--tier-order`"),
    ("--tls-cipher", "TLS cipher family offered first: `auto` = AES-GCM if the CPU has AES \
        instructions (x86 AES-NI, ARMv8 crypto), else ChaCha20-Poly1305 (MIPS, most ARMv7); \
        `aes-gcm` or `chacha20` force it (aliases `aes`, `chacha`); `-v` logs what `auto` \
        picked"),
    ("--danger-accept-invalid-certs", "do not verify upstream TLS certificates, every tier alike \
        (testing only; warns at start)"),
    ("--outbound-proxy", "send every upstream connection (all tiers, probes, pool fills, `check`, \
        the shared list's fetch) through `socks5://[user:pass@]HOST:PORT`, `socks5h://…` or \
        `http://[user:pass@]HOST:PORT` (CONNECT); HOST an address or a name we resolve; `none` = \
        direct; see [Outbound proxy](tiers.md#outbound-proxy)"),
    ("--outbound-proxy-backoff", "while the outbound proxy is down, background work waits for it \
        and one dial re-checks it after D, doubling per re-check up to \
        `--outbound-proxy-backoff-max` (each wait 80–100 % of its step); see \
        [Outbound proxy](tiers.md#outbound-proxy)"),
    ("--outbound-proxy-backoff-max", "cap of that doubling (at least `--outbound-proxy-backoff`): \
        a proxy that comes back is found within it, and one that stays down gets at most one \
        dial per 0.8 × D"),
    ("--pool-max-age", "drop a warm upstream after D, before the front's idle close; also the \
        window whose session starts size the pool"),
    ("--pings-off-for", "a route whose session the upstream ended right after our WS ping \
        (within `--short-session`) is not pinged for D, then tried again (> 0)"),
    ("--doh", "DNS-over-HTTPS resolver (RFC 8484) for the proxy's own lookups, \
        `https://IP[:PORT][/PATH]` (path `/dns-query` if none; a host name is looked up once over \
        the plain nameservers); repeatable, comma list, tried in order; not https → start error"),
    ("--short-session", "a session the upstream ends within D of its start after 24 B to 1 KiB \
        down is short; 3 in a row on one route (within 20 × D) put it down as \
        `closed-after-reply`; an upstream close within D after our WS ping turns pings off for \
        the route for `--pings-off-for` (> 0)"),
    ("--closed-after-reply-cooldown", "minimum cooldown of a route down for `closed-after-reply` \
        (> 0)"),
    ("--stall-timeout", "a session whose upstream sends nothing for D while the client waits — \
        inside a reply, or after the client's latest of two sends (twice D since the first of \
        them for re-asks) — froze: it is ended so the client reconnects, and its route counts a \
        frozen session (0 = never)"),
    ("--stall-ack-timeout", "a session whose upstream socket acknowledges nothing of ours \
        (retransmissions, keepalive probes) for D while the client waits froze (the kernel's \
        view, `TCP_INFO`; a short keepalive is armed on the upstream while a client waits): it \
        is ended (0 = never)"),
    ("--stall-give-up", "a client that closes after waiting D inside a reply counts as a frozen \
        session on its route (0 = never)"),
    ("--stall-window", "one frozen session makes its route suspect and starts a probe that must \
        pull `--stall-probe-bytes`; a second within D puts the route down as `stalled`"),
    ("--max-connections", "concurrent client sessions (the slab's capacity), 1-65536; the default \
        fits the open-files limit (`RLIMIT_NOFILE`: 3 sockets per session, 32 spare), at least \
        4, or 512 when the limit is unknown; full = refuse at once (`slab-full`)"),
    ("--buf-kb", "relay buffer size in KiB, 4-1024: up to two per session, taken from a pool of \
        2 × `--max-connections` only while data waits, given back when empty; the shared \
        scratch buffer is 4 × this; it also bounds a pooled upstream's replayable request (one \
        more block until its first byte, from a separate pool of at most 64)"),
    ("--mem-trim-delay", "once a burst of sessions has ended (at most half as many left as at the \
        peak, at least 32 gone), give the memory they freed back to the OS D later (0 = never); \
        see [Memory after a burst](operating.md#memory-after-a-burst)"),
    ("--proxy-protocol", "require a PROXY protocol v1 or v2 header before the client's bytes \
        (behind nginx `ssl_preread` or HAProxy, see [PROXY protocol](ways-in.md#proxy-protocol)); \
        its client address is used in logs and for the per-client limits; a connection without a \
        valid header is refused (`proxy-header`)"),
    ("--max-per-ip", "concurrent sessions per client address (IPv6: per /64), 0-65536, 0 = no \
        cap; over it a new connection is refused (`per-ip-limit`), see \
        [Per-client limits](operating.md#per-client-limits)"),
    ("--per-ip-rate", "new connections per second one client address earns (a token bucket of \
        `--per-ip-burst`), 0-100000, 0 = off; an address whose bucket is empty is refused \
        (`per-ip-rate`)"),
    ("--per-ip-burst", "new connections an idle client address may open at once (the bucket size \
        of `--per-ip-rate`), 1-100000"),
    ("--per-ip-mask", "with an `ee` secret, a connection over `--max-per-ip` or the rate is masked \
        like a client that is not ours (a prober sees the site, not a refusal; \
        `masked-over-limit`) while fewer than N such are open, all addresses together; past N, \
        or N = 0, it is refused at once; 0-65536; see \
        [Per-client limits](operating.md#per-client-limits)"),
    ("--mask-host", "relay a client that is not ours (not a fake-TLS hello of any secret, or not \
        TLS on an `ee`-only port) byte for byte to HOST (port 443 unless given); default: the \
        `ee` secret whose domain is the hello's SNI, else the first `ee` secret's domain; see \
        [Masking](operating.md#masking)"),
    ("--mask-connect-timeout", "bound on the TCP connect to the mask host (past it: \
        `mask-unreachable`)"),
    ("--tls-time-window", "a fake-TLS (`ee`) hello whose timestamp is further than D from the \
        clock is refused (masked) as stale, once the clock is trusted (past this release's date \
        and stepped by NTP or agreeing with a client's hello, so a router without a real-time \
        clock still lets clients in; see [Fake-TLS](ways-in.md#fake-tls-ee)); whole seconds, 0 = \
        timestamps never checked"),
    ("--replay-cache", "fake-TLS client randoms remembered to refuse a replayed hello, 32 bytes \
        each allocated at start (256 KiB by default; none without an `ee` secret), 1-1048576; \
        0 = off (unsafe: a recorded hello is answered again); until an `ee` secret is in use a \
        reload may still set it"),
    ("--log-file", "append to PATH instead of stderr, with a size cap (`--log-max-kb`) and one \
        rotation"),
    ("--log-time", "UTC time stamp on stderr lines: `auto` = only when stderr is a terminal \
        (procd's logd and journald stamp lines themselves), `on`, `off`; `--log-file` lines \
        always have it; see [Logs](operating.md#logs)"),
    ("--log-fold-interval", "a repeatable warning is written at most once per D per kind \
        (per-client warnings per kind, attempt failures per tier and class, close lines of \
        sessions that never reached an upstream per reason, descriptor exhaustion on accept), \
        with the count of those folded since: at most 10 a minute each; 0 = every line"),
    ("--bind-retry", "while the listen address is not assigned yet (a router's LAN at boot), keep \
        running and retry the bind every D (0 = exit with an error at once)"),
    ("--config", "read settings from FILE (at most 64 KiB): one `NAME VALUE` per line, NAME a \
        flag's long name without `--`, `#` comment lines; flags and `TG_*` variables win over \
        it; SIGHUP re-reads it; see [Configuration file](setup.md#configuration-file)"),
    ("--control-socket", "unix socket (mode 0600) that `tg-ws-proxy ctl` talks to: status, \
        metrics, pin, probe, reload; see [Control socket and ctl](operating.md#control-socket-and-ctl)"),
    ("--control-timeout", "a control-socket client has D to send its request and take the reply, \
        then the connection is closed (more than 0); see \
        [Control socket and ctl](operating.md#control-socket-and-ctl)"),
    ("--dc-addr", "a direct client (transparent mode or SOCKS5) that dialled exactly IP means DC, \
        given in the init's signed form (`2`, `-2` media, `10002` test); wins over the built-in \
        address table ([protocol.md](protocol.md) §3.4); repeatable, comma list; IPv6 with or \
        without brackets"),
    ("--transparent", "transparent-mode listener: LAN TCP to Telegram's ranges, redirected here by \
        our nftables table (`firewall install`), goes down the ladder; HOST `0.0.0.0`, `[::]` or \
        the LAN address, never loopback ([Transparent mode](ways-in.md#transparent-mode)); `off` \
        = none"),
    ("--tg-ranges-url", "where the proxy refreshes Telegram's ranges from while `--transparent` is \
        set (https or http URL; the default is `https://core.telegram.org/resources/cidr.txt`); \
        `off` = never"),
    ("--lan-iface", "LAN interface whose TCP to Telegram our firewall table redirects (`br-lan` is \
        OpenWrt's LAN bridge: elsewhere give yours, `ip -br addr` lists them); repeatable, comma \
        list"),
    ("--socks5", "SOCKS5 listener: RFC 1928 CONNECT to Telegram DC addresses only \
        ([SOCKS5 inbound](ways-in.md#socks5-inbound)); refused on an address that is not \
        loopback or private (`0.0.0.0` and `::` too) unless `--socks5-public`; `off` = none"),
];

/// What docs/flags.md says above the tables.
const HEAD: &str = "\
# `run` flags

<!-- Generated from the option table (src/cli/table.rs, src/cli/table_more.rs) by
src/cli/flags_doc.rs: do not edit by hand. `TG_UPDATE_DOCS=1 cargo test --locked --lib flags_doc`
rewrites it; the test fails while it is stale. -->

Every `run` flag, as `tg-ws-proxy run --help` lists them (`link`, `check` and `firewall` take them
too). Each flag is also a `TG_*` environment variable and a `NAME VALUE` line of the
[configuration file](setup.md#configuration-file) (NAME = the long name without `--`), and on
OpenWrt a UCI option of section `main` (`-` → `_`). A command-line flag beats its variable, which
beats the file; a list given by a flag or a variable replaces the file's list. Repeatable flags
take a comma list and may be given again; switches take `on|off`, `1|0`, `true|false`,
`yes|no` in the variable and the file.

Durations (in every applet) accept `10`, `0.5`, `.25`, `250ms`, `2s`, `1.5m`, `1h`: seconds when no
unit is given, at most 9 decimals and 24 h. Tests compress time through these same flags.

A reload (SIGHUP, `ctl reload`) applies every flag to new sessions except those marked
**restart**: a reload keeps their old value and says so
([Reload and shutdown](operating.md#reload-and-shutdown)).
";

/// The whole of docs/flags.md for `opts`.
fn render(opts: &[Opt]) -> String {
    let mut out = String::from(HEAD);
    for group in Group::ALL {
        out.push_str(&format!("\n## {}\n\n", heading(group)));
        out.push_str("| flag | env | default | meaning |\n|---|---|---|---|\n");
        for o in opts.iter().filter(|o| o.group == group) {
            out.push_str(&row(o));
        }
        if let Some(note) = group.note() {
            out.push_str(&format!("\n{note}\n"));
        }
    }
    out
}

/// A section heading from `run --help`'s, without its colon.
fn heading(group: Group) -> &'static str {
    let h = group.heading();
    let h = h.split(" (").next().unwrap_or(h);
    h.trim_end_matches(':')
}

/// One table row: `| `-p, --port N` | `TG_PORT` | `1443` | meaning |`.
fn row(o: &Opt) -> String {
    let short = o.short.map_or(String::new(), |s| format!("{s}, "));
    let meta = if o.meta.is_empty() {
        String::new()
    } else {
        format!(" {}", o.meta)
    };
    let flag = format!("`{short}{}{meta}`", o.long);
    let env: Vec<String> = o.env.iter().map(|e| format!("`{e}`")).collect();
    let mut meaning = meaning(o).to_string();
    match o.aliases {
        [] => {}
        [one] => meaning.push_str(&format!("; alias `{one}`")),
        many => {
            let many: Vec<String> = many.iter().map(|a| format!("`{a}`")).collect();
            meaning.push_str(&format!("; aliases {}", many.join(", ")));
        }
    }
    if o.reload == Reload::Restart {
        meaning.push_str("; **restart**: a reload keeps the old value");
    }
    format!(
        "| {} | {} | {} | {} |\n",
        cell(&flag),
        cell(&env.join(", ")),
        cell(&default(o.default)),
        cell(&meaning)
    )
}

/// The flag's [`DOCS`] entry, else its help text.
fn meaning(o: &Opt) -> &'static str {
    DOCS.iter()
        .find(|(long, _)| *long == o.long)
        .map_or(o.help, |(_, doc)| doc)
}

/// A value in backticks; a default given in words (`none`, `built in`, …) stays plain.
fn default(d: &str) -> String {
    let words =
        d.contains(' ') || d.contains('\'') || ["none", "off", "detected", "stderr"].contains(&d);
    if words {
        d.to_string()
    } else {
        format!("`{d}`")
    }
}

/// Text made safe inside a table cell: `|` escaped, line breaks folded.
fn cell(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/flags.md");

    /// docs/flags.md is exactly what the table renders; `TG_UPDATE_DOCS=1` rewrites it.
    #[test]
    fn flags_md_is_generated_from_the_option_table() {
        let want = render(RUN_OPTIONS);
        if std::env::var_os("TG_UPDATE_DOCS").is_some_and(|v| v == "1") {
            std::fs::write(PATH, &want).expect("write docs/flags.md");
            return;
        }
        let have = std::fs::read_to_string(PATH).unwrap_or_default();
        if have != want {
            let line = have
                .lines()
                .zip(want.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(have.lines().count().min(want.lines().count()));
            panic!(
                "docs/flags.md is stale (first difference at line {}): run \
                 `TG_UPDATE_DOCS=1 cargo test --locked --lib flags_doc`\n have: {:?}\n want: {:?}",
                line + 1,
                have.lines().nth(line),
                want.lines().nth(line)
            );
        }
    }

    /// Every entry of [`DOCS`] names a flag of the table, once.
    #[test]
    fn docs_entries_name_flags_of_the_table_once() {
        let mut seen = Vec::new();
        for (long, doc) in DOCS {
            assert!(
                RUN_OPTIONS.iter().any(|o| o.long == *long),
                "DOCS names {long}, which the option table lacks"
            );
            assert!(!seen.contains(long), "DOCS lists {long} twice");
            assert!(!doc.trim().is_empty(), "{long}: empty doc");
            seen.push(long);
        }
    }

    /// Each flag has exactly one row, showing its names, variables, default and aliases.
    #[test]
    fn every_flag_has_one_row_with_its_names_variables_and_default() {
        let md = render(RUN_OPTIONS);
        for o in RUN_OPTIONS {
            let rows: Vec<&str> = md
                .lines()
                .filter(|l| {
                    let first = l.split(" | ").next().unwrap_or("");
                    first.split(['`', ' ', ',']).any(|w| w == o.long)
                })
                .collect();
            assert_eq!(rows.len(), 1, "{}: {rows:?}", o.long);
            let cells: Vec<&str> = rows[0].trim_matches('|').split(" | ").collect();
            assert_eq!(cells.len(), 4, "{}: {}", o.long, rows[0]);
            for e in o.env {
                assert!(cells[1].contains(&format!("`{e}`")), "{}: {e}", o.long);
            }
            assert_eq!(cells[2].replace('`', "").trim(), o.default, "{}", o.long);
            for a in o.aliases {
                assert!(cells[3].contains(&format!("`{a}`")), "{}: {a}", o.long);
            }
            let restart = cells[3].contains("**restart**");
            assert_eq!(restart, o.reload == Reload::Restart, "{}", o.long);
        }
    }

    #[test]
    fn cells_escape_pipes_and_fold_lines() {
        assert_eq!(cell("a|b\n   c"), "a\\|b c");
        assert_eq!(default("none"), "none");
        assert_eq!(default("built in"), "built in");
        assert_eq!(default("1443"), "`1443`");
        assert_eq!(heading(Group::Ladder), "Ladder");
        assert_eq!(heading(Group::Listen), "Listening and secrets");
    }
}
