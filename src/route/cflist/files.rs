//! The shared CF domain list's files: a `--cf-domain-list FILE` source read and decoded like a
//! download, the cache file (`--cf-domain-cache`) read at start and written atomically (a temp
//! file, then rename; left alone when unchanged), and the shared domains `check` shows without
//! fetching. Part of the fetch shell (`fetch.rs`, compiled as `reactor::cflist`); the formats
//! and the accept rule are the core's (`route::cflist`).

use std::path::{Path, PathBuf};

use log::{info, warn};

use crate::config::{CfEndpoint, Config};
use crate::route::cflist::{self, Accepted, Source};

use super::shared_endpoints;

/// A `--cf-domain-list FILE` source: read and decoded like a download (same format, same
/// three-valid-names rule). Errors: the OS error reading it, or why the list was refused.
pub(super) fn read_list_file(path: &Path) -> Result<Accepted, String> {
    std::fs::read(path)
        .map_err(|e| format!("cannot read: {e}"))
        .and_then(|b| cflist::accept(cflist::decode_list(&String::from_utf8_lossy(&b))))
}

/// The shared domains `check` shows, with no network: a `--cf-domain-list FILE` read now (as
/// `run` reads it), else the domains in `cfg`'s cache file (`--cf-domain-cache`); none when the
/// list is off. `check` never fetches the list.
pub(crate) fn cached_shared_domains(cfg: &Config) -> Vec<CfEndpoint> {
    let source = cfg
        .cf_domain_list
        .as_deref()
        .and_then(|s| cflist::parse_source(s).ok().flatten());
    let from_file = match &source {
        Some(Source::File(path)) => read_list_file(path)
            .inspect_err(|why| warn!("cf-domain-list: {}: {why}", path.display()))
            .ok()
            .map(|a| a.domains),
        _ => None,
    };
    let cached = || match (&source, &cfg.cf_domain_cache) {
        (Some(_), Some(path)) => read_cache(path),
        _ => None,
    };
    shared_endpoints(cfg, from_file.or_else(cached).unwrap_or_default())
}

/// The cached list at `path`, if it holds an acceptable one.
pub(super) fn read_cache(path: &Path) -> Option<Vec<String>> {
    match std::fs::read(path) {
        Ok(b) => match cflist::accept(cflist::parse_cache(&String::from_utf8_lossy(&b))) {
            Ok(Accepted { domains: list, .. }) => {
                info!(
                    "cf-domain-list: using {} cached domains from {}",
                    list.len(),
                    path.display()
                );
                let n = list.len();
                crate::logging::events::emit(|| super::cflist_event("cached", n, 0, None));
                Some(list)
            }
            Err(why) => {
                warn!("cf-domain-list: cache {}: ignored: {why}", path.display());
                None
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            warn!("cf-domain-list: cache {}: cannot read: {e}", path.display());
            None
        }
    }
}

/// Writes `domains` to `path` atomically ([`write_if_changed`]).
pub(super) fn write_cache(path: &Path, domains: &[String]) -> std::io::Result<()> {
    write_if_changed(path, &cflist::cache_text(domains))
}

/// Writes `text` to `path` atomically (a temp file next to it, then rename). A file that
/// already holds exactly this text is left alone: on a router a cache sits on flash, and a
/// list is accepted again at every refresh, nearly always unchanged. Shared by the CF domain
/// list's cache and Telegram's range cache (`reactor::tgranges`).
pub(crate) fn write_if_changed(path: &Path, text: &str) -> std::io::Result<()> {
    if std::fs::read(path).is_ok_and(|old| old == text.as_bytes()) {
        return Ok(());
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn the_cache_is_rewritten_only_when_the_list_changes() {
        let dir = std::env::temp_dir().join(format!("tg-cflist-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cf-domains");
        let a: Vec<String> = ["a.example.org", "b.example.org", "c.example.org"]
            .map(String::from)
            .to_vec();
        write_cache(&path, &a).unwrap();
        let first = std::fs::metadata(&path).unwrap().ino();
        // The same list again: no new file (a write goes through a rename, a new inode).
        write_cache(&path, &a).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), first);
        let mut b = a.clone();
        b.push("d.example.org".into());
        write_cache(&path, &b).unwrap();
        assert_ne!(std::fs::metadata(&path).unwrap().ino(), first);
        assert_eq!(read_cache(&path), Some(b));
        assert!(!dir.join("cf-domains.tmp").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
