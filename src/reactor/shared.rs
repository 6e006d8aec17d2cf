//! The state every session borrows ([`Shared`]) and the two views of it the loop hands out:
//! a session's [`Ctx`] and the background shell (`route::prober::Shell`) with the ladder it
//! serves. Owned by the reactor (`reactor/mod.rs`), which fills it at start and on reload
//! (`reload`); nothing here does I/O. Holds the outbound setting in force
//! ([`Shared::activate_outbound`], [`Shared::resolve_outbound_proxy`]) and hands it to every
//! dial through both views and to the ladder's copy.

use std::net::SocketAddr;
use std::sync::Arc;

use mio::Registry;

use crate::config::Config;
use crate::conn::mask::MaskConns;
use crate::conn::per_ip::PerIp;
use crate::conn::{Ctx, TimerEv};
use crate::dns::Resolver;
use crate::error::CloseReason;
use crate::logging::{Folds, RateLimited};
use crate::mtproto::faketls::gate::{EeKey, Gate};
use crate::net::dial::Upstream;
use crate::net::outbound::{self, Active, OutboundProxy};
use crate::relay::Scratch;
use crate::rng::Rng;
use crate::route::dc_table::{DcTable, UnknownDsts};
use crate::route::ladder::Ladder;
use crate::route::prober::{Prober, Shell, SuspendWatch};
use crate::route::tgranges::TgRanges;
use crate::stats::Stats;
use crate::timer::Wheel;

/// Everything a session borrows through [`Ctx`].
pub(super) struct Shared {
    pub(super) cfg: Config,
    pub(super) keys: Vec<[u8; 16]>,
    pub(super) wheel: Wheel<TimerEv>,
    pub(super) rng: Rng,
    pub(super) tls: Arc<rustls::ClientConfig>,
    pub(super) stats: Stats,
    pub(super) bad_log: RateLimited,
    pub(super) attempt_log: Folds,
    pub(super) client_log: Folds,
    pub(super) listen: SocketAddr,
    pub(super) ladder: Ladder<Upstream>,
    pub(super) prober: Prober,
    pub(super) dns: Resolver,
    /// The outbound setting in force (`--outbound-proxy`), set by `reload::apply` and when the
    /// proxy's name resolves ([`Shared::resolve_outbound_proxy`]); the ladder holds a copy.
    pub(super) outbound: Active,
    pub(super) watch: SuspendWatch,
    /// The relay's one large buffer (`relay::Scratch`).
    pub(super) scratch: Scratch,
    /// Folds close lines of sessions that never reached an upstream (`Ctx::unserved_log`).
    pub(super) unserved_log: [RateLimited; CloseReason::ALL.len()],
    /// Per-client-address limits (`conn::per_ip`), sized to the slab.
    pub(super) per_ip: PerIp,
    /// Local addresses of live mask connections (`conn::mask`).
    pub(super) mask_conns: MaskConns,
    /// Unix seconds, read once per loop iteration while [`Shared::wall_clock`] (`Ctx::wall_s`).
    pub(super) wall_s: u64,
    /// Whether anything signs or checks fake-TLS timestamps: an `ee` secret of ours (the gate)
    /// or an `ee` upstream proxy (a dial's hello). Set by `reload::apply`.
    pub(super) wall_clock: bool,
    /// The fake-TLS gate (`Ctx::gate`).
    pub(super) gate: Gate,
    /// The `ee` secrets (`Ctx::ee_keys`).
    pub(super) ee_keys: Vec<EeKey>,
    /// Exact address → DC for direct clients (`Ctx::dc_table`); `--dc-addr` set by
    /// `reload::apply`, the learner kept across reloads.
    pub(super) dc_table: DcTable,
    /// Destinations that found no DC (`Ctx::unknown_dsts`).
    pub(super) unknown_dsts: UnknownDsts,
    /// Telegram's ranges in force: the transparent guard's (`ways`) and the firewall sets'
    /// (`--tg-ranges`, else the refreshed cache, else built in): set at start and on a reload
    /// that changes their source, replaced when a refresh is accepted (`reactor::tgranges`).
    pub(super) tg_ranges: TgRanges,
}

impl Shared {
    /// The background shell over this state, and the ladder it serves.
    pub(super) fn shell<'a>(
        &'a mut self,
        registry: &'a Registry,
    ) -> (Shell<'a>, &'a mut Ladder<Upstream>) {
        let shell = Shell {
            prober: &mut self.prober,
            registry,
            dns: &mut self.dns,
            outbound: self.outbound.as_deref(),
            stats: &mut self.stats,
            watch: &mut self.watch,
        };
        (shell, &mut self.ladder)
    }

    pub(super) fn ctx<'a>(&'a mut self, registry: &'a Registry, now: u64) -> Ctx<'a> {
        Ctx {
            now,
            cfg: &self.cfg,
            keys: &self.keys,
            registry,
            wheel: &mut self.wheel,
            rng: &mut self.rng,
            tls: &self.tls,
            stats: &mut self.stats,
            bad_log: &mut self.bad_log,
            listen: self.listen,
            ladder: &mut self.ladder,
            prober: &mut self.prober,
            dns: &mut self.dns,
            outbound: self.outbound.as_deref(),
            attempt_log: &mut self.attempt_log,
            client_log: &mut self.client_log,
            scratch: &mut self.scratch,
            unserved_log: &mut self.unserved_log,
            per_ip: &mut self.per_ip,
            mask_conns: &mut self.mask_conns,
            wall_s: self.wall_s,
            gate: &mut self.gate,
            ee_keys: &self.ee_keys,
            dc_table: &mut self.dc_table,
            unknown_dsts: &mut self.unknown_dsts,
        }
    }

    /// Makes `proxy` with the bypass items `no_proxy_for` the outbound setting of later dials,
    /// here and in the ladder (start and reload: `reload::apply`).
    pub(super) fn activate_outbound(
        &mut self,
        proxy: Option<&OutboundProxy>,
        no_proxy_for: &[String],
    ) {
        if outbound::activate(&mut self.outbound, proxy, no_proxy_for) {
            self.ladder.set_outbound(self.outbound.clone());
        }
        self.resolve_outbound_proxy();
    }

    /// An outbound proxy given by name takes the resolver's latest answer for it (no I/O).
    pub(super) fn resolve_outbound_proxy(&mut self) {
        let dns = &self.dns;
        if outbound::resolve_proxy(&mut self.outbound, |h| dns.cached(h)) {
            self.ladder.set_outbound(self.outbound.clone());
        }
    }
}
