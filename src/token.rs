//! mio `Token` ⇄ (slot, generation, role).
//!
//! Every socket event carries a slot, the low bits of its owner's id and the socket's role, so
//! an event for a freed-and-reused slot is recognised as stale. For the client and upstream
//! roles the slot is the session's and the id its connection id; for [`Role::Probe`] both
//! belong to the reactor's probe slab. Layout (fits a 32-bit `usize`): bits 0–1 role, bits 2–23
//! slot, bits 24–31 generation. The two highest values are the listener and the DNS socket.

use mio::Token;

/// The listening socket.
pub const LISTENER: Token = Token(usize::MAX);

/// The DNS resolver's UDP socket.
pub const DNS: Token = Token(usize::MAX - 1);

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
    if t == LISTENER || t == DNS {
        return None;
    }
    let v = t.0;
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
        assert_eq!(decode(DNS), None);
        assert_eq!(decode(Token(3)), Some((0, 0, Role::Probe)));
    }
}
