//! The fake-TLS record layer after the handshake (docs/protocol.md §2.3): unwrapping the
//! client's records in place ([`RecordReader`]) and framing our bytes as application_data
//! records ([`RecordWriter`]).
//!
//! Sans-IO and allocation-free: the reader works on the bytes the caller just read, the writer
//! only says which header bytes go in front of which payload; the socket calls are
//! `net::faketls_stream::FakeTlsStream`'s. Records may be split at any byte across reads. After
//! the handshake the client sends application_data (`0x17`) records carrying the obfuscated2
//! stream and may send change_cipher_spec (`0x14`) records, which are skipped; anything else (an
//! alert, a handshake record, an empty or oversized application_data record, more than
//! `MAX_CCS_RUN` change_cipher_spec records in a row) ends the stream with a [`RecordError`].
//! Nothing here knows about sessions or secrets.

use std::fmt;

use super::{CT_APPDATA, CT_CCS, MAX_PAYLOAD, MAX_RECORD_IN, RECORD_HEADER};

/// The record version we write (TLS 1.2 on the wire, as TLS 1.3 records carry: RFC 8446 §5.1).
const VERSION: [u8; 2] = [0x03, 0x03];

/// Why the client's record stream is not one we relay (Display: a short lowercase phrase).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// A record type other than application_data or change_cipher_spec (the type byte).
    UnexpectedType(u8),
    /// The record version's major byte is not 3 (the two version bytes).
    BadVersion(u8, u8),
    /// A record announcing more than [`MAX_RECORD_IN`] bytes (the announced length).
    TooLong(usize),
    /// An application_data record of length 0.
    Empty,
    /// More than [`MAX_CCS_RUN`] change_cipher_spec records with no application_data record
    /// between them.
    CcsFlood,
}

/// Most change_cipher_spec records in a row (no application_data record between them) that
/// are skipped; one more ends the stream. A client sends one, after its hello; the bound keeps
/// records that carry no payload from holding the reactor in one read loop (each read of
/// `net::faketls_stream::FakeTls` goes on until it finds payload or the socket is drained).
pub const MAX_CCS_RUN: usize = 8;

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::UnexpectedType(t) => write!(f, "unexpected record type {t:#04x}"),
            RecordError::BadVersion(a, b) => write!(f, "bad record version {a:02x} {b:02x}"),
            RecordError::TooLong(n) => {
                write!(
                    f,
                    "record of {n} bytes is over the {MAX_RECORD_IN}-byte limit"
                )
            }
            RecordError::Empty => f.write_str("empty application data record"),
            RecordError::CcsFlood => write!(
                f,
                "more than {MAX_CCS_RUN} change_cipher_spec records in a row"
            ),
        }
    }
}

impl std::error::Error for RecordError {}

/// Unwraps incoming records in place, streamed: keeps the partial header and what is left of
/// the current record between calls.
///
/// After the first error every call returns that error again.
#[derive(Debug, Default)]
pub struct RecordReader {
    /// Header bytes of the next record collected so far (`0..RECORD_HEADER`).
    header: [u8; RECORD_HEADER],
    header_len: usize,
    /// Payload bytes of the current record not yet seen.
    left: usize,
    /// The current record is change_cipher_spec: its payload is dropped.
    skipping: bool,
    /// change_cipher_spec records since the last application_data record.
    ccs_run: usize,
    failed: Option<RecordError>,
}

impl RecordReader {
    /// A reader at a record boundary.
    pub fn new() -> RecordReader {
        RecordReader::default()
    }

