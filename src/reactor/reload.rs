//! Reload of the running configuration (SIGHUP, `ctl reload`): [`Reactor::reload`].
//!
//! The new configuration comes from the `Reload` closure `run` built (the original argv and
//! the process environment, so `--config` and `--secret-file` are read again). Everything that
//! can fail is checked before anything changes (parse, `--ca-file`, the new listen address's
//! bind); then the changes are applied for NEW sessions only: live sessions are never closed,
//! re-planned or given shorter timers (`conn` keeps the per-session values it needs at
//! accept). What cannot change live ([`RESTART_ONLY`]) keeps its old value and is named in
//! the summary. The ladder's part is `route::ladder::reconfigure`, the listener's
//! `reactor::listen`.

use std::sync::Arc;

use log::{info, warn};

use super::{dns_names, Reactor};
use crate::config::Config;
use crate::conn::per_ip::Limits;
use crate::mtproto::faketls::gate::{EeKey, Gate};
use crate::mtproto::obfs2::SecretKind;
use crate::mtproto::upstream::MtprotoProxy;
use crate::net::tls;
use crate::route::table::private_names;

/// Settings a reload cannot change, by flag name: they size memory at start (`max-connections`,
/// `buf-kb`, `replay-cache` once an ee secret is in use), own a file or socket opened at start
/// (`log-file`, `log-max-kb`, `control-socket`) or configure the resolver
/// (`hosts-file`, `resolv-conf`, `doh`, `doh-fallback`, `doh-timeout`). A reload that changes one keeps the old value and says
/// "needs a restart: NAME".
pub const RESTART_ONLY: [&str; 11] = [
    "max-connections",
    "buf-kb",
    "replay-cache",
    "log-file",
    "log-max-kb",
    "control-socket",
    "hosts-file",
    "resolv-conf",
    "doh",
    "doh-fallback",
    "doh-timeout",
];

/// The `reload` event (`logging::events`): `result` (`applied`, `rejected`), `changed` and
/// `restart` (the setting names, comma-separated, empty if none), `listen` (the address served
/// after it).
fn reload_event(
    result: &str,
    changed: &[&str],
    restart: &[&str],
    listen: std::net::SocketAddr,
) -> crate::logging::events::Event {
    crate::logging::events::Event::new("reload")
        .str("result", result)
        .str("changed", &changed.join(","))
        .str("restart", &restart.join(","))
        .str("listen", &listen.to_string())
}

impl Reactor {
    /// Re-reads the configuration and applies it to new sessions. Ok: the one-line summary
    /// `reload: applied (CHANGES)[; needs a restart: NAMES]`; Err: the one-line reason the new
    /// configuration was refused (the running one stays). Logs the line itself (`reload:
    /// applied …` at info, `reload: rejected: WHY` at warn), counts it in the stats
    /// (`reloads`, `reloads-rejected`) and writes its `reload` event (`logging::events`):
    /// callers only pass the result on.
    pub(super) fn reload(&mut self) -> Result<String, String> {
        match self.try_reload() {
            Ok(line) => {
                self.s.stats.reloads += 1;
                info!("{line}");
                Ok(line)
            }
            Err(why) => {
                self.s.stats.reloads_rejected += 1;
                warn!("reload: rejected: {why}");
                crate::logging::events::emit(|| reload_event("rejected", &[], &[], self.s.listen));
                Err(why)
            }
        }
    }

