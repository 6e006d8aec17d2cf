//! Applets selected busybox-style: `run` (default), `probe`, `check`, `link`, `genkey`.

pub mod check;
pub mod genkey;
pub mod link;
pub mod probe;
pub mod run;
