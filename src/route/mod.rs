//! Routes: one concrete way to reach one DC, (tier, endpoint, DC, media) — docs/design.md §4.
//!
//! Sans-IO policy: `table` (what the routes are), `health` (one route's state and cooldown
//! math), `budget` (a Worker's daily request budget), `pace` (handshake pacing per address),
//! `pool` (warm upstreams and the demand that sizes them), `quota` (Worker accounts: the daily
//! quota shared by an account's Workers), `reach` (the path to each address a
//! route dials, and whether the network as a whole is down), `outproxy` (the outbound proxy as
//! a dependency: up, or down and re-checked with backoff), `ladder` (every decision: plans,
//! observations, the probe schedule, pool policy), `dc_table` (a direct client's destination
//! address → DC: exact built-in, `--dc-addr` and learned entries), `tgranges` (Telegram's
//! published address ranges), `verdict` (whether Telegram is reachable at all: said once at
//! start when every route tried failed, and once when one works again), `edges` (the Cloudflare edge addresses `--cf-ip` dials) and `firewall` (transparent mode's nftables table, as text). Time
//! is a `u64` ms parameter on the caller's
//! monotonic clock. The I/O around it: `probe` (one probe's state machine over a socket) and
//! `prober` (the thin shell that runs the ladder's background work); `conn` and the reactor
//! drive them. `cflist` is the shared CF domain list's core; its fetch shell sits beside it
//! (`cflist/fetch.rs`) but is compiled as the reactor's `reactor::cflist`.

pub mod budget;
pub mod cflist;
pub mod dc_table;
pub mod edges;
pub mod firewall;
pub mod health;
pub mod ladder;
pub mod outproxy;
pub mod pace;
pub mod pool;
pub mod probe;
pub mod prober;
pub mod quota;
pub mod reach;
pub mod table;
pub mod tgranges;
pub mod verdict;
