//! DC identity from the init's DC index, and the per-DC facts that follow from it: `kws` host
//! names and WebSocket path (docs/protocol.md §3.3), the built-in IP tables (§3.4), the relay index
//! (§3.1) and log labels. Media and test flags follow §1.4; the 203→2 remap applies to host
//! names only (§7.5).
//!
//! Pure data: no DNS, no sockets, no route health (`route` owns that); `--dc-ip` overrides are
//! applied by `config`, not here.

use std::fmt;
use std::net::Ipv4Addr;

/// A Telegram DC as requested by a client: number (test offset removed), media and test flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DcId {
    pub dc: u16,
    pub media: bool,
    pub test: bool,
}

/// Why a DC index was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DcError {
    /// Index 0 (or ±10000, test DC 0): no such DC.
    Zero,
}

impl fmt::Display for DcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DcError::Zero => f.write_str("DC index 0 names no DC"),
        }
    }
}

impl std::error::Error for DcError {}

/// Default WebSocket front address used for DCs 2 and 4 when no `--dc-ip` is given (§3.4).
pub fn default_ws_front() -> Ipv4Addr {
    Ipv4Addr::new(149, 154, 167, 220)
}

/// DCs that get [`default_ws_front`] by default (§3.4).
pub const DEFAULT_WS_DCS: [u16; 2] = [2, 4];

impl DcId {
    /// The production, non-media DC `dc`.
    pub const fn plain(dc: u16) -> DcId {
        DcId {
            dc,
            media: false,
            test: false,
        }
    }

    /// Decodes the signed DC index from the init (§1.4): negative = media; |idx| ≥ 10000 = test,
    /// DC = |idx| − 10000. Computed in i32, so `i16::MIN` is safe (test media DC 22768).
    pub fn from_index(idx: i16) -> Result<DcId, DcError> {
        let v = i32::from(idx);
        let abs = v.abs();
        let test = abs >= 10_000;
        let dc = if test { abs - 10_000 } else { abs };
        if dc == 0 {
            return Err(DcError::Zero);
        }
        Ok(DcId {
            // 0 < dc ≤ 32768 − 10000 or < 10000: always fits u16.
            dc: dc as u16,
            media: v < 0,
            test,
        })
    }

    /// Index for the relay init toward Telegram (§3.1, §7.5): the DC without the test offset,
    /// negated for media. DC numbers above `i16::MAX` saturate.
    pub fn relay_index(self) -> i16 {
        let n = i16::try_from(self.dc).unwrap_or(i16::MAX);
        if self.media {
            -n
        } else {
            n
        }
    }

    /// The two `kws` host names in try order (§3.3): N = DC with 203 → 2; non-media
    /// `kwsN.web.telegram.org` then `kwsN-1.web.telegram.org`, media the reverse.
    pub fn ws_hosts(self) -> [String; 2] {
        let n = if self.dc == 203 { 2 } else { self.dc };
        let main = format!("kws{n}.web.telegram.org");
        let alt = format!("kws{n}-1.web.telegram.org");
        if self.media {
            [alt, main]
        } else {
            [main, alt]
        }
    }

    /// WebSocket URL path: `/apiws`, or `/apiws_test` for test DCs (§3.3).
    pub fn ws_path(self) -> &'static str {
        if self.test {
            "/apiws_test"
        } else {
            "/apiws"
        }
    }

    /// Built-in IPv4 address (§3.4): production DCs 1–5 and 203; test DCs 1–3. Media uses the
    /// same address. `None` for any other DC.
    pub fn table_ip(self) -> Option<Ipv4Addr> {
        let ip = if self.test {
            match self.dc {
                1 => [149, 154, 175, 10],
                2 => [149, 154, 167, 40],
                3 => [149, 154, 175, 117],
                _ => return None,
            }
        } else {
            match self.dc {
                1 => [149, 154, 175, 50],
                2 => [149, 154, 167, 51],
                3 => [149, 154, 175, 100],
                4 => [149, 154, 167, 91],
                5 => [149, 154, 171, 5],
                203 => [91, 105, 192, 100],
                _ => return None,
            }
        };
        Some(Ipv4Addr::from(ip))
    }

    /// Log label: `DC2`, `DC2m` (media), `DC2t` (test), `DC2tm` (test media).
    pub fn label(self) -> String {
        format!(
            "DC{}{}{}",
            self.dc,
            if self.test { "t" } else { "" },
            if self.media { "m" } else { "" }
        )
    }
}

