//! The process logger (`log` facade backend); the folding helpers [`RateLimited`] (one kind of
//! line) and [`Folds`] (one limiter per kind) are the submodule `fold`; the short component
//! names lines show instead of module paths are the submodule `component`; the structured event
//! stream (`TG_EVENTS`, one JSON object per line, for tests and tools) is [`events`].
//!
//! Owns where log lines go (stderr, or `--log-file` with a size cap and ONE rotation to
//! `PATH.1`), their one-line format (the same for both sinks: `STAMP LEVEL [component]
//! message`, see [`format_line`]; on stderr the stamp follows `--log-time`, [`LogTime`]), the
//! last-line redaction of the configured private host
//! names ([`set_redactions`]: no line, a dependency's included, shows them), and what happens
//! when a sink breaks: a line that cannot be
//! written is dropped and counted ([`lost_lines`]), never a panic, and a stderr that cannot
//! take a line now (a full pipe: its reader stalled) loses that line instead of blocking the
//! one-threaded reactor ([`write_stderr`]). A stderr whose reader went
//! away (logd restarted, `| logger` killed: `EPIPE`) is dropped for good, because `eprintln!`
//! (and so the `simple_logger` crate) panics on it and the release profile aborts on a panic.
//! It must not decide *what* is logged or at which level: callers do (the session close line
//! lives in `conn`, the stats line in `stats`). Nothing here reads the monotonic clock the
//! reactor owns; [`RateLimited`] takes time as a parameter.
//!
//! Time stamps are UTC wall time (`2026-11-30T12:34:56.789Z`). Routers boot with a wrong clock
//! that NTP corrects minutes later, so the first lines after boot may carry a 1970 or build-date
//! stamp; we accept that because (a) line order in the file stays true regardless, (b) once the
//! clock is synced the stamps line up with the user's experience ("it broke at 21:00") and with
//! other hosts' logs, which monotonic seconds-since-start never would, and (c) UTC needs no time
//! zone database. Under procd, logd stamps every line itself, so stderr drops ours when it is
//! not a terminal (`--log-time auto`); `--log-time on|off` forces it either way. The log file
//! always carries the stamp.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use log::{LevelFilter, Log, Metadata, Record};

mod component;
pub mod events;
mod fold;

pub use component::{component, COMPONENTS};
pub use fold::{fold_key, Folds, RateLimited};

/// Whether stderr lines carry the time stamp (`--log-time`). The log file always does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogTime {
    /// Only when stderr is a terminal: under procd (logd) or systemd (journald) stderr is a
    /// pipe or socket whose reader stamps lines itself.
    #[default]
    Auto,
    /// Always.
    On,
    /// Never.
    Off,
}

impl LogTime {
    /// `auto`, `on` or `off`. Errors: anything else, as a one-line message.
    pub fn parse(s: &str) -> Result<LogTime, String> {
        match s {
            "auto" => Ok(LogTime::Auto),
            "on" => Ok(LogTime::On),
            "off" => Ok(LogTime::Off),
            _ => Err(format!("'{s}': expected auto, on or off")),
        }
    }

    /// Whether stderr lines are stamped under this mode, given whether stderr is a terminal.
    pub fn stamps(self, stderr_is_terminal: bool) -> bool {
        match self {
            LogTime::Auto => stderr_is_terminal,
            LogTime::On => true,
            LogTime::Off => false,
        }
    }
}

/// Sets whether stderr lines carry the time stamp (`--log-time`; at start and at every
/// reload). `Auto` asks `isatty(2)` now.
pub fn set_log_time(mode: LogTime) {
    // SAFETY: isatty only inspects the descriptor.
    let tty = unsafe { libc::isatty(libc::STDERR_FILENO) } == 1;
    STDERR_STAMP.store(u8::from(mode.stamps(tty)), Ordering::Relaxed);
}

/// 1 while stderr lines are stamped (see [`set_log_time`]); 0 until it is first called.
static STDERR_STAMP: AtomicU8 = AtomicU8::new(0);

