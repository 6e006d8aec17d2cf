//! The session's record for the structured event stream (`logging::events`, `TG_EVENTS`): the
//! facts of the close line as fields, built only when the stream is on. The close line itself
//! (its wording, folding and level) stays `Conn::close_line`'s.

use super::mask::Masking;
use super::Conn;
use crate::error::CloseReason;
use crate::logging::events::Event;

impl Conn {
    /// The `session` event of this session ending with `reason` (`masked`: its relay to the
    /// mask host, if it was handed to one). Fields: see `logging::events`.
    pub(super) fn record(&self, reason: CloseReason, masked: Option<&Masking>) -> Event {
        let dc = self.info.dc.map(|d| d.label());
        let (why, target) = masked.map(|m| m.why_target()).unzip();
        Event::new("session")
            .str("peer", &self.peer.to_string())
            .bool("fake_tls", self.client.is_fake_tls())
            .opt("dc", dc.as_deref())
            .opt("tier", self.info.tier.map(|t| t.name()))
            .str("target", &self.info.target)
            .bool("plain_ws", self.info.tier.is_some_and(|t| t.is_plain()))
            .bool("masked", masked.is_some())
            .opt("mask_why", why.map(|w| w.to_string()).as_deref())
            .opt("mask_target", target)
            .num("up", self.info.meter.bytes_up)
            .num("down", self.info.meter.bytes_down)
            .str("closed_by", reason.side().name())
            .str("reason", &reason.to_string())
            .opt("froze", self.info.froze.map(|(f, _)| f.name()))
            .str("way", self.way.name())
            .opt("dst", self.info.dst.map(|d| d.to_string()).as_deref())
            .opt("dc_source", self.info.dc_source.map(|s| s.name()))
            .opt("relay_mode", self.info.relay_mode.map(|m| m.name()))
    }
}