    /// `buf[..n]` holds raw bytes just read from the client (`n ≤ buf.len()`); moves the
    /// application_data payload among them to the front of `buf` and returns how many bytes
    /// that is (0 when they were only headers or change_cipher_spec bytes).
    ///
    /// Errors: a record of another type, a version whose major byte is not 3, an
    /// application_data record of length 0, a record longer than [`MAX_RECORD_IN`], or more
    /// than [`MAX_CCS_RUN`] change_cipher_spec records in a row. The
    /// payload before the bad header is lost with the stream.
    pub fn unwrap_in_place(&mut self, buf: &mut [u8], n: usize) -> Result<usize, RecordError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let n = n.min(buf.len());
        let (mut read, mut kept) = (0, 0);
        while read < n {
            if self.left == 0 {
                let take = (RECORD_HEADER - self.header_len).min(n - read);
                self.header[self.header_len..self.header_len + take]
                    .copy_from_slice(&buf[read..read + take]);
                self.header_len += take;
                read += take;
                if self.header_len < RECORD_HEADER {
                    break;
                }
                self.header_len = 0;
                if let Err(e) = self.start_record() {
                    self.failed = Some(e);
                    return Err(e);
                }
                continue;
            }
            let take = self.left.min(n - read);
            if !self.skipping {
                buf.copy_within(read..read + take, kept);
                kept += take;
            }
            read += take;
            self.left -= take;
        }
        Ok(kept)
    }

    /// True between records (no partial header, nothing left of a record).
    pub fn at_boundary(&self) -> bool {
        self.left == 0 && self.header_len == 0
    }

    /// Checks a complete header and starts its record.
    fn start_record(&mut self) -> Result<(), RecordError> {
        let [kind, major, minor, hi, lo] = self.header;
        let len = usize::from(u16::from_be_bytes([hi, lo]));
        if kind != CT_APPDATA && kind != CT_CCS {
            return Err(RecordError::UnexpectedType(kind));
        }
        if major != 0x03 {
            return Err(RecordError::BadVersion(major, minor));
        }
        if len > MAX_RECORD_IN {
            return Err(RecordError::TooLong(len));
        }
        if kind == CT_APPDATA && len == 0 {
            return Err(RecordError::Empty);
        }
        if kind == CT_CCS {
            self.ccs_run += 1;
            if self.ccs_run > MAX_CCS_RUN {
                return Err(RecordError::CcsFlood);
            }
        } else {
            self.ccs_run = 0;
        }
        self.left = len;
        self.skipping = kind == CT_CCS;
        Ok(())
    }
}

/// Whole records one write may carry: [`RecordWriter::batch`] plans the current record and up
/// to `BATCH - 1` more (`2 × BATCH` slices for one `write_vectored`), so a 64 KiB offer leaves
/// in one call, as plain bytes do.
pub const BATCH: usize = 4;

/// Frames outgoing bytes as application_data records of at most [`MAX_PAYLOAD`] bytes: decides
/// each record's length from the bytes offered when it starts, and keeps its header until the
/// header is written (a header partly written is backlog). May plan up to [`BATCH`] records for
/// one write; the headers of the records after the current one are kept in fixed storage here
/// until the write's outcome is known. Allocation-free.
#[derive(Debug, Default)]
pub struct RecordWriter {
    header: [u8; RECORD_HEADER],
    /// Header bytes of the current record written so far (`RECORD_HEADER` once all are).
    header_sent: usize,
    /// Payload bytes of the current record not yet written.
    left: usize,
    /// Headers of the records planned after the current one by the last
    /// [`RecordWriter::batch`] (none of their bytes on the wire yet); `more_len` of them.
    more: [[u8; RECORD_HEADER]; BATCH - 1],
    more_len: usize,
}

/// The records [`RecordWriter::batch`] planned for one write: for each, the header bytes to
/// send and how many payload bytes follow it, in wire order.
pub struct Batch<'a> {
    first: (&'a [u8], usize),
    more: &'a [[u8; RECORD_HEADER]],
}

impl<'a> Batch<'a> {
    /// `(header bytes, payload length)` of each planned record, the current one first (its
    /// header bytes may be fewer than [`RECORD_HEADER`], or none).
    pub fn records(&self) -> impl Iterator<Item = (&'a [u8], usize)> + 'a {
        let more = self.more;
        std::iter::once(self.first).chain(more.iter().map(|h| (&h[..], header_len(h))))
    }
}

/// The payload length an application_data header announces.
fn header_len(h: &[u8; RECORD_HEADER]) -> usize {
    usize::from(u16::from_be_bytes([h[3], h[4]]))
}

/// An application_data header for `len` payload bytes (`1..=MAX_PAYLOAD`).
fn header_for(len: usize) -> [u8; RECORD_HEADER] {
    let [hi, lo] = (len as u16).to_be_bytes();
    [CT_APPDATA, VERSION[0], VERSION[1], hi, lo]
}

impl RecordWriter {
    /// A writer at a record boundary.
    pub fn new() -> RecordWriter {
        RecordWriter {
            header_sent: RECORD_HEADER,
            ..RecordWriter::default()
        }
    }

