//! Applets selected busybox-style: `run` (default), `probe`, `link`, `genkey`.

pub mod genkey;
pub mod link;
pub mod probe;
pub mod run;
