//! Bounded anti-replay cache of the client randoms of accepted ClientHellos (docs/protocol.md
//! "Fake-TLS": a recorded hello sent again by a prober must not be answered as ours). All memory
//! is allocated in `new`; nothing allocates afterwards. Sans-IO: `now_ms` is passed in.
//!
//! Layout: a FIFO ring of entries (key, insertion time) in insertion order, and an open-addressing
//! index (linear probing, backward-shift deletion) of ring positions. The oldest entry is at the
//! ring's head, so expiry pops from the head and a full cache evicts the head.

/// Bytes of the client random used as the key: a 16-byte prefix. The random's first 28 bytes
/// are HMAC-SHA256 output (uniform, unforgeable without the key), so 16 bytes collide with
/// probability 2^-128 per pair and make a good hash without hashing. The prefix leaves out
/// bytes 28..32 (the XOR-ed timestamp), which a prober can change without breaking the digest:
/// such a copy is still the same entry.
pub const KEY_LEN: usize = 16;

/// Largest capacity (entries): 1048576, the `--replay-cache` bound. About 32 MB at this size
/// (a 24-byte entry and two 4-byte index slots each); the default 8192 (`--replay-cache`) takes 256 KiB.
pub const MAX_CAPACITY: usize = 1 << 20;

/// Bounded anti-replay cache of accepted client randoms.
///
/// `capacity` entries, FIFO eviction; an entry expires `ttl_ms` after its insertion (monotonic
/// ms) while expiry is on (see [`ReplayCache::set_expiring`]). The gate uses no ttl (0): a
/// recorded hello's timestamp can be moved without the key (`gate::Gate::new`), so the cache is
/// the only defence against it, and entries live until evicted by capacity. Capacity 0 turns the cache off (nothing is remembered: unsafe, replays
/// are answered). Lookup and insertion are O(1) expected.
pub struct ReplayCache {
    /// Ring of entries in insertion order, `len` live ones starting at `head`: the keys and
    /// their insertion times (ms) in two arrays of zeros, so the allocator hands out untouched
    /// zero pages (calloc / a fresh mmap) and only the entries used become resident.
    keys: Vec<[u8; KEY_LEN]>,
    at_ms: Vec<u64>,
    head: usize,
    len: usize,
    /// Open-addressing index: ring position + 1, 0 = empty. Power-of-two size ≥ 2 × capacity.
    index: Vec<u32>,
    ttl_ms: u64,
    expiring: bool,
    evicted_early: u64,
}

impl ReplayCache {
    /// `capacity` entries (flag --replay-cache, clamped to [`MAX_CAPACITY`]); entries older than
    /// `ttl_ms` expire (0 = never). Allocates everything now (zeroed: resident only as entries are used).
    pub fn new(capacity: usize, ttl_ms: u64) -> ReplayCache {
        let capacity = capacity.min(MAX_CAPACITY);
        let slots = if capacity == 0 {
            0
        } else {
            (capacity * 2).next_power_of_two()
        };
        ReplayCache {
            keys: vec![[0; KEY_LEN]; capacity],
            at_ms: vec![0; capacity],
            head: 0,
            len: 0,
            index: vec![0; slots],
            ttl_ms,
            expiring: true,
            evicted_early: 0,
        }
    }

    /// Turns expiry by ttl on or off (the gate: on only while the clock is trusted and the
    /// window is not 0). Entries inserted meanwhile keep their insertion time.
    pub fn set_expiring(&mut self, on: bool) {
        self.expiring = on;
    }

    /// True if `random` was accepted before (and has not expired); otherwise records it (a
    /// full cache first evicts its oldest entry, counted in [`ReplayCache::evicted_early`]).
    /// `now_ms`: monotonic ms, never decreasing between calls.
    pub fn check_and_insert(&mut self, random: &[u8; 32], now_ms: u64) -> bool {
        if self.keys.is_empty() {
            return false;
        }
        self.expire(now_ms);
        let mut key = [0u8; KEY_LEN];
        key.copy_from_slice(&random[..KEY_LEN]);
        if self.find(&key).is_some() {
            return true;
        }
        if self.len == self.keys.len() {
            self.pop_head();
            self.evicted_early += 1;
        }
        let pos = (self.head + self.len) % self.keys.len();
        self.keys[pos] = key;
        self.at_ms[pos] = now_ms;
        self.len += 1;
        let mut i = self.home(&key);
        while self.index[i] != 0 {
            i = (i + 1) & self.mask();
        }
        // ring positions are < MAX_CAPACITY, far below u32::MAX
        self.index[i] = pos as u32 + 1;
        false
    }

    /// Live entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entries the cache holds at most.
    pub fn capacity(&self) -> usize {
        self.keys.len()
    }

    /// Entries evicted (before their ttl, if any) because the cache was full (a stats counter).
    pub fn evicted_early(&self) -> u64 {
        self.evicted_early
    }

    /// Pops expired entries from the head.
    fn expire(&mut self, now_ms: u64) {
        if !self.expiring || self.ttl_ms == 0 {
            return;
        }
        while self.len > 0 && now_ms.saturating_sub(self.at_ms[self.head]) >= self.ttl_ms {
            self.pop_head();
        }
    }

    /// Removes the oldest entry from the ring and the index.
    fn pop_head(&mut self) {
        let key = self.keys[self.head];
        if let Some(slot) = self.find(&key) {
            self.remove_slot(slot);
        }
        self.head = (self.head + 1) % self.keys.len();
        self.len -= 1;
    }

    fn mask(&self) -> usize {
        self.index.len() - 1
    }

    fn home(&self, key: &[u8; KEY_LEN]) -> usize {
        u32::from_le_bytes([key[0], key[1], key[2], key[3]]) as usize & self.mask()
    }

    /// Index slot holding `key`.
    fn find(&self, key: &[u8; KEY_LEN]) -> Option<usize> {
        let mut i = self.home(key);
        loop {
            let v = self.index[i];
            if v == 0 {
                return None;
            }
            if self.keys[(v - 1) as usize] == *key {
                return Some(i);
            }
            i = (i + 1) & self.mask();
        }
    }

    /// Empties index slot `hole`, shifting later members of its probe run back (no tombstones).
    fn remove_slot(&mut self, mut hole: usize) {
        self.index[hole] = 0;
        let mut i = hole;
        loop {
            i = (i + 1) & self.mask();
            let v = self.index[i];
            if v == 0 {
                return;
            }
            let home = self.home(&self.keys[(v - 1) as usize]);
            // Move v into the hole unless its home lies cyclically in (hole, i].
            let dist_home = i.wrapping_sub(home) & self.mask();
            let dist_hole = i.wrapping_sub(hole) & self.mask();
            if dist_home >= dist_hole {
                self.index[hole] = v;
                self.index[i] = 0;
                hole = i;
            }
        }
    }
}
