//! Applets selected busybox-style: `run` (default), `probe`, `check`, `link`, `genkey`, `ctl`.

pub mod check;
pub mod ctl;
pub mod genkey;
pub mod link;
pub mod probe;
pub mod run;