    fn try_reload(&mut self) -> Result<String, String> {
        if self.life != super::Life::Running {
            return Err("shutting down".into());
        }
        let Some(reloader) = self.reloader.as_mut() else {
            return Err("no configuration source to re-read".into());
        };
        let (mut cfg, notes) = reloader()?;
        let old = &self.s.cfg;
        // The replay cache is sized once, when the first ee secret arrives (see `apply`).
        let ee_live = self.s.gate.replay_cache().capacity() > 0;
        let plan = Plan::new(old, &mut cfg, ee_live);
        let tls_changed = cfg.ca_file != old.ca_file
            || cfg.accept_invalid_certs != old.accept_invalid_certs
            || cfg.tls_cipher != old.tls_cipher;
        let tls = if tls_changed {
            let t = tls::client_config_with(
                cfg.ca_file.as_deref(),
                cfg.accept_invalid_certs,
                cfg.tls_cipher,
            )
            .map_err(|e| format!("--ca-file: {e}"))?;
            Some(t)
        } else {
            None
        };
        let ways = self.prepare_ways(&cfg)?;
        let listener = if cfg.listen != old.listen && self.listener.is_some() {
            Some(self.bind_new(cfg.listen)?)
        } else {
            None
        };
        // Nothing can fail from here on.
        self.cflist_reload(&mut cfg);
        self.tgranges_reload(&cfg);
        for (level, note) in &notes {
            log::log!(*level, "{note}");
        }
        self.apply(cfg, tls);
        if let Some(l) = listener {
            self.s.listen = self.swap_listener(l);
        }
        self.swap_ways(ways);
        Self::firewall_hint(&plan.applied, self.s.cfg.transparent.is_some());
        if self.listener.is_none() && self.bind_retry.waiting() {
            // Still waiting for the address: the next try uses the new one.
            self.retry_bind();
        }
        let mut ladder_cfg = self.s.cfg.clone();
        ladder_cfg.listen = self.s.listen;
        self.s.ladder.reconfigure(&ladder_cfg, self.now);
        let listen = self.s.listen;
        crate::logging::events::emit(|| {
            reload_event("applied", &plan.applied, &plan.restart, listen)
        });
        Ok(plan.summary())
    }

    /// After a reload that changed what our nftables table is made of, one line saying the table
    /// must follow (the proxy cannot change it: it may not even run as root); the OpenWrt service
    /// re-installs it after every reload by itself.
    fn firewall_hint(applied: &[&str], transparent: bool) {
        let table: Vec<&str> = applied
            .iter()
            .copied()
            .filter(|n| matches!(*n, "transparent" | "lan-iface" | "transparent-skip"))
            .collect();
        if table.is_empty() {
            return;
        }
        let verb = if transparent { "install" } else { "remove" };
        log::warn!(
            "reload: {} changed: run `tg-ws-proxy firewall {verb}` so the firewall table follows \
         (the OpenWrt service does it after a reload)",
            table.join(", ")
        );
    }

    /// Applies a validated `cfg` (restart-only settings already reset) to everything but the
    /// listener and the ladder: the one path from a configuration to the live settings, taken
    /// at start (`Reactor::new`, with `cfg` the one it was built from) and by every reload.
    pub(super) fn apply(&mut self, cfg: Config, tls: Option<Arc<rustls::ClientConfig>>) {
        let s = &mut self.s;
        let ee_keys = EeKey::from_secrets(&cfg.secrets);
        if s.gate.replay_cache().capacity() == 0 && !ee_keys.is_empty() {
            // The first ee secret: the gate so far never saw a hello; give it its replay cache.
            // Once sized it is kept, also across a reload that removes every ee secret and a
            // later one that adds one back (a fresh cache would take old hellos again).
            s.wall_s = super::wall_clock_s();
            s.gate = Gate::new(
                cfg.tls_time_window.as_secs(),
                cfg.replay_cache,
                s.wall_s,
                self.now,
            );
        } else {
            s.gate.set_window(cfg.tls_time_window.as_secs());
        }
        // The wall clock is read for the gate's checks and for an ee upstream's hello only.
        let ee_upstream = |p: &MtprotoProxy| matches!(p.secret.kind, SecretKind::Ee(_));
        s.wall_clock = !ee_keys.is_empty() || cfg.mtproto_proxies.iter().any(ee_upstream);
        s.ee_keys = ee_keys;
        s.keys = cfg.secrets.iter().map(|k| k.key).collect();
        if let Some(t) = tls {
            // Sessions already dialled keep their own Arc of the old one.
            s.tls = t;
        }
        s.per_ip.set_limits(Limits::of(&cfg));
        s.dc_table.set_flags(cfg.dc_addrs.iter());
        log::set_max_level(cfg.log_level);
        crate::logging::set_log_time(cfg.log_time);
        let fold_ms = cfg.log_fold_interval.as_millis() as u64;
        s.attempt_log.set_interval(fold_ms);
        s.client_log.set_interval(fold_ms);
        for r in &mut s.unserved_log {
            r.set_interval(fold_ms);
        }
        self.fd_log.set_interval(fold_ms);
        crate::logging::set_redactions(private_names(&cfg));
        for name in &dns_names(&cfg) {
            s.dns.watch(name);
            let _ = crate::dns::cached(&mut s.dns, name, self.now);
        }
        if cfg.stats_interval != s.cfg.stats_interval {
            let every = cfg.stats_interval.as_millis() as u64;
            self.globals[super::Global::Stats as usize] = (every > 0).then_some(self.now + every);
        }
        self.bind_retry.set_every(cfg.bind_retry.as_millis() as u64);
        self.trim.set_delay(cfg.mem_trim_delay.as_millis() as u64);
        (self.s).activate_outbound(cfg.outbound_proxy.as_ref(), &cfg.no_outbound_proxy_for);
        self.s.cfg = cfg;
    }
}

