//! Stall detection for one session (docs/design.md §4 rule 7, the "16 KB freeze"): sans-IO,
//! time as a parameter (ms). The session shell (`conn`) feeds it the payload counters after each
//! relay step and arms a timer at the deadline it returns; this module only decides. Route
//! health is the ladder's: the shell reports a stall as a fact.
//!
//! A stall is the upstream silent for the bound while the client waits for it: the client sent
//! at least twice (two relay steps that moved bytes up) since the last downstream byte, and
//! nothing came down for the bound after the latest of them. One send alone is not waiting: a
//! client acknowledges what it received (`msgs_ack`), which the server never answers, so an
//! idle session usually ends with one unanswered send. A stalled session asks again (a retry,
//! a ping) and gets nothing. Counting from the latest send keeps a slow upload (many sends, the
//! answer only after the last) from looking stalled. Upstream bytes waiting in the relay for
//! the client to take them count as bytes down: a slow phone in the middle of a download keeps
//! sending (acks, new requests) while the proxy holds what it has not read yet, and that
//! silence is the client's, not the upstream's.

/// Watches one session's counters for a stall. Reports at most once per session.
#[derive(Clone, Copy, Debug)]
pub struct StallWatch {
    timeout_ms: u64,
    up: u64,
    down: u64,
    /// Steps that moved bytes up since the last downstream byte (saturating at 2).
    sends: u8,
    /// The latest of those steps (ms).
    last_send: u64,
    reported: bool,
}

impl StallWatch {
    /// A watch with the bound `timeout_ms` (`--stall-timeout`); 0 disables it.
    pub fn new(timeout_ms: u64) -> StallWatch {
        StallWatch {
            timeout_ms,
            up: 0,
            down: 0,
            sends: 0,
            last_send: 0,
            reported: false,
        }
    }

    /// The watch starting from the session's payload totals so far (bytes up, bytes down): a
    /// fresh upstream after a replay counts only what the client sends from then on.
    pub fn after(mut self, bytes_up: u64, bytes_down: u64) -> StallWatch {
        self.up = bytes_up;
        self.down = bytes_down;
        self
    }

    /// After a relay step at `now` with the session's payload totals (bytes up, bytes down)
    /// and whether upstream bytes wait for the client to take them (`on_client`):
    /// `Some(deadline)` (ms) when the watch has just armed (the client's second unanswered
    /// send) and the caller should check at `deadline` ([`StallWatch::stalled`], then
    /// [`StallWatch::due`]); `None` otherwise. Later sends push the deadline back without a
    /// new timer: the check re-arms lazily. Bytes waiting for the client count as bytes down:
    /// while the client is slow to read, the silence is its own, not the upstream's.
    pub fn observe(
        &mut self,
        now: u64,
        (bytes_up, bytes_down): (u64, u64),
        on_client: bool,
    ) -> Option<u64> {
        let went_up = bytes_up > self.up;
        let came_down = bytes_down > self.down || on_client;
        self.up = bytes_up;
        self.down = bytes_down;
        if self.timeout_ms == 0 || self.reported {
            return None;
        }
        if came_down {
            // A send in the same step as a downstream byte is not counted: it may be the
            // request just answered, or an ack of what came.
            self.sends = 0;
            return None;
        }
        if !went_up {
            return None;
        }
        self.last_send = now;
        if self.sends >= 2 {
            return None;
        }
        self.sends += 1;
        (self.sends == 2).then_some(now + self.timeout_ms)
    }

    /// True (once per session) when the client sent at least twice since the last downstream
    /// byte and nothing came down for the bound after its latest send, at `now`.
    pub fn stalled(&mut self, now: u64) -> bool {
        let waited = now.saturating_sub(self.last_send) >= self.timeout_ms;
        if self.reported || self.sends < 2 || !waited {
            return false;
        }
        self.reported = true;
        true
    }

