//! The cooldown and quarantine knobs of route health ([`Policy`]: `--cooldown-base`,
//! `--cooldown-max`, `--flap-quarantine`, `--redirect-ttl`) and their defaults: plain data that
//! `Config::health` holds and `route::health` applies (its cooldown math and state machine live
//! there). Kept here, below both, so that `config` does not import `route`.

/// Cooldown and quarantine knobs, shared by every route of a tier. All durations in ms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// First cooldown after a route goes Down (level 0). Default 10 s.
    pub base_ms: u64,
    /// Cap of the exponential cooldown before jitter (`base_ms × 2^level`). Default 600 s.
    pub max_ms: u64,
    /// Jitter applied to every computed cooldown, ± percent (0–100). Default 20.
    pub jitter_pct: u32,
    /// Window in which Down entries are counted for flap quarantine. Default 600 s.
    pub flap_window_ms: u64,
    /// Down entries within `flap_window_ms` (including the current one) that trigger quarantine;
    /// 0 disables quarantine, values above `route::health::FLAP_RING` (8) count as 8. Default 3.
    pub flap_count: u32,
    /// Minimum cooldown (before jitter) of a quarantined route. Default 1800 s.
    pub quarantine_ms: u64,
    /// Cooldown (before jitter) after a 301/302/303/307/308: "no WS front for this DC" is a
    /// routing fact, re-probed when it expires (docs/design.md §4 rule 5). Default 3600 s.
    pub redirect_ttl_ms: u64,
    /// Longest `Retry-After` honoured on a 429/503; longer values are cut to this. Default 3600 s.
    pub max_retry_after_ms: u64,
    /// Minimum cooldown (before jitter) after `ClosedAfterReply`. Default 60 s.
    pub closed_after_reply_ms: u64,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            base_ms: 10_000,
            max_ms: 600_000,
            jitter_pct: 20,
            flap_window_ms: 600_000,
            flap_count: 3,
            quarantine_ms: 1_800_000,
            redirect_ttl_ms: 3_600_000,
            max_retry_after_ms: 3_600_000,
            closed_after_reply_ms: 60_000,
        }
    }
}