/// Resets in `new` every [`RESTART_ONLY`] setting that differs from `old` and returns their
/// names. `replay-cache` only counts while an ee secret is in use (`ee_live`): before that the
/// cache holds nothing and is sized when the first ee secret arrives.
pub fn keep_restart_only(old: &Config, new: &mut Config, ee_live: bool) -> Vec<&'static str> {
    let mut names = Vec::new();
    macro_rules! keep {
        ($field:ident, $name:literal) => {
            if new.$field != old.$field {
                new.$field = old.$field.clone();
                names.push($name);
            }
        };
    }
    keep!(max_connections, "max-connections");
    keep!(buf_size, "buf-kb");
    if ee_live {
        keep!(replay_cache, "replay-cache");
    }
    keep!(log_file, "log-file");
    keep!(log_max_bytes, "log-max-kb");
    keep!(control_socket, "control-socket");
    keep!(hosts_file, "hosts-file");
    keep!(resolv_conf, "resolv-conf");
    keep!(doh, "doh");
    keep!(doh_fallback, "doh-fallback");
    keep!(doh_timeout, "doh-timeout");
    names
}

/// What a reload does with a new configuration: the settings it applies to new sessions and
/// the ones that keep their old value until a restart, by the names the option table gives
/// them (`cli::ConfigKey::setting`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Settings that differ and are applied (`reload: applied (…)`).
    pub applied: Vec<&'static str>,
    /// Settings that differ and keep their old value (`needs a restart: …`).
    pub restart: Vec<&'static str>,
}

impl Plan {
    /// Plans the reload from `old` to `new`: resets `new`'s restart-only settings to their old
    /// values ([`keep_restart_only`]), then diffs the two configurations ([`Config::changed`]).
    pub fn new(old: &Config, new: &mut Config, ee_live: bool) -> Plan {
        let restart = keep_restart_only(old, new, ee_live);
        Plan {
            applied: old.changed(new),
            restart,
        }
    }

    /// The one-line report ([`summary`]).
    pub fn summary(&self) -> String {
        summary(&self.applied, &self.restart)
    }
}

