//! [`SpanAlloc`]: the process allocator of the static musl builds, which gives freed memory back
//! to the OS. The libc those builds link (zig's) keeps every freed block below 64 KiB in its free
//! lists for good, so after a burst of sessions the process keeps its peak RSS
//! (BENCHMARKS.md "Memory returned after a burst"; the analysis: bench/history/, "Issue 19: memory
//! returned"); glibc keeps it too but has `malloc_trim`
//! (`mem::release`), so glibc builds keep the system allocator.
//!
//! Layout: small blocks (≤ [`MAX_SMALL`] bytes, alignment ≤ 64) live in 64 KiB spans, each span
//! holding blocks of one size class ([`CLASSES`]); a span's header sits at its 64 KiB-aligned
//! start, so a block finds its span by masking its address. A span that becomes empty is kept
//! for reuse while fewer than [`KEEP_EMPTY`] are, otherwise unmapped at once; larger blocks are
//! mapped on their own (whole pages, `mremap` to resize) and unmapped when freed, apart from a
//! small cache of the most recently freed ones ([`LARGE_CACHE`]; the oldest make room).
//! [`SpanAlloc::release`] unmaps the kept spans and the cache: the reactor calls it
//! (`mem::release`) when a burst has ended (`mem::trim`).
//! A span with one live block stays mapped whole; the allocator reuses the oldest spans first
//! so long-lived blocks gather in few spans. Alignment above a page goes to the system
//! allocator. One lock: `run` has one thread, the `probe` applet a few.
//!
//! All `unsafe` here is raw memory management: spans and blocks are memory this allocator
//! mapped and owns until unmapped; a block is handed to one owner at a time.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Bytes per span (and its alignment): a multiple of every page size Linux uses.
pub const SPAN: usize = 64 * 1024;
/// Room for the span header at the span's start; blocks start here (a multiple of 64, so a
/// class that is a multiple of an alignment ≤ 64 gives aligned blocks).
const HEADER: usize = 64;
/// Largest small block, bytes; larger ones are mapped on their own.
pub const MAX_SMALL: usize = 4096;
/// Largest alignment of a small block.
const MAX_SMALL_ALIGN: usize = 64;
/// Block sizes of the small classes (multiples of 16; from 192 on, of 64 but for 224).
pub const CLASSES: [usize; 28] = [
    16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024,
    1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096,
];
/// Empty spans kept mapped for reuse at most (256 KiB); more are unmapped at once.
pub const KEEP_EMPTY: usize = 4;
/// Freed large mappings kept for reuse: this many bytes at most, in at most
/// [`LARGE_CACHE_SLOTS`] mappings.
pub const LARGE_CACHE: usize = 256 * 1024;
const LARGE_CACHE_SLOTS: usize = 16;

/// A span's header, at its start.
#[repr(C)]
struct Span {
    /// Links in its class's list of spans with room, or in the list of empty spans.
    next: *mut Span,
    prev: *mut Span,
    /// Freed blocks: each holds the address of the next in its first word.
    free: *mut u8,
    class: u8,
    /// In its class's list (it has room).
    listed: bool,
    /// Blocks handed out now; blocks ever handed out (the rest were never touched); blocks
    /// the span holds.
    used: u16,
    bump: u16,
    cap: u16,
}

struct Inner {
    /// Per class: spans with room, oldest first.
    head: [*mut Span; CLASSES.len()],
    tail: [*mut Span; CLASSES.len()],
    /// Empty spans kept for reuse (linked by `next`).
    empty: *mut Span,
    empty_len: usize,
    /// Freed large mappings kept for reuse: (address, length), oldest first.
    cache: [(*mut u8, usize); LARGE_CACHE_SLOTS],
    cache_len: usize,
    cache_bytes: usize,
    /// Bytes mapped now: spans (kept ones included) and large blocks (cached ones included).
    mapped: usize,
    /// Mappings made so far (spans and large blocks; `mremap` not counted).
    maps: u64,
}

