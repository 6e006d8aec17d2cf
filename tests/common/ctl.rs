//! The control socket from a test's side: a fresh socket path for `run --control-socket` and
//! `ctl status --json` parsed, so tests assert the proxy's state rather than its log wording.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use super::{run_bin, temp_dir, wait_until, Proxy};

/// A control socket for one proxy.
pub struct Ctl {
    sock: PathBuf,
}

impl Ctl {
    /// A fresh socket path in a fresh temp dir.
    pub fn new() -> Ctl {
        Ctl {
            sock: temp_dir().join("ctl.sock"),
        }
    }

    /// `--control-socket PATH`, for the proxy's command line.
    pub fn args(&self) -> [String; 2] {
        ["--control-socket".into(), self.sock.display().to_string()]
    }

    /// `ctl status --json` of `p`, parsed (panics with the proxy's log on failure).
    pub fn status(&self, p: &Proxy) -> serde_json::Value {
        let sock = self.sock.display().to_string();
        let r = run_bin(
            &["ctl", "status", "--json", "--control-socket", &sock],
            &[],
            Duration::from_secs(10),
        );
        assert_eq!(
            r.code,
            Some(0),
            "ctl status: {r:?}\nproxy log:\n{}",
            p.dump()
        );
        serde_json::from_str(&r.stdout)
            .unwrap_or_else(|e| panic!("status --json is not JSON: {e}\n{}", r.stdout))
    }

    /// Polls `ctl status --json` of `p` until `pred` holds for it (→ that status) or
    /// `timeout` passes (→ None). Each poll runs the `ctl` applet (a few ms).
    pub fn wait(
        &self,
        p: &Proxy,
        timeout: Duration,
        mut pred: impl FnMut(&serde_json::Value) -> bool,
    ) -> Option<serde_json::Value> {
        let mut found = None;
        wait_until(timeout, || {
            let s = self.status(p);
            found = pred(&s).then_some(s);
            found.is_some()
        });
        found
    }

    /// The route of `status` whose label starts with `prefix` (`ws:DC2`, `worker:DC2`…).
    pub fn route<'a>(status: &'a serde_json::Value, prefix: &str) -> &'a serde_json::Value {
        status["routes"]
            .as_array()
            .and_then(|rs| {
                rs.iter()
                    .find(|r| r["label"].as_str().is_some_and(|l| l.starts_with(prefix)))
            })
            .unwrap_or_else(|| panic!("no route {prefix} in {status}"))
    }
}