/// `reload: applied (a, b); needs a restart: c` — `(no changes)` when nothing differed.
pub fn summary(changes: &[&str], restart: &[&str]) -> String {
    let mut line = if changes.is_empty() {
        "reload: applied (no changes)".to_string()
    } else {
        format!("reload: applied ({})", changes.join(", "))
    };
    if !restart.is_empty() {
        line.push_str(&format!("; needs a restart: {}", restart.join(", ")));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Tier;
    use crate::mtproto::obfs2::Secret;
    use std::time::Duration;

    fn base() -> Config {
        Config::with_secrets(vec![
            Secret::parse("0123456789abcdef0123456789abcdef").unwrap()
        ])
    }

    #[test]
    fn restart_only_settings_keep_their_old_value_and_are_named() {
        let old = base();
        let mut new = old.clone();
        new.buf_size *= 2;
        new.max_connections += 1;
        new.replay_cache = 5;
        new.idle_timeout = Duration::from_secs(1);
        let names = keep_restart_only(&old, &mut new, true);
        assert_eq!(names, vec!["max-connections", "buf-kb", "replay-cache"]);
        assert_eq!(new.buf_size, old.buf_size);
        assert_eq!(new.max_connections, old.max_connections);
        assert_eq!(new.replay_cache, old.replay_cache);
        assert_eq!(
            new.idle_timeout,
            Duration::from_secs(1),
            "live settings untouched"
        );
        // Without an ee secret in use the replay cache is not sized yet: it may change.
        let mut new = old.clone();
        new.replay_cache = 5;
        assert!(keep_restart_only(&old, &mut new, false).is_empty());
        assert_eq!(new.replay_cache, 5);
        for n in names {
            assert!(RESTART_ONLY.contains(&n));
        }
    }

    /// docs/operating.md's "Reload and shutdown" names every restart-only setting (docs/flags.md
    /// marks them too, from the same table: `cli::flags_doc`).
    #[test]
    fn operating_doc_lists_every_restart_only_setting() {
        let doc = include_str!("../../docs/operating.md");
        let start = doc
            .find("\n## Reload and shutdown\n")
            .expect("docs/operating.md has a Reload and shutdown section");
        let section = &doc[start + 1..];
        let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
        assert!(section.contains("needs a restart"), "{section}");
        for name in RESTART_ONLY {
            assert!(
                section.contains(&format!("`--{name}`")),
                "docs/operating.md's reload section misses --{name}"
            );
        }
    }

    #[test]
    fn the_summary_names_every_changed_setting_and_secret_changes_are_seen() {
        let old = base();
        let mut new = old.clone();
        assert_eq!(
            summary(&old.changed(&new), &[]),
            "reload: applied (no changes)"
        );
        new.secrets = vec![Secret::parse("fedcba9876543210fedcba9876543210").unwrap()];
        new.tier_order = vec![Tier::Tcp];
        new.pool_size = 0;
        let line = summary(&old.changed(&new), &["buf-kb"]);
        assert_eq!(
            line,
            "reload: applied (secrets, tier-order, pool-size); needs a restart: buf-kb"
        );
        assert!(!line.contains("fedcba"), "no secret in the line");
    }

    #[test]
    fn a_changed_fronting_domain_is_named() {
        let old = base();
        let mut new = old.clone();
        new.fronting_domains = vec!["allowed.example.org".into()];
        assert_eq!(old.changed(&new), vec!["fronting-domain"]);
    }

    /// A value other than the default for every option a configuration file takes (the
    /// option's `NAME`; switches and counts are given bare).
    fn sample(name: &str, dir: &std::path::Path) -> Option<String> {
        let v = match name {
            "host" => "127.0.0.2",
            "port" => "1444",
            "secret" => "fedcba9876543210fedcba9876543210",
            "secret-file" => {
                let path = dir.join("secrets");
                std::fs::write(&path, "fedcba9876543210fedcba9876543210\n").unwrap();
                return Some(path.display().to_string());
            }
            "dc-ip" | "tcp-dc-ip" => "2:10.0.0.1",
            "dc-addr" => "10.0.0.1=2",
            "transparent" => "127.0.0.1:1445",
            "socks5" => "127.0.0.1:1446",
            "tg-ranges-url" => "off",
            "lan-iface" => "eth1",
            "transparent-skip" => "192.168.1.10",
            "nft" => "/usr/sbin/nft",
            "socks5-auth" => {
                let path = dir.join(name);
                std::fs::write(&path, "alice:s3cret\n").unwrap();
                return Some(path.display().to_string());
            }
            "tg-ranges" | "tg-ranges-cache" => {
                return Some(dir.join(name).display().to_string());
            }
            "fronting-domain" => "allowed.example.org",
            "cf-worker-domain" => "w.example.workers.dev",
            "cf-domain" | "no-outbound-proxy-for" => "example.com",
            "mtproto-proxy" => "10.0.0.1:443:0123456789abcdef0123456789abcdef",
            "cf-domain-list" => "off",
            "doh" => "https://127.0.0.1:8443/dns-query",
            "doh-fallback" => "on",
            "cf-domain-cache" | "log-file" | "hosts-file" | "resolv-conf" | "control-socket" => {
                return Some(dir.join(name).display().to_string());
            }
            "ca-file" => concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"),
            "cf-domain-list-port" => "8443",
            "cf-ws-port" => "8080",
            "mtproto-hello" => "chrome",
            "cf-ip" => "127.0.0.2",
            "cf-ip-count" => "5",
            "tier-order" | "media-tier-order" => "tcp",
            "tls-cipher" => "chacha20",
            "outbound-proxy" => "socks5://127.0.0.1:1080",
            "handshake-burst" | "pool-size" | "max-connections" => "2",
            "buf-kb" => "32",
            "worker-budget" | "max-per-ip" | "per-ip-rate" | "per-ip-burst" | "per-ip-mask" => "3",
            "stall-probe-bytes" | "replay-cache" | "log-max-kb" => "4096",
            "startup-probes" => "off",
            "tls-time-window" => "30s",
            "cooldown-max" => "1200s",
            "mask-host" => "mask.example.org",
            "link-ip" => "192.0.2.1",
            "log-time" => "on",
            "cf-priority"
            | "cfproxy-ws"
            | "danger-accept-invalid-certs"
            | "proxy-protocol"
            | "no-mask"
            | "socks5-public"
            | "verbose"
            | "quiet" => return None,
            // Every other option is a duration none of whose defaults is 1.25 s.
            _ => "1250ms",
        };
        Some(v.to_string())
    }

    /// Every option of the table, changed alone between two configurations, is either applied
    /// by a reload (named in `reload: applied`) or reported as needing a restart (and kept), as
    /// the table says; no change goes unreported.
    #[test]
    fn every_option_is_applied_live_or_reported_as_needing_a_restart() {
        let dir = std::env::temp_dir().join(format!("tgws-reload-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let parse = |extra: &[String]| {
            let mut argv: Vec<std::ffi::OsString> =
                vec!["--secret".into(), "0123456789abcdef0123456789abcdef".into()];
            argv.extend(extra.iter().map(Into::into));
            let args = pico_args::Arguments::from_vec(argv);
            crate::cli::parse_run_reload(args, &|_| None).map(|p| p.config)
        };
        let old = parse(&[]).unwrap();
        for key in crate::cli::config_keys() {
            let mut extra = vec![format!("--{}", key.name)];
            extra.extend(sample(key.name, &dir));
            let mut new = parse(&extra).unwrap_or_else(|e| panic!("{extra:?}: {e}"));
            let plan = Plan::new(&old, &mut new, true);
            let what = format!("--{} ({}): {plan:?}", key.name, key.setting);
            if key.live {
                assert_eq!(plan.applied, vec![key.setting], "{what}");
                assert!(plan.restart.is_empty(), "{what}");
            } else {
                assert_eq!(plan.restart, vec![key.setting], "{what}");
                assert!(plan.applied.is_empty(), "{what}");
                assert!(old.changed(&new).is_empty(), "kept: {what}");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// [`RESTART_ONLY`] (docs/operating.md's list) is the option table's `restart` entries.
    #[test]
    fn restart_only_is_the_option_tables_restart_entries() {
        let mut table: Vec<&str> = crate::cli::config_keys()
            .into_iter()
            .filter(|k| !k.live)
            .map(|k| k.setting)
            .collect();
        let mut listed = RESTART_ONLY.to_vec();
        table.sort_unstable();
        listed.sort_unstable();
        assert_eq!(table, listed);
    }
}
