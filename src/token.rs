//! mio `Token` ⇄ (slot, generation, role).
//!
//! Every socket event carries a slot, the low bits of its owner's id and the socket's role, so
//! an event for a freed-and-reused slot is recognised as stale. For the client and upstream
//! roles the slot is the session's and the id its connection id; for [`Role::Probe`] both
//! belong to the reactor's probe slab. Layout (fits a 32-bit `usize`): bits 0–1 role, bits 2–23
//! slot, bits 24–31 generation. Tokens whose slot field is all ones (2^22 − 1, never a slot) are
//! the reactor's own sockets: the listener, the DNS socket, the signal pipe, the control socket's
//! listener and its connections ([`control_conn`]), the shared CF domain list's fetch ([`CFLIST`]),
//! Telegram's range list fetch ([`TGRANGES`]), the DNS-over-HTTPS exchanges ([`doh_conn`]).

use mio::Token;

/// The listening socket.
pub const LISTENER: Token = Token(usize::MAX);

/// The DNS resolver's UDP socket.
pub const DNS: Token = Token(usize::MAX - 1);

/// The signal pipe (SIGHUP, SIGTERM, SIGINT reach the loop through it).
pub const SIGNAL: Token = Token(usize::MAX - 2);

/// The control socket's listener (`--control-socket`).
pub const CONTROL: Token = Token(usize::MAX - 3);

/// The shared CF domain list's fetch socket (`reactor::cflist`; one fetch at a time): slot
/// field all ones, role 1, generation 0.
pub const CFLIST: Token = Token((OWN << 2) | 1);

/// Telegram's range list fetch socket (`reactor::tgranges`; one fetch at a time): slot field
/// all ones, role 2, generation 0.
pub const TGRANGES: Token = Token((OWN << 2) | 2);

/// The extra ways in's listeners (`reactor::ways`): `[0]` transparent, `[1]` SOCKS5. Slot field
/// all ones, roles 0 and 1, generation 0xfe (no control connection has it).
pub const WAY_LISTENERS: [Token; 2] = [
    Token((0xfe << 24) | (OWN << 2)),
    Token((0xfe << 24) | (OWN << 2) | 1),
];

/// DNS-over-HTTPS exchanges running at once, at most (each has a [`doh_conn`] token).
pub const MAX_DOH_CONNS: usize = 8;

/// Token of DoH exchange slot `i` (< [`MAX_DOH_CONNS`], `reactor::doh`): slot field all ones,
/// role 3, generation byte `i` (role 3 with the slot field all ones is otherwise only
/// [`LISTENER`], generation 0xff).
pub fn doh_conn(i: usize) -> Token {
    debug_assert!(i < MAX_DOH_CONNS);
    Token(((i & 0xff) << 24) | (OWN << 2) | 3)
}

/// The index of a [`doh_conn`] token, else `None`.
pub fn doh_index(t: Token) -> Option<usize> {
    let v = t.0;
    let i = (v >> 24) & 0xff;
    (v & 3 == 3 && (v >> 2) & OWN == OWN && v >> 24 == i && i < MAX_DOH_CONNS).then_some(i)
}

/// Control connections open at once, at most (each has a [`control_conn`] token).
pub const MAX_CONTROL_CONNS: usize = 16;

/// The slot field value no session or probe slot uses: marks the reactor's own tokens.
const OWN: usize = 0x3f_ffff;

/// Token of control connection `i` (< [`MAX_CONTROL_CONNS`]): slot field all ones, role 0,
/// generation byte `i` (the fixed tokens above use generation 0xff).
pub fn control_conn(i: usize) -> Token {
    debug_assert!(i < MAX_CONTROL_CONNS);
    Token(((i & 0xff) << 24) | (OWN << 2))
}

/// The index of a [`control_conn`] token, else `None`.
pub fn control_index(t: Token) -> Option<usize> {
    let v = t.0;
    let i = (v >> 24) & 0xff;
    (v & 3 == 0 && (v >> 2) & OWN == OWN && v >> 24 == i && i < MAX_CONTROL_CONNS).then_some(i)
}

