//! Telegram's range list in the running proxy (transparent mode, docs/protocol.md §1.9): the
//! list in force ([`initial_ranges`] at start: `--tg-ranges FILE`, else the `--tg-ranges-cache`
//! file if it parses, else the built-in copy; kept in `Shared::tg_ranges` for the transparent
//! listener's guard) and its refresh by the proxy itself, no cron: with `--transparent` set, no
//! `--tg-ranges FILE` and `--tg-ranges-url` not `off`, the list is fetched shortly after start
//! and every `--tg-ranges-refresh` (backoff from `--tg-ranges-retry` after a failure) through
//! the shared CF domain list's GET machinery (`reactor::cflist::get`, its own token
//! [`token::TGRANGES`]), parsed by `TgRanges::parse` (a short or malformed list is refused,
//! logged once, and the old list kept), written to the cache file atomically (temp file, then
//! rename) and pushed into our nftables table's sets by `nft -f -` in a child process the loop
//! polls (never waits for): `route::firewall::sets_update_script`.
//!
//! Owns: the schedule, the fetch's outcome, the cache file's writes, the `nft` child (its
//! stdin written without blocking, its deadline `--tg-ranges-timeout`), the `tg_ranges` part of
//! `ctl status`. The list's rules are `route::tgranges`'s; the table's text is
//! `route::firewall`'s; installing the table is the `firewall` applet's.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdin, Command, Stdio};

use log::{info, warn};

use super::cflist::get::{Getter, Got};
use super::Reactor;
use crate::config::Config;
use crate::route::cflist::{parse_url, Schedule, Url};
use crate::route::firewall;
use crate::route::tgranges::TgRanges;
use crate::token;

/// Largest list body taken (bytes): [`MAX_LINES`](crate::route::tgranges::MAX_LINES) lines
/// of an IPv6 prefix each.
pub const MAX_BODY: usize = 256 * 1024;

/// How often a running `nft` child is looked at (ms).
const NFT_RECHECK_MS: u64 = 20;

/// Most bytes of `nft`'s stderr kept for the log.
const NFT_STDERR_MAX: usize = 4096;

/// Delay of the first fetch after start (ms): "shortly after", once the start lines are out.
const FIRST_FETCH_MS: u64 = 100;

/// The list `run` starts with and `firewall` installs from, and where it came from:
/// `--tg-ranges FILE` (a refused file is an error here: logged, and the next source used),
/// else the `--tg-ranges-cache` file when it exists and parses, else the built-in copy.
pub(super) fn initial_ranges(cfg: &Config) -> (TgRanges, String) {
    let (ranges, source, problems) = load_ranges(cfg);
    for p in problems {
        warn!("{p}");
    }
    (ranges, source)
}

/// [`initial_ranges`] without logging: the list, its source, and why a configured file was
/// not used (one line each: `--tg-ranges PATH: …`, `--tg-ranges-cache PATH: …`).
pub(crate) fn load_ranges(cfg: &Config) -> (TgRanges, String, Vec<String>) {
    let mut problems = Vec::new();
    if let Some(path) = &cfg.tg_ranges_file {
        match read_list(path) {
            Ok(r) => return (r, format!("file {}", path.display()), problems),
            Err(e) => problems.push(format!("--tg-ranges {}: {e}; not used", path.display())),
        }
    }
    // A cache file not written yet is the normal first start: silent.
    if let Some(path) = cfg.tg_ranges_cache.as_ref().filter(|p| p.exists()) {
        match read_list(path) {
            Ok(r) => return (r, format!("cache {}", path.display()), problems),
            Err(e) => problems.push(format!(
                "--tg-ranges-cache {}: {e}; ignored",
                path.display()
            )),
        }
    }
    (TgRanges::builtin(), "built-in".into(), problems)
}

