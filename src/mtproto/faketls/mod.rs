//! Fake-TLS (`ee` secrets, /work/shared/PROTOCOL.md §2). TEMPORARY (engineer D): only the
//! constants the record layer needs, until engineer A's mod.rs is merged.

pub mod record;
pub mod stream;

/// TLS record header length.
pub const RECORD_HEADER: usize = 5;
/// Largest TLS plaintext record payload (RFC 8446 §5.1): 16384.
pub const MAX_PAYLOAD: usize = 16 * 1024;
/// Largest incoming record payload we accept after the handshake (RFC 8446 §5.2): 16640.
pub const MAX_RECORD_IN: usize = MAX_PAYLOAD + 256;
/// Record content type change_cipher_spec.
pub const CT_CCS: u8 = 0x14;
/// Record content type application_data.
pub const CT_APPDATA: u8 = 0x17;