/// Installs the global logger. `level` bounds our own crate's records; other crates (rustls)
/// are capped at `Info` unless `level` is `Trace`. `file = None` writes to stderr, stamped as
/// `time` says ([`set_log_time`]); otherwise lines (always stamped) are appended to `file`, and
/// when the next line would push it past `max_bytes` it is
/// renamed to `PATH.1` (replacing an older one) and a fresh `PATH` is started. `max_bytes` of 0
/// is treated as 1 (rotate before every line), never as "unbounded". Write errors never panic:
/// the line is counted in [`lost_lines`]; stderr stops being written after its first error.
///
/// Errors: the file cannot be opened for appending (message names the path), or a logger was
/// already installed.
pub fn init(
    level: LevelFilter,
    time: LogTime,
    file: Option<&Path>,
    max_bytes: u64,
) -> Result<(), String> {
    set_log_time(time);
    let sink = match file {
        None => Sink::Stderr,
        Some(path) => Sink::File(Mutex::new(LogFile::open(path, max_bytes)?)),
    };
    let logger: &'static Logger = Box::leak(Box::new(Logger { sink }));
    log::set_logger(logger).map_err(|_| "a logger is already installed".to_string())?;
    log::set_max_level(level);
    Ok(())
}

/// Log lines dropped since start because their sink could not take them (stderr's reader gone,
/// a full disk under `--log-file`). Shown in the stats line as `log-lost=N` when not 0.
pub fn lost_lines() -> usize {
    LOST.load(Ordering::Relaxed)
}

/// Sets the host names no log line may show, each with what to print instead (`(private host,
/// redacted form)`, e.g. the `--cf-worker-domain` and `--cf-domain` names and their
/// `route::table::redact` forms). Our own lines redact at the call site, but a dependency's
/// (tungstenite's `-v -v` trace of the upgrade request names the Worker in `Host:`) and error
/// texts we pass on (rustls: "certificate not valid for name …") are rewritten here. Each call
/// replaces the previous set (a reload with new private names).
pub fn set_redactions(mut pairs: Vec<(String, String)>) {
    // Longer names first, so a name that contains another is replaced whole.
    pairs.sort_by_key(|(host, _)| std::cmp::Reverse(host.len()));
    pairs.retain(|(host, _)| !host.is_empty());
    *REDACTIONS.write().unwrap_or_else(|e| e.into_inner()) = pairs;
}

/// `text` with the names given to [`set_redactions`] redacted: for output that does not go
/// through the logger (the `check` table, whose details carry error texts such as rustls'
/// "certificate not valid for name …").
pub fn redact_configured(text: String) -> String {
    let pairs = REDACTIONS.read().unwrap_or_else(|e| e.into_inner());
    redact_with(text, &pairs)
}

/// See [`set_redactions`].
static REDACTIONS: RwLock<Vec<(String, String)>> = RwLock::new(Vec::new());

/// The text of `record` with the configured private names redacted (in our own lines too: an
/// error text from a dependency, such as a certificate that is "not valid for name …", can
/// carry the name into a line of ours).
fn message(record: &Record) -> String {
    let pairs = REDACTIONS.read().unwrap_or_else(|e| e.into_inner());
    redact_with(record.args().to_string(), &pairs)
}

/// `msg` with every `(host, shown)` host replaced by its shown form.
fn redact_with(mut msg: String, pairs: &[(String, String)]) -> String {
    for (host, shown) in pairs {
        if msg.contains(host.as_str()) {
            msg = msg.replace(host.as_str(), shown);
        }
    }
    msg
}

/// Lines dropped by a broken sink (a `usize`: MIPS32 has no 64-bit atomics).
static LOST: AtomicUsize = AtomicUsize::new(0);

/// Set once writing to stderr failed: the sink is dropped, later lines are only counted.
static STDERR_GONE: AtomicBool = AtomicBool::new(false);

