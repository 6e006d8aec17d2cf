//! `--secret-file`: parse a secret file's text, or create the file with a fresh secret; and the
//! other file of credentials, `--socks5-auth` (read here, its format is
//! `net::socks5_server::Users`').
//!
//! Owns the secret file's format (one secret per line or comma-separated, `#` comments) and its
//! creation (exclusive, mode 0600), the bounded non-blocking read both files share, and the one
//! mode check (a warning when group or others may read a file of credentials). Messages name the
//! file and the line, never a secret or a password.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use log::Level;

use super::Note;
use crate::mtproto::obfs2::Secret;
use crate::net::socks5_server::Users;
use crate::rng::Rng;

/// Secrets in a secret file's text: one per line or comma-separated, `#` starts a comment.
/// Errors name the line, never the secret. Zero secrets is an error.
pub fn parse_secret_text(text: &str) -> Result<Vec<Secret>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("");
        for item in line.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            out.push(
                Secret::parse(item).map_err(|e| format!("line {}: invalid secret: {e}", i + 1))?,
            );
        }
    }
    if out.is_empty() {
        return Err("contains no secret".into());
    }
    Ok(out)
}

/// Largest secret file read, in bytes (64 KiB); a longer one is refused, not truncated.
pub const MAX_SECRET_FILE_BYTES: usize = 64 * 1024;

/// Reads `path` whole if it is a regular file of at most `cap` bytes of UTF-8. The open does
/// not block (`O_NONBLOCK`: a FIFO or a device at the path would otherwise stall the start or,
/// at reload, the reactor); anything but a regular file is refused. Errors: the OS error of
/// `open`/`read` as it is (a missing file keeps `NotFound`), or `InvalidData` saying what is
/// wrong (not a regular file, too long, not UTF-8).
pub fn read_small_file(path: &Path, cap: usize) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind};
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(Error::new(ErrorKind::InvalidData, "not a regular file"));
    }
    let mut bytes = Vec::new();
    f.take(cap as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.len() > cap {
        let msg = format!("larger than {} KiB", cap / 1024);
        return Err(Error::new(ErrorKind::InvalidData, msg));
    }
    String::from_utf8(bytes).map_err(|_| Error::new(ErrorKind::InvalidData, "not valid UTF-8"))
}

/// Reads the secrets in `path` (at most [`MAX_SECRET_FILE_BYTES`], a regular file), or, if it
/// does not exist and `create` is set (`run`'s start only), creates it (mode 0600, exclusive
/// create) holding one fresh plain secret. Returns the secrets and a note to log.
pub(super) fn load_or_create_secret_file(
    path: &Path,
    create: bool,
) -> Result<(Vec<Secret>, Option<Note>), String> {
    let shown = path.display();
    match read_small_file(path, MAX_SECRET_FILE_BYTES) {
        Ok(text) => {
            let secrets = parse_secret_text(&text).map_err(|e| format!("{shown}: {e}"))?;
            Ok((secrets, readable_by_others(path, "secret file")))
        }
        Err(e) if create && e.kind() == std::io::ErrorKind::NotFound => {
            let mut rng =
                Rng::new().map_err(|e| format!("no OS randomness to create {shown}: {e}"))?;
            let secret = Secret::generate(&mut rng);
            let text = format!(
                "# tg-ws-proxy secret file: one secret per line (32 hex, dd…, ee…), # comments.\n{}\n",
                secret.key_hex()
            );
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| format!("cannot create {shown}: {e}"))?;
            f.write_all(text.as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(|e| format!("cannot write {shown}: {e}"))?;
            let note = format!("created secret file {shown} with a new secret (mode 0600); `tg-ws-proxy link` with the same settings (flags or --config) prints the links");
            Ok((vec![secret], Some((Level::Info, note))))
        }
        Err(e) => Err(format!("cannot read {shown}: {e}")),
    }
}