impl fmt::Display for DcId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(dc: u16, media: bool, test: bool) -> DcId {
        DcId { dc, media, test }
    }

    #[test]
    fn from_index_rules() {
        assert_eq!(DcId::from_index(2), Ok(id(2, false, false)));
        assert_eq!(DcId::from_index(-4), Ok(id(4, true, false)));
        assert_eq!(DcId::from_index(203), Ok(id(203, false, false)));
        assert_eq!(DcId::from_index(9999), Ok(id(9999, false, false)));
        assert_eq!(DcId::from_index(10002), Ok(id(2, false, true)));
        assert_eq!(DcId::from_index(-10002), Ok(id(2, true, true)));
        assert_eq!(DcId::from_index(i16::MAX), Ok(id(22767, false, true)));
        assert_eq!(DcId::from_index(i16::MIN), Ok(id(22768, true, true)));
        assert_eq!(DcId::from_index(0), Err(DcError::Zero));
        assert_eq!(DcId::from_index(10000), Err(DcError::Zero));
        assert_eq!(DcId::from_index(-10000), Err(DcError::Zero));
        assert!(DcError::Zero.to_string().contains('0'));
    }

    #[test]
    fn relay_index_drops_test_offset_and_keeps_media_sign() {
        assert_eq!(DcId::from_index(2).unwrap().relay_index(), 2);
        assert_eq!(DcId::from_index(-5).unwrap().relay_index(), -5);
        assert_eq!(DcId::from_index(-10002).unwrap().relay_index(), -2);
        assert_eq!(DcId::from_index(10003).unwrap().relay_index(), 3);
        assert_eq!(DcId::from_index(i16::MIN).unwrap().relay_index(), -22768);
        assert_eq!(id(60000, true, false).relay_index(), -i16::MAX);
    }

    #[test]
    fn ws_hosts_order_and_203_remap() {
        assert_eq!(
            id(2, false, false).ws_hosts(),
            ["kws2.web.telegram.org", "kws2-1.web.telegram.org"]
        );
        assert_eq!(
            id(4, true, false).ws_hosts(),
            ["kws4-1.web.telegram.org", "kws4.web.telegram.org"]
        );
        assert_eq!(
            id(203, false, false).ws_hosts(),
            ["kws2.web.telegram.org", "kws2-1.web.telegram.org"]
        );
        assert_eq!(
            id(203, true, false).ws_hosts(),
            ["kws2-1.web.telegram.org", "kws2.web.telegram.org"]
        );
        // The remap is for host names only.
        assert_eq!(
            id(203, false, false).table_ip(),
            Some(Ipv4Addr::new(91, 105, 192, 100))
        );
        assert_eq!(id(203, false, false).label(), "DC203");
    }

    #[test]
    fn ws_path_by_test_flag() {
        assert_eq!(id(2, false, false).ws_path(), "/apiws");
        assert_eq!(id(2, true, true).ws_path(), "/apiws_test");
    }

    #[test]
    fn ip_tables() {
        let p = |dc| id(dc, false, false).table_ip();
        assert_eq!(p(1), Some(Ipv4Addr::new(149, 154, 175, 50)));
        assert_eq!(p(2), Some(Ipv4Addr::new(149, 154, 167, 51)));
        assert_eq!(p(3), Some(Ipv4Addr::new(149, 154, 175, 100)));
        assert_eq!(p(4), Some(Ipv4Addr::new(149, 154, 167, 91)));
        assert_eq!(p(5), Some(Ipv4Addr::new(149, 154, 171, 5)));
        assert_eq!(p(6), None);
        assert_eq!(id(4, true, false).table_ip(), p(4));
        let t = |dc| id(dc, false, true).table_ip();
        assert_eq!(t(1), Some(Ipv4Addr::new(149, 154, 175, 10)));
        assert_eq!(t(2), Some(Ipv4Addr::new(149, 154, 167, 40)));
        assert_eq!(t(3), Some(Ipv4Addr::new(149, 154, 175, 117)));
        assert_eq!(t(4), None);
        assert_eq!(t(203), None);
        assert_eq!(default_ws_front(), Ipv4Addr::new(149, 154, 167, 220));
        assert_eq!(DEFAULT_WS_DCS, [2, 4]);
    }

    #[test]
    fn labels() {
        assert_eq!(id(2, false, false).label(), "DC2");
        assert_eq!(id(2, true, false).label(), "DC2m");
        assert_eq!(id(2, false, true).label(), "DC2t");
        assert_eq!(DcId::from_index(-10002).unwrap().to_string(), "DC2tm");
    }
}