/// `https://…` or `http://…` (port 80 unless given) as a URL and whether it is TLS.
fn parse_ranges_url(s: &str) -> Result<(Url, bool), String> {
    let Some(rest) = s.strip_prefix("http://") else {
        return parse_url(s).map(|u| (u, true));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let mut url =
        parse_url(&format!("https://{rest}")).map_err(|e| e.replace("https://", "http://"))?;
    if !authority.contains(':') {
        url.port = 80;
    }
    Ok((url, false))
}

/// Reads and parses a list file. Errors: the OS error, or why the list was refused.
fn read_list(path: &Path) -> Result<TgRanges, String> {
    let text = std::fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    TgRanges::parse(&String::from_utf8_lossy(&text)).map_err(|e| format!("refused: {e}"))
}

/// Writes `ranges` to `path` atomically; a file that already holds this text is left alone
/// (flash on a router): `cflist::write_if_changed`.
fn write_cache(path: &Path, ranges: &TgRanges) -> io::Result<()> {
    super::cflist::write_if_changed(path, &ranges.to_text())
}

/// The refresh's counters and last results, for `ctl status`.
#[derive(Clone, Debug, Default)]
pub(super) struct RefreshStatus {
    /// Where the list in force came from (`built-in`, `cache PATH`, `file PATH`, the URL).
    pub(super) source: String,
    /// Fetches finished, and how many failed or were refused.
    pub(super) fetches: u64,
    /// Of `fetches`.
    pub(super) failures: u64,
    /// The last fetch: accepted or not, what (`accepted N IPv4 and M IPv6 prefixes`, or why
    /// not), when (reactor ms).
    pub(super) last: Option<(bool, String, u64)>,
    /// The last `nft` sets update: done or not (nft's message), when.
    pub(super) nft: Option<(bool, String, u64)>,
}

/// A running `nft -f -` child.
struct NftRun {
    child: Child,
    /// The script not yet written (stdin is non-blocking).
    stdin: Option<(ChildStdin, Vec<u8>, usize)>,
    stderr: Option<ChildStderr>,
    err_text: Vec<u8>,
    deadline: u64,
    /// The list this run puts into the sets.
    list: TgRanges,
}

/// What an accepted list does to our table's sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SetsUpdate {
    /// Nothing: the list is the one in force and the sets hold it.
    Nothing,
    /// An update runs already (for an older list): this one follows when it ends.
    AfterTheRunning,
    /// Update them now.
    Now,
}

/// What an accepted list does to the sets: `changed` (not the list in force), `stale` (the sets
/// may not hold the list in force: an update failed or was left for later), `running` (an
/// `nft` child runs).
fn sets_update(changed: bool, stale: bool, running: bool) -> SetsUpdate {
    match (changed || stale, running) {
        (false, _) => SetsUpdate::Nothing,
        (true, true) => SetsUpdate::AfterTheRunning,
        (true, false) => SetsUpdate::Now,
    }
}

/// After an `nft` run ended (`ok` or not) for a list that is (`current`) or is no longer the
/// one in force: whether the sets are still stale, and whether to run again at once (a newer
/// list came during the run). A failure is retried with the next accepted list, not at once.
fn after_run(ok: bool, current: bool) -> (bool, bool) {
    match (ok, current) {
        (true, true) => (false, false),
        (true, false) => (true, true),
        (false, _) => (true, false),
    }
}

/// The refresh's state in the reactor.
pub(super) struct TgRefresh {
    /// The list's URL, TLS or not (`http://`), and as configured (for logs and status).
    url: Option<(Url, bool, String)>,
    nft: PathBuf,
    cache: Option<PathBuf>,
    timeout_ms: u64,
    schedule: Schedule,
    next_at: Option<u64>,
    get: Getter,
    run: Option<NftRun>,
    /// Our table's sets may not hold the list in force (an update failed, or was left for
    /// later while another ran): the next accepted list updates them even if unchanged.
    stale: bool,
    /// The last failure logged as a warning: the same one again is logged at debug only.
    said: Option<String>,
    pub(super) status: RefreshStatus,
}

impl TgRefresh {
    /// The refresh for `cfg` (idle unless `--transparent`, no `--tg-ranges FILE`, a URL),
    /// first fetch shortly after `now`; `source` is where the list in force came from.
    pub(super) fn new(cfg: &Config, now: u64, source: String) -> TgRefresh {
        let url = match (&cfg.transparent, &cfg.tg_ranges_file, &cfg.tg_ranges_url) {
            (Some(_), None, Some(u)) => match parse_ranges_url(u) {
                Ok((url, tls)) => Some((url, tls, u.clone())),
                Err(e) => {
                    warn!("tg-ranges: --tg-ranges-url {e}; no refresh");
                    None
                }
            },
            _ => None,
        };
        let timeout_ms = cfg.tg_ranges_timeout.as_millis() as u64;
        TgRefresh {
            next_at: url.as_ref().map(|_| now + FIRST_FETCH_MS),
            url,
            nft: cfg.nft.clone(),
            cache: cfg.tg_ranges_cache.clone(),
            timeout_ms,
            schedule: Schedule::new(
                cfg.tg_ranges_refresh.as_millis() as u64,
                cfg.tg_ranges_retry.as_millis() as u64,
            ),
            get: Getter::new(token::TGRANGES, timeout_ms, MAX_BODY),
            run: None,
            stale: false,
            said: None,
            status: RefreshStatus {
                source,
                ..RefreshStatus::default()
            },
        }
    }