/// Writes `bytes` to stderr in one call unless stderr already failed once; a failure (`EPIPE`
/// when the reader went away, anything else but `EINTR` and `EAGAIN`) drops stderr for good.
/// Returns whether the bytes were written. Never panics (unlike `eprintln!`). Also used for the
/// few lines the process writes to stderr next to a `--log-file`.
///
/// Never blocks the reactor on a slow reader: stderr is a blocking descriptor we share with
/// whoever started us (so we do not make it non-blocking), and a full pipe (logd stalled, a
/// suspended `| logger`) would stall every session until someone read. So a zero-timeout
/// `poll` asks first; a stderr that cannot take a write now loses this line (counted, stderr
/// kept). On a pipe, "writable" means a free page (Linux counts pages, so a line may be
/// dropped while the last page still has room: at most a page of the pipe goes unused), and a
/// line of at most `PIPE_BUF` bytes ([`cap_line`] caps ours) fits in one, so the write that
/// follows cannot block. An
/// inherited non-blocking stderr's `EAGAIN` is treated the same way.
pub fn write_stderr(bytes: &[u8]) -> bool {
    if STDERR_GONE.load(Ordering::Relaxed) || !stderr_writable_now() {
        LOST.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    match std::io::stderr().lock().write_all(bytes) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            LOST.fetch_add(1, Ordering::Relaxed);
            false
        }
        Err(_) => {
            STDERR_GONE.store(true, Ordering::Relaxed);
            LOST.fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}

/// False only when stderr is known to be unable to take a write now (its pipe or socket full).
/// A reader gone or a closed descriptor counts as writable: the write then fails and drops
/// stderr for good, as it should.
fn stderr_writable_now() -> bool {
    let mut p = libc::pollfd {
        fd: libc::STDERR_FILENO,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd, zero timeout.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    // An error of poll itself (EINTR) leaves the decision to the write, as before.
    n != 0
}

/// Longest stderr line: `PIPE_BUF`, the most a pipe takes atomically (and, once `poll` said
/// writable, without blocking). [`cap_line`] cuts longer ones.
const STDERR_LINE_MAX: usize = 4096;

/// `line` cut to at most [`STDERR_LINE_MAX`] bytes on a character boundary, ending in `…` and a
/// newline when cut.
fn cap_line(mut line: String) -> String {
    if line.len() <= STDERR_LINE_MAX {
        return line;
    }
    let mut end = STDERR_LINE_MAX - "…\n".len();
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line.truncate(end);
    line.push_str("…\n");
    line
}

/// Where formatted lines go.
enum Sink {
    /// stderr, through [`write_stderr`].
    Stderr,
    /// `--log-file`.
    File(Mutex<LogFile>),
}

/// The level cap is `log::max_level()`, so a reload's `log::set_max_level` takes effect here.
struct Logger {
    sink: Sink,
}

impl Log for Logger {
    fn enabled(&self, meta: &Metadata) -> bool {
        let own = meta.target().starts_with(env!("CARGO_CRATE_NAME"));
        let level = log::max_level();
        let cap = if own || level == LevelFilter::Trace {
            level
        } else {
            level.min(LevelFilter::Info)
        };
        meta.level() <= cap
    }

    fn log(&self, record: &Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        match &self.sink {
            Sink::Stderr => {
                let stamp = STDERR_STAMP.load(Ordering::Relaxed) == 1;
                let line = format_line(stamp.then(SystemTime::now), record);
                write_stderr(cap_line(line).as_bytes());
            }
            Sink::File(file) => {
                let line = format_line(Some(SystemTime::now()), record);
                // A poisoned lock only means another thread panicked mid-write; keep logging.
                let mut file = file.lock().unwrap_or_else(|p| p.into_inner());
                file.write_line(line.as_bytes());
            }
        }
    }

    fn flush(&self) {
        // stderr is unbuffered; only the file may hold bytes.
        if let Sink::File(file) = &self.sink {
            let mut file = file.lock().unwrap_or_else(|p| p.into_inner());
            let _ = file.file.flush();
        }
    }
}

/// `--log-file` state: the open file, its current size and the cap.
struct LogFile {
    path: PathBuf,
    file: File,
    size: u64,
    max_bytes: u64,
    /// Set after the first write/rotate error was reported on stderr (reported once).
    failed: bool,
}

impl LogFile {
    fn open(path: &Path, max_bytes: u64) -> Result<LogFile, String> {
        let file = open_append(path)?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(LogFile {
            path: path.to_path_buf(),
            file,
            size,
            max_bytes: max_bytes.max(1),
            failed: false,
        })
    }

    /// Appends one whole line, rotating first if it would not fit under the cap (a line longer
    /// than the cap still goes into a fresh file, so nothing is dropped).
    fn write_line(&mut self, line: &[u8]) {
        let len = line.len() as u64;
        if self.size > 0 && self.size.saturating_add(len) > self.max_bytes {
            if let Err(e) = self.rotate() {
                self.report(&e);
            }
        }
        match self.file.write_all(line) {
            Ok(()) => self.size = self.size.saturating_add(len),
            Err(e) => {
                LOST.fetch_add(1, Ordering::Relaxed);
                self.report(&format!("cannot write {}: {e}", self.path.display()));
            }
        }
    }

    /// `PATH` → `PATH.1` (replacing it), then a fresh empty `PATH`.
    fn rotate(&mut self) -> Result<(), String> {
        let mut old = self.path.clone().into_os_string();
        old.push(".1");
        std::fs::rename(&self.path, &old)
            .map_err(|e| format!("cannot rotate {}: {e}", self.path.display()))?;
        self.file = open_append(&self.path)?;
        self.size = 0;
        Ok(())
    }

    fn report(&mut self, msg: &str) {
        if !self.failed {
            self.failed = true;
            let line = format!("tg-ws-proxy: log file: {msg} (further errors not shown)\n");
            write_stderr(line.as_bytes());
        }
    }
}

fn open_append(path: &Path) -> Result<File, String> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))
}

