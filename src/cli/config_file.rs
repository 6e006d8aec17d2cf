//! `--config FILE` (`TG_CONFIG`): the configuration file's format and its read.
//!
//! Owns the grammar — one setting per line, `NAME VALUE` or `NAME = VALUE`, NAME a `run` flag's
//! long name without `--` (aliases too), `#` as the first non-blank character starts a comment,
//! blank lines ignored, no inline comments (everything after the name is the value, trimmed; a
//! value that looks like one — a `#` first or after whitespace — is refused with its line, see
//! [`looks_like_comment`]), a bare NAME for a switch — and its bounds: at most [`MAX_CONFIG_BYTES`], UTF-8. [`parse_text`]
//! is sans-IO (text in, entries or a line-numbered error out) and resolves names against the
//! option table; [`read_file`] is the one read. Which source wins (flag > env > file) and what
//! a value means are the driver's (`parse`) and the table's writers' business.

use std::io::Read;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use super::table::{Kind, Opt, RUN_OPTIONS};

/// Largest configuration file accepted, in bytes (64 KiB); a longer one is refused unread.
pub const MAX_CONFIG_BYTES: usize = 64 * 1024;

/// The canonical long name of the option that names the file itself; refused inside a file.
pub(super) const CONFIG_FLAG: &str = "--config";

/// One setting of the file: the option it sets (an index into `RUN_OPTIONS`), its value text
/// (trimmed; `None` for a bare NAME) and its 1-based line number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Entry {
    pub opt: usize,
    pub value: Option<String>,
    pub line: usize,
}

/// A problem in the file: the 1-based line, the option's canonical long name if the name was
/// known, and what is wrong (never a secret's text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct FileError {
    pub line: usize,
    pub flag: Option<&'static str>,
    pub msg: String,
}

/// The file's text read whole, with the permission bits of the file (for the secret warning).
pub(super) struct Loaded {
    pub text: String,
    pub mode: u32,
}

/// Reads `path`: a regular file (a FIFO or a device is refused, and the open never blocks), at
/// most [`MAX_CONFIG_BYTES`] (a longer file is an error, not truncated), valid UTF-8. Errors are one phrase with the OS error as the OS reported it (`cannot read: No such
/// file or directory (os error 2)`).
pub(super) fn read_file(path: &Path) -> Result<Loaded, String> {
    // O_NONBLOCK: a FIFO at the path must not stall the start or, at reload, the reactor.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot read: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("cannot read: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mode = meta.permissions().mode();
    let mut bytes = Vec::new();
    // One byte past the cap tells a file of exactly the cap from a longer one.
    file.take(MAX_CONFIG_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() > MAX_CONFIG_BYTES {
        return Err(format!(
            "larger than {} KiB: not a configuration file",
            MAX_CONFIG_BYTES / 1024
        ));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        format!("line {line}: not valid UTF-8")
    })?;
    Ok(Loaded { text, mode })
}

/// The option whose canonical long name or alias is `--name`; `None` for an unknown name.
/// A short name (`p`) is not accepted: the file uses long names only.
pub(super) fn lookup(name: &str) -> Option<usize> {
    RUN_OPTIONS.iter().position(|o| {
        o.long.strip_prefix("--") == Some(name)
            || o.aliases.iter().any(|a| a.strip_prefix("--") == Some(name))
    })
}

/// True for options that take at most one setting in a file (all but lists, and counts, which
/// carry their number).
fn single(o: &Opt) -> bool {
    !matches!(o.kind, Kind::List(_))
}

/// True for options a bare NAME turns on: switches, counts, and the `on|off` values.
pub(super) fn bare_means_on(o: &Opt) -> bool {
    matches!(o.kind, Kind::Switch(_) | Kind::Count(_)) || o.meta == "on|off"
}

