//! Counting waits on the proxy's session records (`TG_EVENTS` `session` events): for tests
//! that need "exactly N sessions ended like this" rather than the first one.
#![allow(dead_code)]

use std::time::Duration;

use super::{wait_until, Proxy};

impl Proxy {
    /// The `session` events so far that satisfy `pred`.
    pub fn sessions_where(
        &self,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> Vec<serde_json::Value> {
        self.sessions().into_iter().filter(|e| pred(e)).collect()
    }

    /// Waits until at least `n` `session` events satisfy `pred` (→ all that do, maybe more
    /// than `n`; fewer after `timeout`).
    pub fn wait_sessions(
        &self,
        n: usize,
        timeout: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> Vec<serde_json::Value> {
        let mut found = Vec::new();
        wait_until(timeout, || {
            found = self.sessions_where(&pred);
            found.len() >= n
        });
        found
    }
}
