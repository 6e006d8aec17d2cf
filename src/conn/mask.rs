//! STUB (engineer D's branch only; engineer B's src/conn/mask.rs replaces this file): the
//! masking entry point with its agreed signature. It logs the refused client and closes it;
//! B's version hands the client to the mask host.

use super::{Conn, Ctx, Step};
use crate::error::CloseReason;
use crate::mtproto::faketls::gate::Reject;

/// Why a client is masked: a fake-TLS verdict (the gate's [`Reject`]) or non-TLS bytes on a
/// port whose secrets are all `ee`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaskWhy {
    /// The ClientHello is not ours.
    Hello(Reject),
    /// The first bytes are not TLS and every secret is `ee`.
    NotTls,
}

impl Conn {
    /// Hands this client to the mask host (STUB: logs `why` and closes). `captured`: every byte
    /// read from the client so far; `sni`: the hello's SNI if it parsed.
    pub(super) fn start_mask(
        &mut self,
        why: MaskWhy,
        captured: Vec<u8>,
        sni: Option<&[u8]>,
        ctx: &mut Ctx<'_>,
    ) -> Step {
        let detail = format!(
            "not a fake-TLS client of ours ({why:?}, {} bytes, sni {:?}); masking is not built in",
            captured.len(),
            sni.map(String::from_utf8_lossy)
        );
        self.log_bad(CloseReason::BadInit, &detail, ctx);
        Step::Close(CloseReason::BadInit)
    }
}
