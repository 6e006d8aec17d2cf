//! The shipped UCI file (cross/openwrt/tg-ws-proxy/files/tg-ws-proxy.config) against the
//! option table: every `run` flag but `secret` has its UCI line (option name with '-' → '_',
//! `list` for repeatable flags, `'0'` for switches), with its default and its help. The file
//! is generated from the table by [`render`]: `TG_UPDATE_UCI=1 cargo test --test openwrt_uci`
//! rewrites it; otherwise a stale file fails the test with the first differing line.
//!
//! The keys come from `tg_ws_proxy::cli::config_keys()`, the option table itself ([`keys`]).

mod common;

use std::path::Path;

/// One `run` option as the UCI file needs it (the fields of the contract's `cli::ConfigKey`).
struct Key {
    /// Long name without `--` (`cf-domain`).
    name: String,
    /// Repeatable: a UCI `list`.
    list: bool,
    /// A switch (on/off): UCI `'0'`/`'1'`.
    switch: bool,
    /// Counted (`-v -v`): UCI a number.
    count: bool,
    /// The default as `--help` shows it.
    default: String,
    /// The help text, one paragraph.
    help: String,
}

/// Every `run` option a configuration file takes, in table order (`cli::config_keys()`).
fn keys() -> Vec<Key> {
    tg_ws_proxy::cli::config_keys()
        .into_iter()
        .map(|k| Key {
            name: k.name.into(),
            list: k.list,
            switch: k.switch,
            count: k.count,
            default: k.default.into(),
            help: k.help.into(),
        })
        .collect()
}

/// Defaults shown as words: the UCI line is left empty (an empty option means the default).
const WORD_DEFAULTS: [&str; 7] = [
    "none",
    "the original's GitHub list",
    "detected",
    "stderr",
    "built-in DC table, port 443",
    "from the open-files limit",
    "off",
];

/// Lines the generator does not write: set by hand at the top of the section (and `secret`,
/// which is refused: secrets live in the secret file).
const HAND_WRITTEN: [&str; 7] = [
    "host",
    "secret",
    "secret-file",
    "control-socket",
    "bind-retry",
    "cf-domain-cache",
    "tg-ranges-cache",
];

const HEAD: &str = "\
# /etc/config/tg-ws-proxy: the proxy's settings, read by /etc/init.d/tg-ws-proxy (procd).
# Every option and list of section 'main' becomes one NAME VALUE line of
# /var/etc/tg-ws-proxy.conf ('_' turned into '-'), which the service runs as
# `tg-ws-proxy run --config /var/etc/tg-ws-proxy.conf`; an empty option means the default.
# The names are the run flags without \"--\" (docs/flags.md); repeatable flags are lists;
# switches are '0' or '1'. Change settings with uci, then reload (a SIGHUP: sessions keep
# running, new ones use the new settings):
#   uci set tg-ws-proxy.main.tier_order='ws,tcp'
#   uci add_list tg-ws-proxy.main.cf_domain='example.org'
#   uci commit tg-ws-proxy && /etc/init.d/tg-ws-proxy reload
# A bad value is refused with one line naming it (logread -e tg-ws-proxy); the running
# settings stay. Generated from the option table by tests/openwrt_uci.rs.

