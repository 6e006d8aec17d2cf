//! Memory the process gives back to the OS once a burst of sessions has ended (issue 19 §5;
//! docs/design.md §5 "Memory after a burst").
//!
//! Session memory that is ours is bounded and returned where it is used (relay and mask
//! buffers: `buf::BufPool`); what the TLS library and the session state allocate goes through
//! the process allocator, and freed blocks stay with it. [`release`] hands them back: glibc's
//! `malloc_trim(0)` (whole free pages anywhere in its heaps); on musl builds the process
//! allocator is [`alloc::SpanAlloc`] (installed here), which unmaps empty spans and large blocks
//! as they are freed and the few it keeps on [`release`]. [`trim::Trim`] decides when: after a
//! burst ended, `--mem-trim-delay` later, never on the sessions' paths. The reactor is the only
//! caller.

pub mod alloc;
pub mod trim;

/// The process allocator of static musl builds: the libc's keeps every freed small block.
#[cfg(target_env = "musl")]
#[global_allocator]
static GLOBAL: alloc::SpanAlloc = alloc::SpanAlloc::new();

/// Gives memory that is free but still mapped back to the OS (see the module header). Costs a
/// walk of the allocator's free memory; call it rarely ([`trim::Trim`]).
pub fn release() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim has no preconditions; it only returns free pages to the OS.
    unsafe {
        libc::malloc_trim(0);
    }
    #[cfg(target_env = "musl")]
    GLOBAL.release();
}