/// Splits and resolves every line of a configuration file. Errors, first one wins: a name not
/// in the option table (`--NAME: unknown setting`, the name cut at 40 characters), `config`
/// itself, a second line for a single-value option (aliases count as the same option), a bare
/// name for an option that needs a value, `NAME =` with nothing after it.
pub(super) fn parse_text(text: &str) -> Result<Vec<Entry>, FileError> {
    let mut out: Vec<Entry> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let t = raw.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let split = t
            .find(|c: char| c.is_whitespace() || c == '=')
            .unwrap_or(t.len());
        let (name, rest) = t.split_at(split);
        let rest = rest.trim_start();
        let (rest, had_eq) = match rest.strip_prefix('=') {
            Some(r) => (r.trim(), true),
            None => (rest.trim(), false),
        };
        let err = |flag, msg: String| FileError { line, flag, msg };
        let name = name.strip_prefix("--").unwrap_or(name);
        if name.is_empty() {
            return Err(err(None, "a line must start with a setting name".into()));
        }
        if Some(name) == CONFIG_FLAG.strip_prefix("--") {
            return Err(err(
                Some(CONFIG_FLAG),
                "not allowed inside a configuration file".into(),
            ));
        }
        let Some(idx) = lookup(name) else {
            let shown: String = name.chars().take(40).collect();
            return Err(err(
                None,
                format!("--{shown}: unknown setting (names are `run` flags without --)"),
            ));
        };
        let o = &RUN_OPTIONS[idx];
        if looks_like_comment(rest) {
            return Err(err(
                Some(o.long),
                "a '#' after a blank in the value: comments go on their own line (there are no \
                 inline comments, so it would be part of the value)"
                    .into(),
            ));
        }
        let value = match (rest.is_empty(), had_eq) {
            (false, _) => Some(rest.to_string()),
            (true, true) => return Err(err(Some(o.long), "missing value after '='".into())),
            (true, false) if bare_means_on(o) => None,
            (true, false) => return Err(err(Some(o.long), "missing value".into())),
        };
        if single(o) {
            if let Some(first) = out.iter().find(|e| e.opt == idx) {
                return Err(err(
                    Some(o.long),
                    format!("given twice (first on line {})", first.line),
                ));
            }
        }
        out.push(Entry {
            opt: idx,
            value,
            line,
        });
    }
    Ok(out)
}

/// True if a value's text holds what a reader would take for an inline comment: a `#` at its
/// start or right after whitespace (`port 1443 # LAN`). Such a line is refused rather than
/// read either way, because no rule is right for every value: cutting at ` #` would silently
/// shorten a path or a password holding one, and keeping it (the old behaviour) made the
/// comment part of the value. A `#` inside a word stays (`https://host/p#frag`, `/tmp/a#b`,
/// a password `pa#ss`); a value that really holds a blank before `#` can be given as a flag
/// or a `TG_*` variable instead.
pub(super) fn looks_like_comment(value: &str) -> bool {
    value.starts_with('#')
        || value
            .as_bytes()
            .windows(2)
            .any(|w| w[1] == b'#' && w[0].is_ascii_whitespace())
}

/// The value of the setting `long` (a canonical long flag, `--control-socket`) in the
/// configuration file at `path`, for applets that need one or two of `run`'s settings without
/// its whole configuration (`ctl`). The file is read and checked line by line exactly as `run`
/// reads it (so a file `run` refuses is refused here too, with the same line-numbered
/// message); values other than the one asked for are not judged. `Ok(None)`: the file does not
/// set it (a bare name counts as not set). Errors: `--config PATH: …` or
/// `--config PATH line N: --flag: …`, one line.
pub fn setting_in_file(path: &Path, long: &str) -> Result<Option<String>, String> {
    let shown = format!("{CONFIG_FLAG} {}", path.display());
    let loaded = read_file(path).map_err(|m| format!("{shown}: {m}"))?;
    let entries = parse_text(&loaded.text).map_err(|e| {
        let flag = e.flag.map_or(String::new(), |f| format!("{f}: "));
        format!("{shown} line {}: {flag}{}", e.line, e.msg)
    })?;
    Ok(entries
        .into_iter()
        .filter(|e| RUN_OPTIONS[e.opt].long == long)
        .find_map(|e| e.value))
}