    /// When to check again (ms), if the watch is still armed and has not reported.
    pub fn due(&self) -> Option<u64> {
        (!self.reported && self.sends >= 2).then_some(self.last_send + self.timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session: 10 KiB down at 0, then the client's sends at the given times, silence after.
    fn waiting(sends: &[u64]) -> StallWatch {
        let mut w = StallWatch::new(8_000);
        assert_eq!(w.observe(0, (100, 10_240), false), None);
        for (i, &t) in sends.iter().enumerate() {
            w.observe(t, (200 + i as u64 * 100, 10_240), false);
        }
        w
    }

    #[test]
    fn sixteen_kb_freeze_the_client_asks_twice_and_nothing_comes_down_for_the_bound() {
        let mut w = StallWatch::new(8_000);
        w.observe(0, (100, 0), false);
        assert_eq!(
            w.observe(50, (100, 16_384), false),
            None,
            "the first 16 KiB arrive"
        );
        assert_eq!(
            w.observe(1_000, (200, 16_384), false),
            None,
            "one send: maybe an ack"
        );
        assert_eq!(
            w.observe(3_000, (300, 16_384), false),
            Some(11_000),
            "asked again: armed"
        );
        assert!(!w.stalled(10_999));
        assert!(w.stalled(11_000));
        assert!(!w.stalled(20_000), "reported once");
        assert_eq!(w.due(), None);
        assert_eq!(w.observe(30_000, (500, 16_384), false), None);
    }

    #[test]
    fn later_sends_push_the_check_back_so_a_slow_upload_is_not_a_stall() {
        // A 512 KiB file part trickling up for 20 s; the answer comes right after the last.
        let mut w = StallWatch::new(8_000);
        w.observe(0, (0, 100), false);
        assert_eq!(w.observe(1_000, (16_384, 100), false), None);
        assert_eq!(w.observe(2_000, (32_768, 100), false), Some(10_000));
        for t in (3..=21).map(|s| s * 1_000) {
            w.observe(t, (t * 25, 100), false);
        }
        assert!(!w.stalled(10_000), "the client is still sending");
        assert_eq!(w.due(), Some(29_000), "re-armed from the latest send");
        assert_eq!(w.observe(21_300, (525_000, 150), false), None, "answered");
        assert!(!w.stalled(29_000));
        assert_eq!(w.due(), None);
    }

    #[test]
    fn an_answer_in_time_disarms_it() {
        let mut w = waiting(&[1_000, 2_000]);
        assert_eq!(w.due(), Some(10_000));
        assert_eq!(
            w.observe(9_999, (300, 10_300), false),
            None,
            "a byte down before the bound"
        );
        assert!(!w.stalled(10_000));
        assert!(!w.stalled(60_000));
        // Waiting again later arms afresh.
        w.observe(61_000, (400, 10_300), false);
        assert_eq!(w.observe(62_000, (500, 10_300), false), Some(70_000));
        assert!(w.stalled(70_000));
    }

    #[test]
    fn one_unanswered_send_an_idle_session_or_an_ack_is_not_a_stall() {
        let mut w = waiting(&[1_000]);
        assert!(
            !w.stalled(600_000),
            "an ack after the last reply, then idleness"
        );
        assert_eq!(w.due(), None);
        // An ack in the same step as the data it acknowledges does not count.
        let mut w = StallWatch::new(8_000);
        w.observe(0, (100, 5_000), false);
        assert_eq!(w.observe(10, (200, 6_000), false), None);
        assert_eq!(w.observe(20, (300, 6_000), false), None);
        assert!(!w.stalled(100_000));
        // Nothing sent at all.
        let mut w = StallWatch::new(8_000);
        w.observe(0, (0, 0), false);
        assert!(!w.stalled(100_000));
    }

    #[test]
    fn a_client_slow_to_read_is_not_a_stalled_upstream() {
        let mut w = StallWatch::new(8_000);
        w.observe(0, (100, 16_384), true);
        // The client sends while the relay still holds bytes it has not taken.
        assert_eq!(w.observe(1_000, (200, 16_384), true), None);
        assert_eq!(w.observe(2_000, (300, 16_384), true), None);
        assert!(!w.stalled(60_000));
        assert_eq!(w.due(), None);
        // Once it has taken everything, a silent upstream is a stall again.
        w.observe(61_000, (400, 16_384), false);
        assert_eq!(w.observe(62_000, (500, 16_384), false), Some(70_000));
        assert!(w.stalled(70_000));
    }

    #[test]
    fn zero_timeout_disables_it() {
        let mut w = StallWatch::new(0);
        for t in 0..10 {
            assert_eq!(w.observe(t * 1_000, (t * 100, 0), false), None);
        }
        assert!(!w.stalled(1_000_000));
        assert_eq!(w.due(), None);
    }
}