/// One record as one line, the one format of both sinks:
/// `2026-11-30T12:34:56.789Z WARN  [ladder] message` — the UTC stamp (left out when `stamp` is
/// `None`: stderr under logd), the level padded to 5, the component name in brackets
/// ([`component`]: a short name for our modules, the crate for others), the message with the
/// configured names redacted, and a trailing newline. Embedded newlines in the message are
/// replaced so a record can never forge a second line.
fn format_line(stamp: Option<SystemTime>, record: &Record) -> String {
    let mut line = match stamp {
        Some(t) => utc_timestamp(t) + " ",
        None => String::new(),
    };
    line.push_str(&format!(
        "{:<5} [{}] ",
        record.level().as_str(),
        component(record.target())
    ));
    let msg = message(record);
    line.extend(
        msg.chars()
            .map(|c| if c == '\n' || c == '\r' { ' ' } else { c }),
    );
    line.push('\n');
    line
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for `t` (times before 1970 print as the epoch).
pub fn utc_timestamp(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (y, m, d) = civil_from_days(secs / 86_400);
    let sod = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        sod / 3600,
        sod / 60 % 60,
        sod % 60,
        since.subsec_millis()
    )
}

/// Proleptic Gregorian (year, month 1..=12, day 1..=31) of `days` since 1970-01-01.
/// Works in 400-year eras of 146 097 days whose years start on 1 March, so the leap day is the
/// last day of a year and month lengths follow the 153-day five-month pattern.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // 719 468 days from 0000-03-01 to 1970-01-01.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097; // day of era, 0..=146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // year of era, 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of the March-based year
    let mp = (5 * doy + 2) / 153; // March = 0
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = era * 400 + yoe + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn utc_timestamps_known_dates() {
        let at = |s: u64, ms: u64| UNIX_EPOCH + Duration::from_millis(s * 1000 + ms);
        assert_eq!(utc_timestamp(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            utc_timestamp(at(951_782_400, 7)),
            "2000-02-29T00:00:00.007Z"
        );
        assert_eq!(
            utc_timestamp(at(951_868_799, 999)),
            "2000-02-29T23:59:59.999Z"
        );
        assert_eq!(
            utc_timestamp(at(1_709_251_199, 0)),
            "2024-02-29T23:59:59.000Z"
        );
        assert_eq!(
            utc_timestamp(at(4_107_542_400, 0)),
            "2100-03-01T00:00:00.000Z"
        );
        assert_eq!(
            utc_timestamp(at(1_234_567_890, 0)),
            "2009-02-13T23:31:30.000Z"
        );
        assert_eq!(
            utc_timestamp(UNIX_EPOCH - Duration::from_secs(5)),
            "1970-01-01T00:00:00.000Z"
        );
    }

    #[test]
    fn civil_dates_round_trip_every_day_for_four_centuries() {
        // Walk day by day from 1970 and check the calendar advances by exactly one day.
        let (mut y, mut m, mut d) = (1970, 1, 1);
        for days in 0..146_097 + 365 * 30 {
            assert_eq!(civil_from_days(days), (y, m, d), "day {days}");
            let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
            let len = match m {
                2 if leap => 29,
                2 => 28,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            d += 1;
            if d > len {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
    }

    fn record_line(
        stamp: Option<SystemTime>,
        level: log::Level,
        target: &str,
        msg: &str,
    ) -> String {
        format_line(
            stamp,
            &Record::builder()
                .level(level)
                .target(target)
                .args(format_args!("{msg}"))
                .build(),
        )
    }

    #[test]
    fn one_format_stamp_level_component_message_and_newlines_flattened() {
        let t = UNIX_EPOCH + Duration::from_secs(60);
        let own = record_line(
            Some(t),
            log::Level::Warn,
            "tg_ws_proxy::conn::relay",
            "a\nb",
        );
        assert_eq!(own, "1970-01-01T00:01:00.000Z WARN  [relay] a b\n");
        let other = record_line(Some(t), log::Level::Info, "rustls::client", "x");
        assert_eq!(other, "1970-01-01T00:01:00.000Z INFO  [rustls] x\n");
        // stderr under logd: the same line without the stamp.
        let bare = record_line(None, log::Level::Warn, "tg_ws_proxy::route::ladder", "a\rb");
        assert_eq!(bare, "WARN  [ladder] a b\n");
    }

    #[test]
    fn log_time_auto_stamps_only_a_terminal_and_on_off_force_it() {
        assert_eq!(LogTime::parse("auto"), Ok(LogTime::Auto));
        assert_eq!(LogTime::default(), LogTime::Auto);
        assert!(LogTime::parse("yes").is_err());
        assert!(LogTime::Auto.stamps(true) && !LogTime::Auto.stamps(false));
        assert!(LogTime::On.stamps(false) && LogTime::On.stamps(true));
        assert!(!LogTime::Off.stamps(true) && !LogTime::Off.stamps(false));
    }

    #[test]
    fn stderr_lines_are_capped_at_pipe_buf_on_a_char_boundary() {
        let long = "é".repeat(5000);
        let line = cap_line(record_line(
            None,
            log::Level::Trace,
            "tungstenite::handshake",
            &long,
        ));
        assert!(line.len() <= STDERR_LINE_MAX, "{}", line.len());
        assert!(line.len() > STDERR_LINE_MAX - 8, "{}", line.len());
        assert!(line.ends_with("é…\n"), "{:?}", &line[line.len() - 8..]);
        let short = "x".repeat(STDERR_LINE_MAX - 1) + "\n";
        assert_eq!(cap_line(short.clone()), short);
    }

    #[test]
    fn dependency_lines_hide_configured_names() {
        let pairs = vec![
            (
                "myproxy.someone.workers.dev".to_string(),
                "my…workers.dev".to_string(),
            ),
            ("example.com".to_string(), "ex…".to_string()),
        ];
        assert_eq!(
            redact_with(
                "Host: myproxy.someone.workers.dev\r\nHost: kws2.example.com".to_string(),
                &pairs
            ),
            "Host: my…workers.dev\r\nHost: kws2.ex…"
        );
        assert_eq!(
            redact_with("nothing here".to_string(), &pairs),
            "nothing here"
        );
    }

    #[test]
    fn log_file_rotates_once_at_the_cap() {
        let dir = std::env::temp_dir().join(format!("tgwp-logtest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("proxy.log");
        let mut f = LogFile::open(&path, 25).expect("open");
        f.write_line(b"0123456789\n"); // 11
        f.write_line(b"abcdefghij\n"); // 22
        assert!(!dir.join("proxy.log.1").exists());
        f.write_line(b"ABCDEFGHIJ\n"); // would be 33 > 25: rotate first
        assert_eq!(
            std::fs::read_to_string(dir.join("proxy.log.1")).expect("rotated"),
            "0123456789\nabcdefghij\n"
        );
        assert_eq!(std::fs::read_to_string(&path).expect("log"), "ABCDEFGHIJ\n");
        f.write_line(b"0123456789\n");
        f.write_line(b"zzzzzzzzzz\n"); // rotate again: the old .1 is replaced
        assert_eq!(
            std::fs::read_to_string(dir.join("proxy.log.1")).expect("rotated"),
            "ABCDEFGHIJ\n0123456789\n"
        );
        assert_eq!(std::fs::read_to_string(&path).expect("log"), "zzzzzzzzzz\n");
        assert!(!dir.join("proxy.log.1.1").exists());
        // Reopening continues from the existing size.
        drop(f);
        let f = LogFile::open(&path, 25).expect("reopen");
        assert_eq!(f.size, 11);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
