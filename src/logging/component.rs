//! The short component name a log line shows instead of the Rust module path of its record
//! (`[ladder]`, not `[tg_ws_proxy::route::ladder::rules]`).
//!
//! Owns the one fixed table [`COMPONENTS`] from module path prefix to name and its lookup
//! ([`component`]). The names are part of the log's interface (operators grep them, docs/
//! operating notes name them), so a module that logs must be in the table: a unit test walks
//! `src/` and fails for a file with log calls whose path only the fallback would name. The line
//! format itself is `logging`'s.

/// Module path (below the crate, `::`-separated) → component name. The longest matching prefix
/// wins; a prefix matches whole path segments only (`conn` matches `conn::relay`, not
/// `connect`). Names are short, lower case, one word.
pub const COMPONENTS: &[(&str, &str)] = &[
    ("applet::run", "run"),
    ("applet::link", "link"),
    ("applet::check", "check"),
    ("applet::probe", "probe"),
    ("applet", "applet"),
    ("cli", "config"),
    ("config", "config"),
    ("conn::relay", "relay"),
    ("relay", "relay"),
    ("conn::connect", "connect"),
    ("conn::race", "connect"),
    ("conn::handshake", "handshake"),
    ("conn::direct_hs", "handshake"),
    ("conn::mask", "mask"),
    ("conn::proxy_step", "outbound"),
    ("conn::socks_step", "socks5"),
    ("conn", "session"),
    ("control", "ctl"),
    ("dns", "dns"),
    ("reactor::doh", "dns"),
    ("mem", "memory"),
    ("reactor::memory", "memory"),
    ("mtproto::faketls", "faketls"),
    ("net::faketls_stream", "faketls"),
    ("mtproto", "mtproto"),
    ("net::outbound", "outbound"),
    ("net::socks5_server", "socks5"),
    ("net::tls", "tls"),
    ("net", "net"),
    ("reactor::reload", "reload"),
    ("reactor::listen", "listen"),
    ("reactor::accept", "listen"),
    ("reactor::ways", "listen"),
    ("reactor::drain", "drain"),
    ("reactor::start", "start"),
    ("reactor::tgranges", "tgranges"),
    ("reactor", "reactor"),
    ("route::cflist", "cflist"),
    ("route::prober", "prober"),
    ("route", "ladder"),
    ("stats", "stats"),
    ("logging", "log"),
];

/// The component name of a record whose target is `target` (`log`'s default target is the
/// module path). Our own crate's paths go through [`COMPONENTS`]; the crate root is `main`; an
/// own module missing from the table falls back to its first segment. Another crate's record
/// is named by its crate (`rustls::client::hs` → `rustls`).
pub fn component(target: &str) -> &str {
    let crate_name = env!("CARGO_CRATE_NAME");
    let Some(rest) = target.strip_prefix(crate_name) else {
        return target.split("::").next().unwrap_or(target);
    };
    let path = match rest.strip_prefix("::") {
        Some(p) => p,
        None if rest.is_empty() => return "main",
        // Another crate whose name starts like ours (`tg_ws_proxy_hot`).
        None => return target.split("::").next().unwrap_or(target),
    };
    table_entry(path).unwrap_or_else(|| path.split("::").next().unwrap_or(path))
}

/// The [`COMPONENTS`] name of the longest prefix of `path` (below the crate), if any.
fn table_entry(path: &str) -> Option<&'static str> {
    COMPONENTS
        .iter()
        .filter(|(prefix, _)| {
            path.strip_prefix(prefix)
                .is_some_and(|after| after.is_empty() || after.starts_with("::"))
        })
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|&(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_paths_map_to_short_names() {
        let cases = [
            ("tg_ws_proxy::route::ladder::rules", "ladder"),
            ("tg_ws_proxy::route::ladder", "ladder"),
            ("tg_ws_proxy::route::cflist::fetch", "cflist"),
            ("tg_ws_proxy::route::prober", "prober"),
            ("tg_ws_proxy::conn::relay", "relay"),
            ("tg_ws_proxy::conn::connect::effects", "connect"),
            ("tg_ws_proxy::conn", "session"),
            ("tg_ws_proxy::conn::mask", "mask"),
            ("tg_ws_proxy::control::server", "ctl"),
            ("tg_ws_proxy::reactor::reload", "reload"),
            ("tg_ws_proxy::reactor::doh", "dns"),
            ("tg_ws_proxy::dns::cache", "dns"),
            ("tg_ws_proxy::reactor", "reactor"),
            ("tg_ws_proxy::stats", "stats"),
            ("tg_ws_proxy::mtproto::faketls::hello", "faketls"),
            ("tg_ws_proxy::net::tls::config", "tls"),
            ("tg_ws_proxy::applet::run", "run"),
            ("tg_ws_proxy", "main"),
            ("rustls::client::hs", "rustls"),
            ("tungstenite", "tungstenite"),
            ("tg_ws_proxy_hot::x", "tg_ws_proxy_hot"),
            // Whole segments only: `conn` is no prefix of `connx`; unknown → first segment.
            ("tg_ws_proxy::connx::y", "connx"),
        ];
        for (target, want) in cases {
            assert_eq!(component(target), want, "{target}");
        }
    }

    #[test]
    fn names_are_short_lower_case_words() {
        for (prefix, name) in COMPONENTS {
            assert!(
                (2..=10).contains(&name.len())
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()),
                "{prefix} → {name}"
            );
        }
        for (i, (a, _)) in COMPONENTS.iter().enumerate() {
            assert!(
                !COMPONENTS[i + 1..].iter().any(|(b, _)| a == b),
                "{a} twice"
            );
        }
    }

    /// Every source file with a log call is named by an explicit table entry, not by the
    /// fallback: a new module that logs must be given its component here.
    #[test]
    fn every_module_that_logs_has_a_table_entry() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut stack = vec![root.clone()];
        let mut missing = Vec::new();
        let mut seen = 0;
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("read src") {
                let path = entry.expect("dir entry").path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).expect("read source");
                let logs = ["info!(", "warn!(", "error!(", "debug!(", "trace!(", "log!("]
                    .iter()
                    .any(|m| text.contains(m));
                let rel = path.strip_prefix(&root).expect("under src");
                let module = rel
                    .with_extension("")
                    .to_string_lossy()
                    .replace('/', "::")
                    .trim_end_matches("::mod")
                    .to_string();
                if !logs || module == "lib" || module == "main" || module.starts_with("logging") {
                    continue;
                }
                seen += 1;
                if table_entry(&module).is_none() {
                    missing.push(module);
                }
            }
        }
        assert!(seen > 10, "found the modules that log ({seen})");
        assert!(missing.is_empty(), "no component for {missing:?}");
    }
}