// SAFETY: the raw pointers are to memory owned by the allocator; `Inner` is only reached
// through the `Mutex`.
unsafe impl Send for Inner {}

/// The allocator; see the module header. `const`-constructible for a `#[global_allocator]`.
pub struct SpanAlloc {
    inner: Mutex<Inner>,
}

/// Where a layout's blocks come from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Small(usize),
    Large,
    System,
}

impl Kind {
    fn of(layout: Layout) -> Kind {
        let (size, align) = (layout.size(), layout.align());
        if size <= MAX_SMALL && align <= MAX_SMALL_ALIGN {
            if let Some(c) = CLASSES.iter().position(|&c| c >= size && c % align == 0) {
                return Kind::Small(c);
            }
        }
        if align <= page_size() {
            Kind::Large
        } else {
            Kind::System
        }
    }
}

impl Default for SpanAlloc {
    fn default() -> Self {
        SpanAlloc::new()
    }
}

impl SpanAlloc {
    /// An allocator that has mapped nothing yet.
    pub const fn new() -> SpanAlloc {
        SpanAlloc {
            inner: Mutex::new(Inner {
                head: [null_mut(); CLASSES.len()],
                tail: [null_mut(); CLASSES.len()],
                empty: null_mut(),
                empty_len: 0,
                cache: [(null_mut(), 0); LARGE_CACHE_SLOTS],
                cache_len: 0,
                cache_bytes: 0,
                mapped: 0,
                maps: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Nothing panics while the lock is held; a poisoned lock is still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Unmaps the kept empty spans and the cached large mappings: what a burst left mapped
    /// but unused goes back to the OS. Spans with live blocks stay.
    pub fn release(&self) {
        let mut g = self.lock();
        while !g.empty.is_null() {
            let s = g.empty;
            // SAFETY: a kept span is mapped and unused; its header is valid.
            g.empty = unsafe { (*s).next };
            g.empty_len -= 1;
            unmap(s.cast(), SPAN);
            g.mapped -= SPAN;
        }
        for i in 0..g.cache_len {
            let (p, len) = g.cache[i];
            unmap(p, len);
            g.mapped -= len;
        }
        g.cache_len = 0;
        g.cache_bytes = 0;
    }

    /// Bytes this allocator has mapped now (live, kept and cached).
    pub fn mapped(&self) -> usize {
        self.lock().mapped
    }

    /// Mappings this allocator has made since it started (each an `mmap` system call).
    pub fn maps(&self) -> u64 {
        self.lock().maps
    }

    fn small_alloc(&self, c: usize) -> *mut u8 {
        let mut g = self.lock();
        let mut s = g.head[c];
        if s.is_null() {
            s = g.new_span(c);
            if s.is_null() {
                return null_mut();
            }
        }
        // SAFETY: `s` is a listed span of class `c` (it has room); its header is valid and a
        // freed block or a never-used slot below `cap` exists. Fields are reached through the
        // raw pointer only (the list code writes them too).
        unsafe {
            let p = if !(*s).free.is_null() {
                let p = (*s).free;
                (*s).free = p.cast::<*mut u8>().read();
                p
            } else {
                let p = s.cast::<u8>().add(HEADER + (*s).bump as usize * CLASSES[c]);
                (*s).bump += 1;
                p
            };
            (*s).used += 1;
            if (*s).used == (*s).cap {
                g.unlink(c, s);
            }
            p
        }
    }

    /// # Safety
    /// `p` is a block of class `c` handed out by this allocator and not freed since.
    unsafe fn small_free(&self, p: *mut u8, c: usize) {
        let s = (p as usize & !(SPAN - 1)) as *mut Span;
        let mut g = self.lock();
        // A free that breaks the contract (another class: not where the block came from; a
        // span without live blocks, or the block freed last again: a double free) would
        // corrupt the free list and hand one block to two owners. Abort at once: a panic
        // here would allocate while this lock is held.
        if (*s).class as usize != c || (*s).used == 0 || (*s).free == p {
            std::process::abort();
        }
        p.cast::<*mut u8>().write((*s).free);
        (*s).free = p;
        (*s).used -= 1;
        if (*s).used == 0 {
            if (*s).listed {
                g.unlink(c, s);
            }
            g.retire(s);
        } else if !(*s).listed {
            g.push_tail(c, s);
        }
    }

    fn large_alloc(&self, size: usize, zeroed: bool) -> *mut u8 {
        let len = round_pages(size);
        if !zeroed {
            let mut g = self.lock();
            // The most recently freed mapping of this length (its pages are the warmest).
            if let Some(i) = (0..g.cache_len).rev().find(|&i| g.cache[i].1 == len) {
                let p = g.cache[i].0;
                g.uncache(i);
                return p;
            }
        }
        let p = map(len);
        if !p.is_null() {
            let mut g = self.lock();
            g.mapped += len;
            g.maps += 1;
        }
        p
    }

    /// Caches a freed large mapping, unmapping the oldest cached ones to make room (a size
    /// in steady use stays cached whatever was freed before it); one larger than the whole
    /// cache is unmapped at once.
    fn large_free(&self, p: *mut u8, size: usize) {
        let len = round_pages(size);
        let mut g = self.lock();
        if len > LARGE_CACHE {
            unmap(p, len);
            g.mapped -= len;
            return;
        }
        while g.cache_len == LARGE_CACHE_SLOTS || g.cache_bytes + len > LARGE_CACHE {
            let (old, old_len) = g.cache[0];
            g.uncache(0);
            unmap(old, old_len);
            g.mapped -= old_len;
        }
        let n = g.cache_len;
        g.cache[n] = (p, len);
        g.cache_len += 1;
        g.cache_bytes += len;
    }
}

impl Inner {
    /// Takes cache entry `i` out, keeping the others oldest first.
    fn uncache(&mut self, i: usize) {
        let len = self.cache[i].1;
        self.cache.copy_within(i + 1..self.cache_len, i);
        self.cache_len -= 1;
        self.cache_bytes -= len;
    }

    /// A span for class `c` (a kept empty one, else a new mapping), listed; null when the OS
    /// refuses memory.
    fn new_span(&mut self, c: usize) -> *mut Span {
        let s = if self.empty.is_null() {
            let s = map_span();
            if s.is_null() {
                return s;
            }
            self.mapped += SPAN;
            self.maps += 1;
            s
        } else {
            let s = self.empty;
            // SAFETY: a kept span's header is valid.
            self.empty = unsafe { (*s).next };
            self.empty_len -= 1;
            s
        };
        // SAFETY: `s` is a mapped span nobody uses; the header fits in front of the blocks.
        unsafe {
            s.write(Span {
                next: null_mut(),
                prev: null_mut(),
                free: null_mut(),
                class: c as u8,
                listed: false,
                used: 0,
                bump: 0,
                cap: ((SPAN - HEADER) / CLASSES[c]) as u16,
            });
        }
        self.push_tail(c, s);
        s
    }

    /// Appends span `s` to class `c`'s list of spans with room.
    fn push_tail(&mut self, c: usize, s: *mut Span) {
        // SAFETY: `s` and the list's spans are mapped spans with valid headers.
        unsafe {
            (*s).next = null_mut();
            (*s).prev = self.tail[c];
            (*s).listed = true;
            match self.tail[c].is_null() {
                true => self.head[c] = s,
                false => (*self.tail[c]).next = s,
            }
        }
        self.tail[c] = s;
    }

    /// Takes span `s` out of class `c`'s list.
    fn unlink(&mut self, c: usize, s: *mut Span) {
        // SAFETY: `s` is listed in class `c`'s list; its neighbours are valid spans.
        unsafe {
            let (prev, next) = ((*s).prev, (*s).next);
            match prev.is_null() {
                true => self.head[c] = next,
                false => (*prev).next = next,
            }
            match next.is_null() {
                true => self.tail[c] = prev,
                false => (*next).prev = prev,
            }
            (*s).listed = false;
        }
    }

    /// An empty span: kept for reuse while fewer than [`KEEP_EMPTY`] are, else unmapped.
    fn retire(&mut self, s: *mut Span) {
        if self.empty_len < KEEP_EMPTY {
            // SAFETY: `s` is an unlisted mapped span.
            unsafe { (*s).next = self.empty };
            self.empty = s;
            self.empty_len += 1;
        } else {
            unmap(s.cast(), SPAN);
            self.mapped -= SPAN;
        }
    }
}

// SAFETY: blocks come from mappings this allocator owns (or from `System` for the layouts it
// hands there, decided by the layout alone, so a block is always freed where it came from);
// small blocks are aligned by their class, large ones by the page.
unsafe impl GlobalAlloc for SpanAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match Kind::of(layout) {
            Kind::Small(c) => self.small_alloc(c),
            Kind::Large => self.large_alloc(layout.size(), false),
            Kind::System => System.alloc(layout),
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match Kind::of(layout) {
            Kind::Small(c) => {
                let p = self.small_alloc(c);
                if !p.is_null() {
                    p.write_bytes(0, layout.size());
                }
                p
            }
            // A fresh mapping reads as zeros, untouched pages cost no RSS.
            Kind::Large => self.large_alloc(layout.size(), true),
            Kind::System => System.alloc_zeroed(layout),
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        match Kind::of(layout) {
            Kind::Small(c) => self.small_free(p, c),
            Kind::Large => self.large_free(p, layout.size()),
            Kind::System => System.dealloc(p, layout),
        }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = Layout::from_size_align_unchecked(new_size, layout.align());
        match (Kind::of(layout), Kind::of(new)) {
            (Kind::Small(a), Kind::Small(b)) if a == b => p,
            (Kind::Large, Kind::Large) => {
                let (old_len, new_len) = (round_pages(layout.size()), round_pages(new_size));
                if old_len == new_len {
                    return p;
                }
                let q = libc::mremap(p.cast(), old_len, new_len, libc::MREMAP_MAYMOVE);
                if q == libc::MAP_FAILED {
                    return null_mut();
                }
                let mut g = self.lock();
                g.mapped = g.mapped - old_len + new_len;
                q.cast()
            }
            (Kind::System, Kind::System) => System.realloc(p, layout, new_size),
            _ => {
                let q = self.alloc(new);
                if !q.is_null() {
                    q.copy_from_nonoverlapping(p, layout.size().min(new_size));
                    self.dealloc(p, layout);
                }
                q
            }
        }
    }
}

/// The OS page size (`sysconf`, read once; 4096 if it fails).
fn page_size() -> usize {
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    match PAGE.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: sysconf has no preconditions.
            let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            let n = if n > 0 { n as usize } else { 4096 };
            PAGE.store(n, Ordering::Relaxed);
            n
        }
        n => n,
    }
}

fn round_pages(n: usize) -> usize {
    let page = page_size();
    n.div_ceil(page) * page
}

/// A fresh private anonymous mapping of `len` bytes, null when refused.
fn map(len: usize) -> *mut u8 {
    // SAFETY: a new mapping; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        null_mut()
    } else {
        p.cast()
    }
}

fn unmap(p: *mut u8, len: usize) {
    // SAFETY: `p..p + len` is a whole mapping (or span) of ours that nothing uses any more.
    unsafe {
        libc::munmap(p.cast(), len);
    }
}

/// A new span: [`SPAN`] bytes at a [`SPAN`]-aligned address (twice that mapped, the
/// unaligned head and tail unmapped again), null when refused.
fn map_span() -> *mut Span {
    let p = map(2 * SPAN);
    if p.is_null() {
        return null_mut();
    }
    let start = p as usize;
    let aligned = (start + SPAN - 1) & !(SPAN - 1);
    if aligned > start {
        unmap(p, aligned - start);
    }
    let tail = start + 2 * SPAN - (aligned + SPAN);
    if tail > 0 {
        unmap((aligned + SPAN) as *mut u8, tail);
    }
    aligned as *mut Span
}

#[cfg(test)]
#[path = "alloc_tests.rs"]
mod tests;