/// True if the entries set a secret inline (`secret …`), so the file itself must be private.
pub(super) fn has_inline_secret(entries: &[Entry]) -> bool {
    entries
        .iter()
        .any(|e| RUN_OPTIONS[e.opt].long == "--secret")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long(e: &Entry) -> &'static str {
        RUN_OPTIONS[e.opt].long
    }

    fn parse(text: &str) -> Vec<(&'static str, Option<String>, usize)> {
        parse_text(text)
            .unwrap_or_else(|e| panic!("{text:?}: {e:?}"))
            .iter()
            .map(|e| (long(e), e.value.clone(), e.line))
            .collect()
    }

    fn error(text: &str) -> FileError {
        parse_text(text).expect_err(text)
    }

    #[test]
    fn comments_blanks_spaces_and_equals() {
        let text = "# a comment\n\n   \n  # indented comment\nport 1443\n\
                    tier-order = ws,tcp\nhost=127.0.0.1\n  cf-domain   a.example.org  \n";
        assert_eq!(
            parse(text),
            vec![
                ("--port", Some("1443".into()), 5),
                ("--tier-order", Some("ws,tcp".into()), 6),
                ("--host", Some("127.0.0.1".into()), 7),
                ("--cf-domain", Some("a.example.org".into()), 8),
            ]
        );
        // A `#` inside a word is part of the value.
        assert_eq!(
            parse("log-file /tmp/a#b\ncf-domain-list https://h.example/l#x\n"),
            vec![
                ("--log-file", Some("/tmp/a#b".into()), 1),
                ("--cf-domain-list", Some("https://h.example/l#x".into()), 2),
            ]
        );
        // CRLF line ends are fine; a leading -- on the name is tolerated.
        assert_eq!(parse("--port 1\r\n"), vec![("--port", Some("1".into()), 1)]);
    }

    /// Issue 23 trap: `port 1443 # LAN` made `1443 # LAN` the value. A `#` at the value's start
    /// or after a blank is refused with the line, for every kind of value.
    #[test]
    fn what_looks_like_an_inline_comment_is_refused_with_its_line() {
        for (text, flag) in [
            ("port 1443 # LAN\n", "--port"),
            ("# ok\nlog-file /tmp/a # b\n", "--log-file"),
            ("cf-domain a.example.org,\t# b\n", "--cf-domain"),
            ("secret-file = #/etc/s\n", "--secret-file"),
            ("cf-priority # on\n", "--cf-priority"),
            ("verbose #\n", "--verbose"),
        ] {
            let e = error(text);
            let line = text.lines().count();
            assert_eq!((e.line, e.flag), (line, Some(flag)), "{text:?}");
            assert!(e.msg.contains("comments go on their own line"), "{}", e.msg);
        }
        assert!(!looks_like_comment("pa#ss"));
        assert!(!looks_like_comment("https://h.example/p?q#frag"));
        assert!(looks_like_comment("#"));
    }

    #[test]
    fn bare_names_turn_switches_counts_and_on_off_values_on() {
        let got = parse("cf-priority\nverbose\nstartup-probes\nproxy-protocol off\n");
        assert_eq!(
            got,
            vec![
                ("--cf-priority", None, 1),
                ("--verbose", None, 2),
                ("--startup-probes", None, 3),
                ("--proxy-protocol", Some("off".into()), 4),
            ]
        );
        let e = error("port\n");
        assert_eq!((e.line, e.flag), (1, Some("--port")));
        assert_eq!(e.msg, "missing value");
        let e = error("\nport =\n");
        assert_eq!((e.line, e.msg.as_str()), (2, "missing value after '='"));
    }

    #[test]
    fn lists_repeat_single_values_do_not() {
        let got = parse("cf-domain a.example.org\ncf-domain b.example.org, c.example.org\n");
        assert_eq!(got.len(), 2);
        let e = error("port 1\n# x\nport 2\n");
        assert_eq!((e.line, e.flag), (3, Some("--port")));
        assert_eq!(e.msg, "given twice (first on line 1)");
        // An alias is the same option.
        let e = error("tcp-connect-timeout 1\ntcp-fallback-timeout 2\n");
        assert_eq!((e.line, e.flag), (2, Some("--tcp-connect-timeout")));
        let e = error("verbose 1\nverbose 2\n");
        assert_eq!(e.flag, Some("--verbose"));
        assert_eq!(
            parse("cfproxy-worker-domain w.example.org\n")[0].0,
            "--cf-worker-domain"
        );
    }

    #[test]
    fn unknown_names_short_names_and_config_itself_are_refused() {
        let e = error("port 1\nprot 2\n");
        assert_eq!((e.line, e.flag), (2, None));
        assert!(e.msg.starts_with("--prot: unknown setting"), "{}", e.msg);
        let e = error("p 1443\n");
        assert!(e.msg.starts_with("--p: unknown setting"), "{}", e.msg);
        let e = error("config /etc/other.conf\n");
        assert_eq!((e.line, e.flag), (1, Some("--config")));
        let e = error("= 1\n");
        assert_eq!(e.msg, "a line must start with a setting name");
        let long_name = "x".repeat(1000);
        assert!(
            error(&long_name).msg.len() < 120,
            "name is cut in the message"
        );
    }

    #[test]
    fn every_option_but_config_has_a_name_the_file_resolves() {
        for (i, o) in RUN_OPTIONS.iter().enumerate() {
            let name = &o.long[2..];
            if o.long == CONFIG_FLAG {
                assert!(parse_text(&format!("{name} x")).is_err());
            } else {
                assert_eq!(lookup(name), Some(i), "{name}");
            }
        }
    }

    #[test]
    fn inline_secret_is_noticed() {
        let e = parse_text("secret 0123456789abcdef0123456789abcdef\n").unwrap();
        assert!(has_inline_secret(&e));
        let e = parse_text("secret-file /etc/tg-ws-proxy/secret\n").unwrap();
        assert!(!has_inline_secret(&e));
    }

    fn temp_file(tag: &str, bytes: &[u8]) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("tgwp-conf-{tag}-{}", std::process::id()));
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn read_caps_at_64_kib_and_wants_utf8() {
        let ok = temp_file("cap-ok", &vec![b'#'; MAX_CONFIG_BYTES]);
        assert_eq!(read_file(&ok).unwrap().text.len(), MAX_CONFIG_BYTES);
        let big = temp_file("cap-big", &vec![b'#'; MAX_CONFIG_BYTES + 1]);
        assert!(read_file(&big)
            .err()
            .unwrap()
            .starts_with("larger than 64 KiB"));
        let bad = temp_file("utf8", b"port 1\nhost \xff\n");
        assert_eq!(read_file(&bad).err().unwrap(), "line 2: not valid UTF-8");
        let missing = std::env::temp_dir().join("tgwp-conf-missing-file");
        let e = read_file(&missing).err().unwrap();
        assert!(e.starts_with("cannot read: No such file"), "{e}");
        for p in [ok, big, bad] {
            let _ = std::fs::remove_file(p);
        }
    }

    #[test]
    fn a_fifo_or_a_device_is_refused_without_blocking() {
        let p = std::env::temp_dir().join(format!("tgwp-conf-fifo-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) on a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // A blocking open would wait for a writer for ever (at reload: inside the reactor).
        assert_eq!(read_file(&p).err().unwrap(), "not a regular file");
        let _ = std::fs::remove_file(&p);
        let dev = read_file(Path::new("/dev/zero")).err().unwrap();
        assert_eq!(dev, "not a regular file");
    }
}