    /// The next time [`Reactor::tgranges_tick`] has work.
    pub(super) fn next_deadline(&self) -> Option<u64> {
        let fetch = if self.get.busy() {
            self.get.next_deadline()
        } else {
            self.next_at
        };
        let nft = self.run.as_ref().map(|r| r.deadline);
        [fetch, nft].into_iter().flatten().min()
    }

    /// A warning the first time `what` is said, debug after that (until something else is).
    fn say(&mut self, what: String) {
        if self.said.as_ref() == Some(&what) {
            log::debug!("{what}");
        } else {
            warn!("{what}");
            self.said = Some(what);
        }
    }

    /// Starts `nft -f -` with `script`; an error starting it is returned.
    fn start_nft(&mut self, list: &TgRanges, now: u64) -> Result<(), String> {
        let script = firewall::sets_update_script(list);
        let mut child = Command::new(&self.nft)
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.nft.display()))?;
        let stdin = child.stdin.take();
        let stderr = child.stderr.take();
        for fd in [
            stdin.as_ref().map(AsRawFd::as_raw_fd),
            stderr.as_ref().map(AsRawFd::as_raw_fd),
        ]
        .into_iter()
        .flatten()
        {
            // SAFETY: fcntl on a pipe end this child handle owns; no memory is passed.
            unsafe {
                let flags = libc::fcntl(fd, libc::F_GETFL);
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
        }
        self.run = Some(NftRun {
            child,
            stdin: stdin.map(|s| (s, script.into_bytes(), 0)),
            stderr,
            err_text: Vec::new(),
            deadline: now + self.timeout_ms.max(1),
            list: list.clone(),
        });
        Ok(())
    }

    /// Feeds and reaps the `nft` child: `Some` once it ended (or was ended at its deadline),
    /// with the list it was putting into the sets.
    fn poll_nft(&mut self, now: u64) -> Option<(Result<(), String>, TgRanges)> {
        let run = self.run.as_mut()?;
        if let Some((pipe, script, sent)) = &mut run.stdin {
            while *sent < script.len() {
                match pipe.write(&script[*sent..]) {
                    Ok(n) => *sent += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    // nft ended early: its status and stderr say why.
                    Err(_) => *sent = script.len(),
                }
            }
            if *sent >= script.len() {
                run.stdin = None; // EOF for nft
            }
        }
        if let Some(err) = &mut run.stderr {
            let mut buf = [0u8; 1024];
            loop {
                match err.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) if run.err_text.len() < NFT_STDERR_MAX => {
                        run.err_text.extend_from_slice(&buf[..n])
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        }
        let status = match run.child.try_wait() {
            Ok(Some(st)) => st,
            Ok(None) if now < run.deadline => return None,
            Ok(None) => {
                // Past its deadline: ours to end (a child we started, by its own handle).
                let _ = run.child.kill();
                let _ = run.child.wait();
                let list = self.run.take()?.list;
                let why = format!("nft did not finish within {} ms", self.timeout_ms);
                return Some((Err(why), list));
            }
            Err(e) => {
                let list = self.run.take()?.list;
                return Some((Err(format!("nft: {e}")), list));
            }
        };
        let text = String::from_utf8_lossy(&run.err_text)
            .trim()
            .replace('\n', " | ");
        let list = self.run.take()?.list;
        let done = if status.success() {
            Ok(())
        } else if text.is_empty() {
            Err(format!("nft: {status}"))
        } else {
            Err(nft_failure(&text))
        };
        Some((done, list))
    }
}

