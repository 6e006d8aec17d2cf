//! Reload of the running configuration (SIGHUP, `ctl reload`): placeholder until the reload
//! work lands; it refuses every reload.

use super::Reactor;

impl Reactor {
    /// Re-reads the configuration and applies it to new sessions. Ok: a one-line summary of what
    /// changed; Err: why the new configuration was refused (the running one stays).
    #[allow(dead_code)]
    pub(super) fn reload(&mut self) -> Result<String, String> {
        Err("reload is not implemented yet".into())
    }
}
