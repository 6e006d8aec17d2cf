//! `--secret-file`: parse a secret file's text, or create the file with a fresh secret.
//!
//! Owns the file's format (one secret per line or comma-separated, `#` comments) and its
//! creation (exclusive, mode 0600). Messages name the file and the line, never a secret.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use log::Level;

use super::Note;
use crate::mtproto::obfs2::Secret;
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

/// Reads the secrets in `path`, or, if it does not exist, creates it (mode 0600, exclusive
/// create) holding one fresh plain secret. Returns the secrets and a note to log.
pub(super) fn load_or_create_secret_file(
    path: &Path,
) -> Result<(Vec<Secret>, Option<Note>), String> {
    let shown = path.display();
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let secrets = parse_secret_text(&text).map_err(|e| format!("{shown}: {e}"))?;
            let mode = std::fs::metadata(path)
                .map(|m| m.permissions().mode())
                .unwrap_or(0);
            let note = (mode & 0o077 != 0).then(|| {
                (
                    Level::Warn,
                    format!(
                        "secret file {shown} is readable by others (mode {:o}); chmod 600 it",
                        mode & 0o777
                    ),
                )
            });
            Ok((secrets, note))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
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
            let note = format!("created secret file {shown} with a new secret (mode 0600); `tg-ws-proxy link --secret-file {shown}` prints the links");
            Ok((vec![secret], Some((Level::Info, note))))
        }
        Err(e) => Err(format!("cannot read {shown}: {e}")),
    }
}
