//! The names the whole program uses for where a session goes and how it came in: [`Tier`]
//! (the ladder's upstream tiers, their order, names and per-tier facts) and [`WayIn`] (the
//! listeners a client can reach us through). Re-exported as `config::Tier` / `config::WayIn`.

/// One upstream tier of the ladder (docs/design.md §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    /// Telegram's own WebSocket front (`kwsN.web.telegram.org` at the `--dc-ip` address).
    Ws,
    /// Telegram's WS front with the TLS SNI swapped to an allowed name (`--fronting-domain`),
    /// `Host` still `kwsN.web.telegram.org`; planned after the direct route failed at TLS or
    /// upgrade (docs/protocol.md §4.6).
    Front,
    /// A user's Cloudflare Worker (`--cf-worker-domain`): a byte pipe to the DC over WS.
    Worker,
    /// Telegram's WS front through a Cloudflare-proxied domain (`kwsN.<--cf-domain>`).
    CfProxy,
    /// An upstream MTProto proxy (`--mtproto-proxy HOST:PORT:SECRET`): obfuscated2 (and for `ee`
    /// fake-TLS) client side toward it (docs/protocol.md §4.4).
    Mtproto,
    /// The cfproxy tier's names over plain `ws://` (`--cf-ws-port`, 80), no TLS of ours at all:
    /// opt-in (`--cfproxy-ws on`) for networks that throttle TLS to Cloudflare by SNI; the
    /// MTProto inside stays obfuscated2 and end-to-end encrypted (docs/protocol.md §4.3).
    CfProxyWs,
    /// Raw obfuscated2 over TCP to the DC address (last resort).
    Tcp,
}

impl Tier {
    /// How many tiers there are: the size of per-tier arrays.
    pub const COUNT: usize = 7;

    /// Every tier, in the default order (declaration order, so `index` follows it).
    pub const ALL: [Tier; Tier::COUNT] = [
        Tier::Ws,
        Tier::Front,
        Tier::Worker,
        Tier::CfProxy,
        Tier::Mtproto,
        Tier::CfProxyWs,
        Tier::Tcp,
    ];

    /// Lower-case name used in flags and logs (`ws`, `front`, `worker`, `cfproxy`, `mtproto`,
    /// `cfproxy-ws`, `tcp`).
    pub fn name(self) -> &'static str {
        match self {
            Tier::Ws => "ws",
            Tier::Front => "front",
            Tier::Worker => "worker",
            Tier::CfProxy => "cfproxy",
            Tier::Mtproto => "mtproto",
            Tier::CfProxyWs => "cfproxy-ws",
            Tier::Tcp => "tcp",
        }
    }

    /// Parses a tier name as written in `--tier-order`.
    pub fn parse(s: &str) -> Option<Tier> {
        match s {
            "ws" => Some(Tier::Ws),
            "front" => Some(Tier::Front),
            "mtproto" => Some(Tier::Mtproto),
            "worker" => Some(Tier::Worker),
            "cfproxy" => Some(Tier::CfProxy),
            "cfproxy-ws" => Some(Tier::CfProxyWs),
            "tcp" => Some(Tier::Tcp),
            _ => None,
        }
    }

    /// Index into per-tier arrays (`0..Tier::COUNT`).
    pub fn index(self) -> usize {
        self as usize
    }

    /// True for tiers that pass through Cloudflare (quotas apply; only a Worker is pinged).
    pub fn is_cloudflare(self) -> bool {
        matches!(self, Tier::Worker | Tier::CfProxy | Tier::CfProxyWs)
    }

    /// True for the tier whose leg carries no TLS of ours (`cfproxy-ws`: plain `ws://`).
    pub fn is_plain(self) -> bool {
        self == Tier::CfProxyWs
    }

    /// Every tier's name in the default order, comma-separated (`ws, front, …, tcp`): the one
    /// list the messages that name the known tiers print, so a new tier cannot be left out.
    pub fn names() -> String {
        Tier::ALL.map(Tier::name).join(", ")
    }
}

/// How a client reached us: each has its own listener and is counted apart in `ctl status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WayIn {
    /// An MTProto proxy client (`--host`/`--port`, a `tg://proxy` link and a secret).
    Proxy,
    /// A LAN client redirected by our firewall table (`--transparent`): direct transport, the
    /// destination from `SO_ORIGINAL_DST`.
    Transparent,
    /// A SOCKS5 client (`--socks5`): direct transport, the destination from its CONNECT.
    Socks5,
}

impl WayIn {
    /// Every way in, in status order.
    pub const ALL: [WayIn; 3] = [WayIn::Proxy, WayIn::Transparent, WayIn::Socks5];

    /// Name in status, session records and logs: `proxy`, `transparent`, `socks5`.
    pub fn name(self) -> &'static str {
        match self {
            WayIn::Proxy => "proxy",
            WayIn::Transparent => "transparent",
            WayIn::Socks5 => "socks5",
        }
    }

    /// Index into per-way arrays (the order of [`WayIn::ALL`]).
    pub fn index(self) -> usize {
        self as usize
    }
}