/// A warning when `path` (a file of credentials, called `what` in the message) may be read by
/// its group or by others (any of mode bits 077), else `None` (also when its mode cannot be
/// read: the read that follows reports that).
fn readable_by_others(path: &Path, what: &str) -> Option<Note> {
    let mode = std::fs::metadata(path)
        .map(|m| m.permissions().mode())
        .unwrap_or(0);
    (mode & 0o077 != 0).then(|| {
        (
            Level::Warn,
            format!(
                "{what} {} is readable by others (mode {:o}); chmod 600 it",
                path.display(),
                mode & 0o777
            ),
        )
    })
}

/// Largest `--socks5-auth` file read, bytes (64 KiB, as the secret file); longer is refused.
pub const MAX_SOCKS5_AUTH_BYTES: usize = 64 * 1024;

/// Reads the users of `--socks5-auth FILE` (a regular file of at most
/// [`MAX_SOCKS5_AUTH_BYTES`], `user:password` lines, `net::socks5_server::Users::parse`), with a
/// warning note when its mode lets others read it, as for the secret file. Never created.
/// Errors: `FILE: …` with the OS error, or the line that is wrong (never a password).
pub(super) fn load_socks5_users(path: &Path) -> Result<(Users, Option<Note>), String> {
    let shown = path.display();
    let text = read_small_file(path, MAX_SOCKS5_AUTH_BYTES)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    let users = Users::parse(&text).map_err(|e| format!("{shown}: {e}"))?;
    Ok((users, readable_by_others(path, "SOCKS5 user file")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("tgwp-sf-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    #[test]
    fn a_huge_secret_file_is_refused_unread_past_the_cap() {
        let p = temp("huge");
        let mut text = String::from("0123456789abcdef0123456789abcdef\n");
        text.push_str(&"#".repeat(MAX_SECRET_FILE_BYTES));
        std::fs::write(&p, text).unwrap();
        let e = load_or_create_secret_file(&p, true).unwrap_err();
        assert!(e.contains("larger than 64 KiB"), "{e}");
        let _ = std::fs::remove_file(p);
    }

    #[test]
    fn a_fifo_or_a_device_as_secret_file_is_refused_without_blocking() {
        let p = temp("fifo");
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) on a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Without O_NONBLOCK this open would wait for a writer for ever.
        let e = load_or_create_secret_file(&p, true).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let _ = std::fs::remove_file(&p);
        let e = load_or_create_secret_file(Path::new("/dev/zero"), true).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
    }

    fn write_mode(p: &Path, text: &str, mode: u32) {
        std::fs::write(p, text).unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn socks5_users_load_with_the_secret_files_mode_check() {
        let p = temp("socks-ok");
        write_mode(&p, "# users\nalice:s3cret\n", 0o600);
        let (users, note) = load_socks5_users(&p).unwrap();
        assert_eq!(users.first(), Some(("alice", "s3cret")));
        assert_eq!(note, None);
        write_mode(&p, "alice:s3cret\n", 0o644);
        let (_, note) = load_socks5_users(&p).unwrap();
        let (level, msg) = note.expect("others may read it");
        assert_eq!(level, Level::Warn);
        let want = format!(
            "SOCKS5 user file {} is readable by others (mode 644); chmod 600 it",
            p.display()
        );
        assert_eq!(msg, want);
        let _ = std::fs::remove_file(p);
    }

    #[test]
    fn a_bad_socks5_user_file_is_an_error_naming_file_and_line_never_the_password() {
        let p = temp("socks-bad");
        write_mode(&p, "alice:s3cret\nbob\n", 0o600);
        let e = load_socks5_users(&p).unwrap_err();
        assert_eq!(
            e,
            format!("{}: line 2: expected user:password", p.display())
        );
        assert!(!e.contains("s3cret"), "{e}");
        let _ = std::fs::remove_file(&p);
        let e = load_socks5_users(&p).unwrap_err();
        assert!(
            e.starts_with(&format!("cannot read {}: ", p.display())),
            "{e}"
        );
        assert!(e.contains("No such file"), "{e}");
        let e = load_socks5_users(Path::new("/dev/zero")).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
    }
}