/// What a failed sets update says, in one short line: our table missing (nft's "No such file or
/// directory" on the set) and a refused permission are named with what to do; anything else is
/// nft's own first line.
fn nft_failure(stderr: &str) -> String {
    let first = stderr.split(" | ").next().unwrap_or(stderr);
    if stderr.contains("No such file or directory") {
        format!(
            "table {} is not installed: run `tg-ws-proxy firewall install` (nft: {first})",
            firewall::TABLE
        )
    } else if stderr.contains("Operation not permitted") {
        format!("nft may not change the firewall here (needs CAP_NET_ADMIN) (nft: {first})")
    } else {
        format!("nft: {first}")
    }
}

impl Reactor {
    /// A [`token::TGRANGES`] event (`dispatch`).
    pub(super) fn tgranges_event(&mut self) {
        let s = &mut self.s;
        let r = self.poll.registry();
        let ladder = &mut s.ladder;
        let io = (r, &mut s.dns, s.outbound.as_deref());
        let dial = (&s.tls, s.wall_s, &mut s.rng);
        let got = self
            .tgranges
            .get
            .on_event(self.now, io, dial, &mut |now| ladder.proxy_may_dial(now));
        self.tgranges_proxy_news();
        if let Some(got) = got {
            self.tgranges_done(got);
        }
    }

    /// Runs due refresh work (`expire`): a due fetch, a fetch's deadline or pending name, the
    /// `nft` child.
    pub(super) fn tgranges_tick(&mut self) {
        let now = self.now;
        if let Some((done, list)) = self.tgranges.poll_nft(now) {
            self.tgranges_nft_done(done, &list);
        }
        let s = &mut self.s;
        let ladder = &mut s.ladder;
        let deps = (self.poll.registry(), &mut s.dns, s.outbound.as_deref());
        let t = &mut self.tgranges;
        let got = if t.get.busy() {
            t.get.tick(now, deps, &mut |n| ladder.proxy_may_dial(n))
        } else if t.next_at.is_some_and(|at| at <= now) {
            t.next_at = None;
            let url = t.url.clone();
            url.and_then(|(u, tls, _)| {
                t.get
                    .start(u, tls, now, deps, &mut |n| ladder.proxy_may_dial(n))
            })
        } else {
            None
        };
        self.tgranges_proxy_news();
        if let Some(got) = got {
            self.tgranges_done(got);
        }
    }

    /// The next time the refresh has work: its own deadlines, and a short re-check while an
    /// `nft` child runs.
    pub(super) fn tgranges_deadline(&self) -> Option<u64> {
        let t = &self.tgranges;
        let poll_child = t.run.as_ref().map(|_| self.now + NFT_RECHECK_MS);
        [t.next_deadline(), poll_child].into_iter().flatten().min()
    }

    fn tgranges_proxy_news(&mut self) {
        match self.tgranges.get.proxy_news.take() {
            Some(Ok(())) => self.s.ladder.proxy_worked(self.now, self.now),
            Some(Err(f)) => {
                self.s
                    .ladder
                    .proxy_failed(f, "the Telegram range list's fetch", self.now)
            }
            None => {}
        }
    }

    fn tgranges_done(&mut self, got: Got) {
        let now = self.now;
        let t = &mut self.tgranges;
        let src = t.url.as_ref().map_or(String::new(), |u| u.2.clone());
        t.status.fetches += 1;
        let parsed = got.and_then(|b| {
            TgRanges::parse(&String::from_utf8_lossy(&b)).map_err(|e| format!("refused: {e}"))
        });
        let ranges = match parsed {
            Ok(r) => r,
            Err(why) => {
                t.status.failures += 1;
                let (v4, v6) = (self.s.tg_ranges.v4().len(), self.s.tg_ranges.v6().len());
                t.say(format!(
                    "tg-ranges: {src}: {why}; keeping the list in force ({v4} IPv4, {v6} IPv6)"
                ));
                t.status.last = Some((false, why, now));
                t.next_at = Some(t.schedule.after_failure(now, &mut self.s.rng));
                return;
            }
        };
        t.said = None;
        let what = format!(
            "accepted {} IPv4 and {} IPv6 prefixes",
            ranges.v4().len(),
            ranges.v6().len()
        );
        t.status.last = Some((true, what.clone(), now));
        t.status.source = src.clone();
        t.next_at = Some(t.schedule.after_success(now, &mut self.s.rng));
        if let Some(path) = &t.cache {
            if let Err(e) = write_cache(path, &ranges) {
                warn!("tg-ranges: cache {}: cannot write: {e}", path.display());
            }
        }
        let changed = ranges != self.s.tg_ranges;
        let update = sets_update(changed, t.stale, t.run.is_some());
        if changed {
            info!("tg-ranges: {src}: {what}");
        } else {
            log::debug!("tg-ranges: {src}: {what}, unchanged");
        }
        if update == SetsUpdate::Nothing {
            return;
        }
        self.s.tg_ranges = ranges;
        t.stale = true;
        if update == SetsUpdate::AfterTheRunning {
            // The running update is for an older list: this one follows when it ends.
            return;
        }
        if let Err(e) = t.start_nft(&self.s.tg_ranges, now) {
            let list = self.s.tg_ranges.clone();
            self.tgranges_nft_done(Err(e), &list);
        }
    }

