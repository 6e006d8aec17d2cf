//! The bounded pool relay buffers take their memory from ([`BufPool`]): blocks of one size up
//! to a bound set at start, address space `mmap`ed in chunks as first needed, returned blocks
//! beyond a warm reserve given back to the OS with `madvise(MADV_DONTNEED)` (freeing 16 KiB heap
//! blocks does not lower RSS with glibc). The only `unsafe` of the relay path lives here: raw
//! block pointers into the mappings, each handed to one owner at a time. `RelayBuf` (the parent
//! module) is its only user.

use std::cell::RefCell;
use std::rc::Rc;

use super::HEADROOM;

/// The bounded pool of relay buffer blocks: blocks of one size up to a bound set at start,
/// handed out until none is left (then [`BufPool::take`] refuses; nothing grows). A block
/// returns itself when dropped. Returned blocks beyond `warm` are given back to the OS
/// (`madvise(MADV_DONTNEED)`: the next use starts from zeroed pages). Single-threaded (`Rc`):
/// one pool per reactor; clones are handles to the same pool.
#[derive(Clone)]
pub struct BufPool {
    inner: Rc<RefCell<PoolInner>>,
}

struct PoolInner {
    /// Reserved as blocks are first needed, [`CHUNK_BLOCKS`] blocks each (address space stays
    /// small on 32-bit targets even when the bound is large).
    chunks: Vec<Region>,
    /// Blocks at most, and blocks created so far.
    blocks: usize,
    made: usize,
    /// Usable bytes per block (headroom included).
    block_len: usize,
    /// Distance between blocks: `block_len` rounded up to whole pages.
    stride: usize,
    /// Free blocks whose pages may be resident (at most `warm`); handed out first, the last
    /// one returned first.
    warm_free: Vec<u32>,
    /// Free blocks whose pages were given back (`madvise`); handed out once no warm one is.
    cold_free: Vec<u32>,
    /// Free blocks kept resident at most.
    warm: usize,
}

/// Blocks per reserved chunk of address space (1 MiB at 16 KiB blocks).
pub(super) const CHUNK_BLOCKS: usize = 64;

impl BufPool {
    /// A pool of at most `blocks` blocks of `block_len` bytes (> [`HEADROOM`]), keeping at most
    /// `warm` returned blocks resident. Address space is reserved in chunks as blocks are first
    /// needed; no page is touched here.
    pub fn new(blocks: usize, block_len: usize, warm: usize) -> BufPool {
        let page = page_size();
        let block_len = block_len.max(HEADROOM + 1);
        let stride = block_len.div_ceil(page) * page;
        BufPool {
            inner: Rc::new(RefCell::new(PoolInner {
                chunks: Vec::new(),
                blocks: blocks.min(u32::MAX as usize),
                made: 0,
                block_len,
                stride,
                warm_free: Vec::new(),
                cold_free: Vec::new(),
                warm,
            })),
        }
    }

    /// Bytes per block (a pooled buffer's capacity is this minus [`HEADROOM`]).
    pub fn block_len(&self) -> usize {
        self.inner.borrow().block_len
    }

    /// Blocks not handed out.
    pub fn available(&self) -> usize {
        let p = self.inner.borrow();
        p.warm_free.len() + p.cold_free.len() + (p.blocks - p.made)
    }

    /// A free block, or `None` when every block is in use (or the OS refused more address
    /// space, which is treated the same way: no room).
    pub(super) fn take(&self) -> Option<Block> {
        let mut p = self.inner.borrow_mut();
        let index = match p.warm_free.pop().or_else(|| p.cold_free.pop()) {
            Some(i) => i,
            None => p.make()?,
        };
        let ptr = p.ptr(index);
        Some(Block {
            pool: self.inner.clone(),
            index,
            ptr,
            len: p.block_len,
        })
    }
}

impl PoolInner {
    /// A new block index (reserving a chunk when the last one is used up), if below the bound.
    fn make(&mut self) -> Option<u32> {
        if self.made >= self.blocks {
            return None;
        }
        if self.made == self.chunks.len() * CHUNK_BLOCKS {
            let n = CHUNK_BLOCKS.min(self.blocks - self.made);
            self.chunks.push(Region::reserve(n * self.stride).ok()?);
        }
        let index = self.made as u32;
        self.made += 1;
        Some(index)
    }

    fn ptr(&self, index: u32) -> *mut u8 {
        let i = index as usize;
        self.chunks[i / CHUNK_BLOCKS].at((i % CHUNK_BLOCKS) * self.stride)
    }

    /// A returned block (its pages touched): kept warm while fewer than `warm` are, else its
    /// pages go back to the OS.
    fn put(&mut self, index: u32) {
        if self.warm_free.len() < self.warm {
            self.warm_free.push(index);
        } else {
            let i = index as usize;
            let off = (i % CHUNK_BLOCKS) * self.stride;
            self.chunks[i / CHUNK_BLOCKS].discard(off, self.stride);
            self.cold_free.push(index);
        }
    }
}

/// One block of a [`BufPool`], exclusively owned; returns to the pool when dropped.
pub(super) struct Block {
    pool: Rc<RefCell<PoolInner>>,
    index: u32,
    ptr: *mut u8,
    pub(super) len: usize,
}

impl Block {
    pub(super) fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr..ptr + len` lies inside the pool's mapping, which lives as long as the
        // `Rc` this block holds, and no other block covers it (indexes are handed out once).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub(super) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        self.pool.borrow_mut().put(self.index);
    }
}

/// An anonymous private mapping reserved once (`MAP_NORESERVE`: pages cost memory only once
/// touched).
struct Region {
    ptr: *mut u8,
    len: usize,
}

impl Region {
    fn reserve(len: usize) -> std::io::Result<Region> {
        // SAFETY: a fresh anonymous mapping; no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Region {
            ptr: ptr.cast(),
            len,
        })
    }

    fn at(&self, off: usize) -> *mut u8 {
        debug_assert!(off < self.len);
        // SAFETY: `off` is inside the mapping (block index within the chunk).
        unsafe { self.ptr.add(off) }
    }

    /// Gives the pages of `[off, off + len)` back to the OS; they read as zeros afterwards.
    fn discard(&self, off: usize, len: usize) {
        // SAFETY: page-aligned range inside the mapping, owned by a free block (no references).
        unsafe {
            libc::madvise(self.ptr.add(off).cast(), len, libc::MADV_DONTNEED);
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: our mapping; every block holds an `Rc` to the pool, so none is alive here.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}