/// Largest slot index a token can carry (2^22 − 2, so no token equals LISTENER or DNS on a
/// 32-bit target).
pub const MAX_SLOT: usize = (1 << 22) - 2;

/// Which socket of a session an event is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The client's socket.
    Client,
    /// Upstream attempt 0 or 1 (a session races at most two attempts at once).
    Up(u8),
    /// A background probe's socket; the slot indexes the probe slab.
    Probe,
}

/// Builds the token for `slot` (≤ [`MAX_SLOT`]), connection id `conn_id` and `role`.
pub fn encode(slot: usize, conn_id: u32, role: Role) -> Token {
    debug_assert!(slot <= MAX_SLOT);
    let r = match role {
        Role::Client => 0,
        Role::Up(i) => 1 + (i as usize & 1),
        Role::Probe => 3,
    };
    Token(((conn_id as usize & 0xff) << 24) | ((slot.min(MAX_SLOT)) << 2) | r)
}

/// Splits a session token into (slot, generation byte, role); `None` for the listener or a
/// malformed token.
pub fn decode(t: Token) -> Option<(usize, u8, Role)> {
    let v = t.0;
    if (v >> 2) & OWN == OWN {
        return None;
    }
    let role = match v & 3 {
        0 => Role::Client,
        1 => Role::Up(0),
        2 => Role::Up(1),
        _ => Role::Probe,
    };
    Some(((v >> 2) & 0x3f_ffff, ((v >> 24) & 0xff) as u8, role))
}

/// The generation byte carried for `conn_id`.
pub fn generation(conn_id: u32) -> u8 {
    (conn_id & 0xff) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_stale_generation() {
        for &(slot, id) in &[(0usize, 0u32), (5, 257), (MAX_SLOT, u32::MAX)] {
            for role in [Role::Client, Role::Up(0), Role::Up(1), Role::Probe] {
                let t = encode(slot, id, role);
                assert_ne!(t, LISTENER);
                assert_eq!(decode(t), Some((slot, generation(id), role)));
            }
        }
        // A reused slot with a new connection id yields a different generation.
        let old = decode(encode(7, 10, Role::Client)).unwrap();
        assert_ne!(old.1, generation(11));
        assert_eq!(decode(LISTENER), None);
        for own in [
            LISTENER,
            DNS,
            SIGNAL,
            CONTROL,
            CFLIST,
            TGRANGES,
            WAY_LISTENERS[0],
            WAY_LISTENERS[1],
            control_conn(0),
            control_conn(15),
        ] {
            assert_eq!(decode(own), None);
            assert!(own == CFLIST || !WAY_LISTENERS.contains(&own) || control_index(own).is_none());
        }
        assert_ne!(WAY_LISTENERS[0], CFLIST);
        assert_ne!(WAY_LISTENERS[1], CFLIST);
        assert_eq!(control_index(control_conn(3)), Some(3));
        for other in [
            LISTENER,
            DNS,
            SIGNAL,
            CONTROL,
            CFLIST,
            TGRANGES,
            encode(0, 0, Role::Client),
        ] {
            assert_eq!(control_index(other), None);
        }
        assert_eq!(decode(DNS), None);
        assert_eq!(decode(Token(3)), Some((0, 0, Role::Probe)));
    }

    #[test]
    fn doh_tokens_are_their_own() {
        let fixed = [LISTENER, DNS, SIGNAL, CONTROL, CFLIST, TGRANGES];
        for i in 0..MAX_DOH_CONNS {
            let t = doh_conn(i);
            assert_eq!(doh_index(t), Some(i));
            assert_eq!(decode(t), None);
            assert_eq!(control_index(t), None);
            assert!(!fixed.contains(&t) && !WAY_LISTENERS.contains(&t));
        }
        for other in fixed
            .into_iter()
            .chain([control_conn(3), encode(9, 9, Role::Probe)])
        {
            assert_eq!(doh_index(other), None);
        }
    }
}
