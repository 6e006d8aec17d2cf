//! The session's record for the structured event stream (`logging::events`, `TG_EVENTS`): the
//! facts of the close line as fields, built only when the stream is on. The close line itself
//! (its wording, folding and level) stays `Conn::close_line`'s.

use super::Conn;
use crate::error::CloseReason;
use crate::logging::events::Event;

impl Conn {
    /// The `session` event of this session ending with `reason` (`masked`: it was handed to
    /// the mask host). Fields: see `logging::events`.
    pub(super) fn record(&self, reason: CloseReason, masked: bool) -> Event {
        let dc = self.info.dc.map(|d| d.label());
        Event::new("session")
            .str("peer", &self.peer.to_string())
            .bool("fake_tls", self.client.is_fake_tls())
            .opt("dc", dc.as_deref())
            .opt("tier", self.info.tier.map(|t| t.name()))
            .str("target", &self.info.target)
            .bool("masked", masked)
            .num("up", self.info.meter.bytes_up)
            .num("down", self.info.meter.bytes_down)
            .str("closed_by", reason.side().name())
            .str("reason", &reason.to_string())
            .opt("froze", self.info.froze.map(|(f, _)| f.name()))
    }
}
