//! Routes: one concrete way to reach one DC, (tier, endpoint, DC, media) — DESIGN.md §4.
//!
//! Owns the sans-IO route logic: per-route health and cooldowns (`health`) and per-tier request
//! budgets (`budget`). Nothing under `route` opens sockets or reads a clock: time is a `u64` ms
//! parameter on the caller's monotonic clock and randomness is the caller's `Rng`. Planning,
//! probing and pools (the lead's later modules) build on these; the reactor and `conn` drive them.

pub mod budget;
pub mod health;
pub mod pool;
pub mod probe;
pub mod table;