    /// What to write next for `offered` payload bytes (`offered > 0`): the header bytes still
    /// unwritten (empty once the header is out) and how many of the offered bytes may follow
    /// them in this record. Starts a record of `min(offered, MAX_PAYLOAD)` bytes at a boundary.
    /// Plans no record after it (see [`RecordWriter::batch`]).
    pub fn next(&mut self, offered: usize) -> (&[u8], usize) {
        self.more_len = 0;
        if self.left == 0 && self.header_sent == RECORD_HEADER && offered > 0 {
            let len = offered.min(MAX_PAYLOAD);
            self.header = header_for(len);
            self.header_sent = 0;
            self.left = len;
        }
        (&self.header[self.header_sent..], self.left.min(offered))
    }

    /// [`RecordWriter::next`], then, if the offered bytes go past the current record, whole
    /// records for them (each `min(rest, MAX_PAYLOAD)`), up to [`BATCH`] records in all. The
    /// following [`RecordWriter::wrote`] accounts for what the write took of them; records it
    /// did not begin are dropped then.
    pub fn batch(&mut self, offered: usize) -> Batch<'_> {
        let take = self.next(offered).1;
        let mut rest = offered - take;
        while rest > 0 && self.more_len < BATCH - 1 {
            let len = rest.min(MAX_PAYLOAD);
            self.more[self.more_len] = header_for(len);
            self.more_len += 1;
            rest -= len;
        }
        Batch {
            first: (&self.header[self.header_sent..], take),
            more: &self.more[..self.more_len],
        }
    }

    /// Records that `n` bytes of what the last [`RecordWriter::next`] or
    /// [`RecordWriter::batch`] returned were written, in wire order (header bytes first);
    /// returns how many of them were payload. Every record written whole is done; the one the
    /// write ended inside becomes the current record (its header partly or wholly sent, its
    /// payload partly sent, its announced length kept); planned records not begun are dropped.
    pub fn wrote(&mut self, mut n: usize) -> usize {
        let planned = std::mem::take(&mut self.more_len);
        let mut payload = self.wrote_current(&mut n);
        for i in 0..planned {
            if n == 0 {
                break;
            }
            // Bytes past the current record: it is complete, the next planned one begins.
            debug_assert!(self.at_boundary());
            self.header = self.more[i];
            self.header_sent = 0;
            self.left = header_len(&self.more[i]);
            payload += self.wrote_current(&mut n);
        }
        payload
    }

    /// Takes what of `n` goes to the current record (header first); returns its payload part.
    fn wrote_current(&mut self, n: &mut usize) -> usize {
        let h = (*n).min(RECORD_HEADER - self.header_sent);
        self.header_sent += h;
        let payload = (*n - h).min(self.left);
        self.left -= payload;
        *n -= h + payload;
        payload
    }

    /// Drops a record whose header was not begun (nothing of it is on the wire), so the next
    /// call to [`RecordWriter::next`] sizes a fresh one from what it is offered then; drops the
    /// planned records after it too.
    pub fn unstarted(&mut self) {
        self.more_len = 0;
        if self.header_sent == 0 {
            self.header_sent = RECORD_HEADER;
            self.left = 0;
        }
    }

    /// Header bytes begun but not all written: the rest must go out before anything else.
    pub fn backlog(&self) -> &[u8] {
        if self.header_sent == 0 {
            &[]
        } else {
            &self.header[self.header_sent..]
        }
    }

