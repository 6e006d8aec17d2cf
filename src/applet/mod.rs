//! Applets selected busybox-style: `run` (default), `probe`, `check`, `link`, `genkey`, `ctl`,
//! `firewall`.

pub mod check;
pub mod ctl;
pub mod firewall;
pub mod genkey;
pub mod link;
pub mod probe;
pub mod run;