config proxy 'main'
\t# UCI only: 1 = start at boot and on `/etc/init.d/tg-ws-proxy start`.
\toption enabled '1'
\t# UCI only: the user the proxy runs as. A port below 1024 needs 'root'.
\toption user 'nobody'
\t# Listen address. Empty = this router's LAN address (the lan interface's, static or DHCP),
\t# and the listener follows it when the LAN comes up or changes; '0.0.0.0' listens on every
\t# interface: check your firewall first.
\toption host ''
\t# The secrets: one per line, # comments, mode 0600, owned by the service user; created with
\t# a fresh secret at first start. There is no 'secret' option: a secret never goes into
\t# /etc/config, the command line or the log. `/etc/init.d/tg-ws-proxy link` prints the links.
\toption secret_file '/etc/tg-ws-proxy/secret'
\t# Unix socket (mode 0600) for `tg-ws-proxy ctl`: status, metrics, pin, probe, reload.
\toption control_socket '/var/run/tg-ws-proxy/ctl.sock'
\t# --bind-retry: while the listen address is not assigned yet (boot), retry the bind every D.
\t# The service's default is 5s (the binary's own is 0 = exit at once).
\t#option bind_retry '5s'
\t# --cf-domain-cache: the shared CF domain list's cache, read at start and used until a fetch
\t# succeeds; rewritten only when the list changes. The service's default keeps it on flash in
\t# a 0700 directory of the service user (the binary's own default is none; none with the list
\t# off); another path must be writable by that user; 'none' = no cache file.
\t#option cf_domain_cache '/etc/tg-ws-proxy/cache/cf-domains'
\t# --tg-ranges-cache: transparent mode's Telegram range list as last refreshed, read at start
\t# and by the firewall table installed at every start and reload. The service's default (with
\t# option transparent set) keeps it beside the CF list's cache; 'none' = no cache file.
\t#option tg_ranges_cache '/etc/tg-ws-proxy/cache/tg-ranges'
";

/// Longest comment line, tab excluded.
const WIDTH: usize = 94;

/// `# text` lines of at most [`WIDTH`] columns, tab-indented.
fn comment(out: &mut String, text: &str) {
    let mut line = String::from("#");
    for word in text.split_whitespace() {
        if line.len() + 1 + word.len() > WIDTH && line != "#" {
            out.push_str(&format!("\t{line}\n"));
            line = String::from("#");
        }
        line.push(' ');
        line.push_str(word);
    }
    out.push_str(&format!("\t{line}\n"));
}

/// The whole UCI file for these keys.
fn render(keys: &[Key]) -> String {
    let mut out = String::from(HEAD);
    for k in keys
        .iter()
        .filter(|k| !HAND_WRITTEN.contains(&k.name.as_str()))
    {
        let uci = k.name.replace('-', "_");
        let kind = if k.list {
            " (a list: one `list` line per item)"
        } else if k.switch {
            " ('1' = on)"
        } else if k.count {
            " (a number: 2 = given twice)"
        } else {
            ""
        };
        comment(
            &mut out,
            &format!("--{}{kind}: {}. Default: {}.", k.name, k.help, k.default),
        );
        let word = WORD_DEFAULTS.contains(&k.default.as_str());
        if k.switch || k.count {
            out.push_str(&format!("\t#option {uci} '0'\n"));
        } else if k.list && !word {
            for item in k.default.split(", ") {
                out.push_str(&format!("\t#list {uci} '{item}'\n"));
            }
        } else if k.list {
            out.push_str(&format!("\t#list {uci} ''\n"));
        } else {
            let value = if word { "" } else { k.default.as_str() };
            out.push_str(&format!("\t#option {uci} '{value}'\n"));
        }
    }
    out
}

#[test]
fn shipped_uci_file_has_every_run_flag_with_default_and_help() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("cross/openwrt/tg-ws-proxy/files/tg-ws-proxy.config");
    let keys = keys();
    let want = render(&keys);
    if std::env::var_os("TG_UPDATE_UCI").is_some() {
        std::fs::write(&path, &want).expect("write the UCI file");
    }
    let have = std::fs::read_to_string(&path).expect("read the shipped UCI file");
    for k in keys.iter().filter(|k| k.name != "secret") {
        let uci = k.name.replace('-', "_");
        let kind = if k.list { "list" } else { "option" };
        let line = |p: &str| format!("\t{p}{kind} {uci} '");
        assert!(
            have.contains(&line("")) || have.contains(&line("#")),
            "--{} has no UCI line `{kind} {uci}` in {}",
            k.name,
            path.display()
        );
    }
    assert!(
        !have.contains("option secret '"),
        "no secret option in the shipped file"
    );
    if have != want {
        let (n, (h, w)) = have
            .lines()
            .zip(want.lines())
            .enumerate()
            .find(|(_, (h, w))| h != w)
            .unwrap_or((have.lines().count().min(want.lines().count()), ("", "")));
        panic!(
            "{} is not what the option table gives (line {}):\n  have: {h}\n  want: {w}\n\
             regenerate: TG_UPDATE_UCI=1 cargo test --test openwrt_uci",
            path.display(),
            n + 1
        );
    }
}