    /// True between records (every announced byte written).
    pub fn at_boundary(&self) -> bool {
        self.left == 0 && self.header_sent == RECORD_HEADER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `payload` as records of the given sizes, with a CCS record first.
    fn records(payload: &[u8], sizes: &[usize]) -> Vec<u8> {
        let mut out = vec![0x14, 0x03, 0x03, 0x00, 0x01, 0x01];
        let mut at = 0;
        for &s in sizes.iter().cycle() {
            if at == payload.len() {
                break;
            }
            let s = s.min(payload.len() - at);
            out.extend([0x17, 0x03, 0x03]);
            out.extend((s as u16).to_be_bytes());
            out.extend(&payload[at..at + s]);
            at += s;
        }
        out
    }

    fn unwrap_in_chunks(wire: &[u8], chunk: usize) -> Result<Vec<u8>, RecordError> {
        let mut r = RecordReader::new();
        let mut out = Vec::new();
        for c in wire.chunks(chunk) {
            let mut buf = c.to_vec();
            buf.resize(c.len() + 3, 0xaa); // room past n is never read
            let k = r.unwrap_in_place(&mut buf, c.len())?;
            out.extend(&buf[..k]);
        }
        Ok(out)
    }

    #[test]
    fn records_split_at_every_byte_unwrap_to_the_payload() {
        let payload: Vec<u8> = (0..5000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let wire = records(&payload, &[1, 300, MAX_PAYLOAD, 17]);
        for chunk in [1, 2, 3, 4, 5, 6, 7, 64, 1000, wire.len()] {
            assert_eq!(unwrap_in_chunks(&wire, chunk).unwrap(), payload, "{chunk}");
        }
    }

    #[test]
    fn ccs_records_of_any_length_are_skipped_anywhere() {
        let mut wire = vec![0x17, 0x03, 0x03, 0x00, 0x02, b'a', b'b'];
        wire.extend([0x14, 0x03, 0x03, 0x00, 0x00]);
        wire.extend([0x14, 0x03, 0x01, 0x00, 0x03, 1, 2, 3]);
        wire.extend([0x17, 0x03, 0x03, 0x00, 0x01, b'c']);
        for chunk in [1, 3, 7, wire.len()] {
            assert_eq!(unwrap_in_chunks(&wire, chunk).unwrap(), b"abc");
        }
        // Only CCS bytes: nothing to hand out, and the reader stays usable.
        let mut r = RecordReader::new();
        let mut buf = [0x14, 0x03, 0x03, 0x00, 0x01, 0x01];
        assert_eq!(r.unwrap_in_place(&mut buf, 6), Ok(0));
        assert!(r.at_boundary());
    }

    #[test]
    fn a_run_of_ccs_records_is_bounded_and_application_data_resets_it() {
        let ccs = [0x14, 0x03, 0x03, 0x00, 0x01, 0x01];
        let data = [0x17, 0x03, 0x03, 0x00, 0x01, b'x'];
        let mut ok = Vec::new();
        for _ in 0..3 {
            ok.extend(ccs.repeat(MAX_CCS_RUN));
            ok.extend(data);
        }
        for chunk in [1, 6, ok.len()] {
            assert_eq!(unwrap_in_chunks(&ok, chunk).unwrap(), b"xxx");
        }
        let flood = ccs.repeat(MAX_CCS_RUN + 1);
        for chunk in [1, 6, flood.len()] {
            assert_eq!(unwrap_in_chunks(&flood, chunk), Err(RecordError::CcsFlood));
        }
        assert!(RecordError::CcsFlood
            .to_string()
            .contains("change_cipher_spec"));
    }

    #[test]
    fn bad_records_are_errors_with_a_phrase_and_stay_errors() {
        let cases: [(&[u8], RecordError, &str); 5] = [
            (
                &[0x15, 3, 3, 0, 2, 1, 0],
                RecordError::UnexpectedType(0x15),
                "type 0x15",
            ),
            (
                &[0x16, 3, 3, 0, 4],
                RecordError::UnexpectedType(0x16),
                "type 0x16",
            ),
            (&[0x17, 3, 3, 0, 0], RecordError::Empty, "empty"),
            (
                &[0x17, 3, 3, 0x41, 0x01],
                RecordError::TooLong(0x4101),
                "16641",
            ),
            (
                &[0x17, 0x47, 0x45, 0, 1],
                RecordError::BadVersion(0x47, 0x45),
                "version",
            ),
        ];
        for (wire, want, phrase) in cases {
            for chunk in [1, 2, wire.len()] {
                assert_eq!(unwrap_in_chunks(wire, chunk), Err(want));
            }
            assert!(want.to_string().contains(phrase), "{want}");
            let mut r = RecordReader::new();
            let mut buf = wire.to_vec();
            assert_eq!(r.unwrap_in_place(&mut buf, wire.len()), Err(want));
            let mut ok = [0x17, 3, 3, 0, 1, 9];
            assert_eq!(r.unwrap_in_place(&mut ok, 6), Err(want), "sticky");
        }
        // The largest allowed record passes, CCS or application data.
        let mut r = RecordReader::new();
        let mut hdr = [0x17, 3, 3, 0x41, 0x00];
        assert_eq!(r.unwrap_in_place(&mut hdr, 5), Ok(0));
        assert!(!r.at_boundary());
    }

    #[test]
    fn payload_before_a_header_in_the_same_read_is_compacted() {
        // Two records in one read: payload bytes move over the second header.
        let mut buf = [
            0x17, 3, 3, 0, 2, b'x', b'y', 0x17, 3, 3, 0, 3, b'z', b'w', b'v', 0,
        ];
        let mut r = RecordReader::new();
        assert_eq!(r.unwrap_in_place(&mut buf, 15), Ok(5));
        assert_eq!(&buf[..5], b"xyzwv");
    }

    /// Drives a writer the way the stream does, with the sink taking `cap` bytes per call.
    fn frame(payload: &[u8], offered: usize, cap: usize) -> Vec<u8> {
        let mut w = RecordWriter::new();
        let mut wire = Vec::new();
        let mut at = 0;
        while at < payload.len() {
            let end = (at + offered).min(payload.len());
            let (hdr, take) = w.next(end - at);
            let mut out = hdr.to_vec();
            out.extend(&payload[at..at + take]);
            let n = out.len().min(cap);
            wire.extend(&out[..n]);
            at += w.wrote(n);
            assert!(w.backlog().len() < RECORD_HEADER);
        }
        assert!(w.at_boundary());
        wire
    }

    #[test]
    fn the_writer_frames_records_of_at_most_max_payload() {
        let payload: Vec<u8> = (0..40_000u32).map(|i| (i % 253) as u8).collect();
        for (offered, cap) in [(40_000, usize::MAX), (100, 1), (7000, 3), (20_000, 7)] {
            let wire = frame(&payload, offered, cap);
            let mut at = 0;
            let mut sizes = Vec::new();
            while at < wire.len() {
                assert_eq!(&wire[at..at + 3], &[0x17, 0x03, 0x03]);
                let len = usize::from(u16::from_be_bytes([wire[at + 3], wire[at + 4]]));
                assert!((1..=MAX_PAYLOAD).contains(&len));
                sizes.push(len);
                at += RECORD_HEADER + len;
            }
            assert_eq!(at, wire.len());
            assert_eq!(unwrap_in_chunks(&wire, 5).unwrap(), payload);
            if offered == 40_000 && cap == usize::MAX {
                assert_eq!(sizes, [MAX_PAYLOAD, MAX_PAYLOAD, 40_000 - 2 * MAX_PAYLOAD]);
            }
        }
    }

    #[test]
    fn a_header_partly_written_is_backlog_and_an_unstarted_one_is_dropped() {
        let mut w = RecordWriter::new();
        assert_eq!(w.next(10), (&[0x17, 3, 3, 0, 10][..], 10));
        w.unstarted();
        assert!(w.at_boundary() && w.backlog().is_empty());
        // Re-sized from what is offered now.
        assert_eq!(w.next(4).0, &[0x17, 3, 3, 0, 4]);
        assert_eq!(w.wrote(2), 0);
        assert_eq!(w.backlog(), &[3, 0, 4]);
        w.unstarted(); // begun: kept
        assert_eq!(w.next(100), (&[3, 0, 4][..], 4));
        assert_eq!(w.wrote(3 + 1), 1);
        assert!(w.backlog().is_empty() && !w.at_boundary());
        assert_eq!(w.next(100), (&[][..], 3));
        assert_eq!(w.wrote(3), 3);
        assert!(w.at_boundary());
    }
}