    /// An `nft` run for `list` ended: logged, the sets marked fresh or stale, and run again at
    /// once for the list in force if a newer one came meanwhile.
    fn tgranges_nft_done(&mut self, done: Result<(), String>, list: &TgRanges) {
        let now = self.now;
        let (stale, again) = after_run(done.is_ok(), *list == self.s.tg_ranges);
        let t = &mut self.tgranges;
        t.stale = stale;
        match done {
            Ok(()) => {
                info!(
                    "tg-ranges: nftables sets of table {} updated",
                    firewall::TABLE
                );
                t.status.nft = Some((true, "sets updated".into(), now));
            }
            Err(e) => {
                t.say(format!(
                    "tg-ranges: the sets of table {} were not updated: {e}",
                    firewall::TABLE
                ));
                t.status.nft = Some((false, e, now));
            }
        }
        if again {
            if let Err(e) = t.start_nft(&self.s.tg_ranges, now) {
                let list = self.s.tg_ranges.clone();
                self.tgranges_nft_done(Err(e), &list);
            }
        }
    }

    /// A reload's part: a changed list file, cache path or URL reloads the list in force and
    /// restarts the refresh (the fetch runs again shortly); changed timings keep the schedule's
    /// next time.
    pub(super) fn tgranges_reload(&mut self, cfg: &Config) {
        let old = &self.s.cfg;
        let source_changed = cfg.tg_ranges_file != old.tg_ranges_file
            || cfg.tg_ranges_cache != old.tg_ranges_cache
            || cfg.tg_ranges_url != old.tg_ranges_url
            || cfg.transparent.is_some() != old.transparent.is_some();
        let timing_changed = cfg.tg_ranges_refresh != old.tg_ranges_refresh
            || cfg.tg_ranges_retry != old.tg_ranges_retry
            || cfg.tg_ranges_timeout != old.tg_ranges_timeout
            || cfg.nft != old.nft;
        if !source_changed && !timing_changed {
            return;
        }
        let status = std::mem::take(&mut self.tgranges.status);
        let run = self.tgranges.run.take();
        let mut stale = self.tgranges.stale;
        let mut next = if source_changed {
            let (ranges, source) = initial_ranges(cfg);
            // A list the sets may not hold: the next accepted fetch puts it there.
            stale |= ranges != self.s.tg_ranges;
            self.s.tg_ranges = ranges;
            TgRefresh::new(cfg, self.now, source)
        } else {
            let mut n = TgRefresh::new(cfg, self.now, status.source.clone());
            n.next_at = self.tgranges.next_at.or(n.next_at);
            n
        };
        next.status = RefreshStatus {
            source: next.status.source.clone(),
            ..status
        };
        next.run = run;
        next.stale = stale;
        self.tgranges = next;
    }

    /// The `tg_ranges` part of `ctl status`; `None` without `--transparent`.
    pub(super) fn tgranges_status(&self) -> Option<crate::control::status::RangesStatus> {
        self.s.cfg.transparent?;
        let t = &self.tgranges;
        let age = |at: u64| self.now.saturating_sub(at);
        Some(crate::control::status::RangesStatus {
            source: t.status.source.clone(),
            url: t.url.as_ref().map(|u| u.2.clone()),
            v4: self.s.tg_ranges.v4().len(),
            v6: self.s.tg_ranges.v6().len(),
            fetches: t.status.fetches,
            failures: t.status.failures,
            last: t.status.last.clone().map(|(ok, w, at)| (ok, w, age(at))),
            nft: t.status.nft.clone().map(|(ok, w, at)| (ok, w, age(at))),
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_failed_update_says_what_to_do_in_one_line() {
        let missing = "/dev/stdin:1:16-26: Error: No such file or directory | flush set inet \
                       tg_ws_proxy tg4 | ^^^^ | add element inet tg_ws_proxy tg4 { 1.2.3.0/24 }";
        let m = super::nft_failure(missing);
        assert!(
            m.starts_with("table inet tg_ws_proxy is not installed: run"),
            "{m}"
        );
        assert!(!m.contains("add element"), "one line, not the script: {m}");
        let p = super::nft_failure("Error: Could not process rule: Operation not permitted");
        assert!(p.contains("CAP_NET_ADMIN"), "{p}");
        assert_eq!(super::nft_failure("x | y"), "nft: x");
    }

    use super::*;

    #[test]
    fn the_refresh_runs_only_in_transparent_mode_with_a_url_and_no_file() {
        let mut cfg = Config::with_secrets(Vec::new());
        assert!(TgRefresh::new(&cfg, 1, "built-in".into())
            .next_deadline()
            .is_none());
        cfg.transparent = Some("127.0.0.1:1445".parse().unwrap());
        let t = TgRefresh::new(&cfg, 1, "built-in".into());
        assert_eq!(t.next_deadline(), Some(1 + FIRST_FETCH_MS));
        assert_eq!(t.url.as_ref().unwrap().0.host, "core.telegram.org");
        cfg.tg_ranges_url = None;
        assert!(TgRefresh::new(&cfg, 1, "built-in".into())
            .next_deadline()
            .is_none());
        cfg.tg_ranges_url = Some("http://127.0.0.1:8080/c".into());
        cfg.tg_ranges_file = Some("/etc/cidr.txt".into());
        assert!(TgRefresh::new(&cfg, 1, "built-in".into())
            .next_deadline()
            .is_none());
    }

    #[test]
    fn a_list_accepted_while_an_update_runs_reaches_the_sets_after_it() {
        // Regression: a changed list accepted while `nft` ran for an older one became the list
        // in force without an update, and every later fetch found it unchanged: the sets kept
        // the older list for good. A failed update was never retried either.
        use SetsUpdate::*;
        assert_eq!(sets_update(false, false, false), Nothing);
        assert_eq!(sets_update(false, false, true), Nothing);
        assert_eq!(sets_update(true, false, true), AfterTheRunning);
        assert_eq!(sets_update(true, false, false), Now);
        // Unchanged, but the sets may not hold it: updated all the same.
        assert_eq!(sets_update(false, true, false), Now);
        assert_eq!(sets_update(false, true, true), AfterTheRunning);
        // The run for the list in force worked: fresh. For an older one: again at once.
        assert_eq!(after_run(true, true), (false, false));
        assert_eq!(after_run(true, false), (true, true));
        // A failure stays stale until the next accepted list, never a tight retry.
        assert_eq!(after_run(false, true), (true, false));
        assert_eq!(after_run(false, false), (true, false));
    }

    #[test]
    fn http_and_https_urls() {
        let (u, tls) = parse_ranges_url("https://core.telegram.org/resources/cidr.txt").unwrap();
        assert!(tls && u.port == 443 && u.path == "/resources/cidr.txt");
        let (u, tls) = parse_ranges_url("http://127.0.0.1/cidr.txt").unwrap();
        assert!(!tls && u.port == 80 && u.host == "127.0.0.1");
        let (u, _) = parse_ranges_url("http://127.0.0.1:8080").unwrap();
        assert_eq!((u.port, u.path.as_str()), (8080, "/"));
        assert!(parse_ranges_url("ftp://x/").is_err());
        assert!(parse_ranges_url("http://a@b/")
            .unwrap_err()
            .contains("http://"));
    }

    #[test]
    fn the_cache_round_trips_and_is_written_only_on_change() {
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir().join(format!("tg-ranges-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cidr.txt");
        let r = TgRanges::builtin();
        write_cache(&path, &r).unwrap();
        let ino = std::fs::metadata(&path).unwrap().ino();
        write_cache(&path, &r).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), ino);
        assert_eq!(read_list(&path), Ok(r));
        assert!(!dir.join("cidr.txt.tmp").exists());
        std::fs::write(&path, "1.2.3.0/24\n").unwrap();
        assert!(read_list(&path)
            .unwrap_err()
            .starts_with("refused: too few"));
        assert!(read_list(&dir.join("absent"))
            .unwrap_err()
            .starts_with("cannot read: No such file"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
