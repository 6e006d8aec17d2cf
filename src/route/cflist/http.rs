//! The HTTP/1.1 GET of the shared domain list (and of Telegram's range list and DNS-over-HTTPS
//! answers, through the same `reactor::cflist::get`), sans-IO: the request bytes ([`request`],
//! [`request_accepting`]) and an incremental response parser with hard limits ([`Response`]):
//! head size, body size (`Content-Length`, `chunked`, or read to the close), redirects reported
//! with their target, a required `Content-Type` where the caller names one.
//! RFC 9112 framing, only as much of it as a plain-text download needs. No socket, no clock:
//! The shell (`fetch.rs`, compiled as `reactor::cflist`) feeds the bytes and owns the deadline.

use super::{parse_url, Url};

/// Longest response head (status line and headers) taken.
pub const MAX_HEAD: usize = 8 * 1024;

/// The request for `url`: `GET PATH HTTP/1.1`, `Host`, `User-Agent: tg-ws-proxy`,
/// `Accept: text/plain`, `Connection: close`. `query` (a cache-buster, may be empty) is
/// appended to the path (`?query` or `&query`).
pub fn request(url: &Url, query: &str) -> Vec<u8> {
    request_accepting(url, query, "text/plain")
}

/// [`request`] asking for `accept` (a media type) in place of `text/plain`.
pub fn request_accepting(url: &Url, query: &str, accept: &str) -> Vec<u8> {
    let mut path = url.path.clone();
    if !query.is_empty() {
        path.push(if path.contains('?') { '&' } else { '?' });
        path.push_str(query);
    }
    let host = if url.port == 443 {
        url.host.clone()
    } else {
        format!("{}:{}", url.host, url.port)
    };
    format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: tg-ws-proxy\r\n\
         Accept: {accept}\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n"
    )
    .into_bytes()
}

/// What a complete response said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `200` and the whole body.
    Body(Vec<u8>),
    /// A `301`/`302`/`303`/`307`/`308` to this URL (resolved against the request's).
    Redirect(Url),
    /// Any other status (the body is not read).
    Status(u16),
}

/// Why a response was not taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpError {
    /// The body is longer than the limit (bytes).
    TooLarge(usize),
    /// The head is longer than [`MAX_HEAD`].
    HeadTooLarge,
    /// Not a well-formed HTTP/1.x response (what is wrong).
    Malformed(String),
    /// The connection ended before the response did.
    Truncated,
    /// A `200` whose `Content-Type` (media type, parameters aside; `None`: no header) is not
    /// the one required ([`Response::requiring_type`]).
    ContentType(Option<String>, &'static str),
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::TooLarge(n) => write!(f, "body larger than {n} bytes"),
            HttpError::HeadTooLarge => write!(f, "response head larger than {MAX_HEAD} bytes"),
            HttpError::Malformed(w) => write!(f, "malformed response: {w}"),
            HttpError::Truncated => write!(f, "connection closed before the response ended"),
            HttpError::ContentType(got, want) => match got {
                Some(t) => write!(f, "content type {t:?}, not {want}"),
                None => write!(f, "no content type, not {want}"),
            },
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Framing {
    Length(usize),
    Chunked,
    Close,
}

/// One response being read. Feed it bytes as they arrive ([`Response::feed`]) and tell it when
/// the connection ended ([`Response::eof`]).
#[derive(Debug)]
pub struct Response {
    base: Url,
    max_body: usize,
    /// The media type a `200` must carry, if any.
    want_type: Option<&'static str>,
    buf: Vec<u8>,
    /// Body start in `buf` and framing, once the head is parsed.
    head: Option<(usize, Framing)>,
}

impl Response {
    /// A parser for the answer to a request for `base`, taking bodies up to `max_body` bytes.
    pub fn new(base: Url, max_body: usize) -> Response {
        Response {
            base,
            max_body,
            want_type: None,
            buf: Vec::new(),
            head: None,
        }
    }

    /// The same parser, failing a `200` whose `Content-Type` media type is not `media`
    /// (compared case-insensitively, parameters such as `charset` ignored) with
    /// [`HttpError::ContentType`].
    pub fn requiring_type(mut self, media: &'static str) -> Response {
        self.want_type = Some(media);
        self
    }

    /// Takes `data`; `Ok(Some)` once the response is complete (later bytes are ignored).
    pub fn feed(&mut self, data: &[u8]) -> Result<Option<Outcome>, HttpError> {
        self.buf.extend_from_slice(data);
        if self.head.is_none() {
            let Some(end) = find(&self.buf, b"\r\n\r\n") else {
                if self.buf.len() > MAX_HEAD {
                    return Err(HttpError::HeadTooLarge);
                }
                return Ok(None);
            };
            if end + 4 > MAX_HEAD {
                return Err(HttpError::HeadTooLarge);
            }
            let head = std::str::from_utf8(&self.buf[..end])
                .map_err(|_| HttpError::Malformed("head is not UTF-8".into()))?;
            match self.parse_head(head)? {
                Ok(framing) => self.head = Some((end + 4, framing)),
                Err(done) => return Ok(Some(done)),
            }
        }
        self.body(false)
    }

    /// The connection ended: the response if it is complete (a close-delimited body is).
    pub fn eof(&mut self) -> Result<Outcome, HttpError> {
        if self.head.is_none() {
            return Err(HttpError::Truncated);
        }
        self.body(true)?.ok_or(HttpError::Truncated)
    }

    /// `Ok(Ok(framing))` for a 200 whose body follows, `Ok(Err(outcome))` when the head alone
    /// decides.
    fn parse_head(&self, head: &str) -> Result<Result<Framing, Outcome>, HttpError> {
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap_or("");
        let mut parts = status.splitn(3, ' ');
        let version = parts.next().unwrap_or("");
        let code = parts.next().and_then(|c| c.parse::<u16>().ok());
        let (true, Some(code)) = (version.starts_with("HTTP/1."), code) else {
            return Err(HttpError::Malformed(format!("status line {status:?}")));
        };
        let mut length = None;
        let mut chunked = false;
        let mut location = None;
        let mut ctype: Option<String> = None;
        for line in lines {
            let Some((name, value)) = line.split_once(':') else {
                return Err(HttpError::Malformed(format!("header line {line:?}")));
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                let n = value
                    .parse::<usize>()
                    .map_err(|_| HttpError::Malformed(format!("Content-Length {value:?}")))?;
                if length.is_some_and(|l| l != n) {
                    return Err(HttpError::Malformed("conflicting Content-Length".into()));
                }
                length = Some(n);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.to_ascii_lowercase().ends_with("chunked");
                if !chunked {
                    return Err(HttpError::Malformed(format!("Transfer-Encoding {value:?}")));
                }
            } else if name.eq_ignore_ascii_case("location") {
                location = Some(value.to_string());
            } else if name.eq_ignore_ascii_case("content-type") {
                let media = value.split(';').next().unwrap_or("").trim();
                ctype = Some(media.to_ascii_lowercase());
            }
        }
        match code {
            200 => {}
            301 | 302 | 303 | 307 | 308 => {
                let Some(loc) = location else {
                    return Err(HttpError::Malformed(format!("{code} without Location")));
                };
                return self.redirect(&loc).map(|u| Err(Outcome::Redirect(u)));
            }
            _ => return Ok(Err(Outcome::Status(code))),
        }
        if let Some(want) = self.want_type {
            if ctype.as_deref() != Some(want) {
                return Err(HttpError::ContentType(ctype, want));
            }
        }
        Ok(Ok(match (chunked, length) {
            (true, _) => Framing::Chunked,
            (false, Some(n)) if n > self.max_body => {
                return Err(HttpError::TooLarge(self.max_body))
            }
            (false, Some(n)) => Framing::Length(n),
            (false, None) => Framing::Close,
        }))
    }

    /// A `Location` value as a URL: absolute `https://…`, or a path on the same server.
    fn redirect(&self, loc: &str) -> Result<Url, HttpError> {
        if loc.starts_with('/') && !loc.starts_with("//") {
            return Ok(Url {
                path: loc.to_string(),
                ..self.base.clone()
            });
        }
        parse_url(loc).map_err(|e| HttpError::Malformed(format!("redirect: {e}")))
    }

    fn body(&mut self, at_eof: bool) -> Result<Option<Outcome>, HttpError> {
        let Some((start, framing)) = self.head else {
            return Ok(None);
        };
        let raw = &self.buf[start..];
        match framing {
            Framing::Length(n) if raw.len() >= n => Ok(Some(Outcome::Body(raw[..n].to_vec()))),
            Framing::Length(_) => Ok(None),
            Framing::Close if raw.len() > self.max_body => Err(HttpError::TooLarge(self.max_body)),
            Framing::Close if at_eof => Ok(Some(Outcome::Body(raw.to_vec()))),
            Framing::Close => Ok(None),
            Framing::Chunked => dechunk(raw, self.max_body),
        }
    }
}

/// Decodes a chunked body from its start: `Ok(Some)` once the last (zero) chunk is in.
fn dechunk(mut raw: &[u8], max_body: usize) -> Result<Option<Outcome>, HttpError> {
    let mut body = Vec::new();
    loop {
        let Some(eol) = find(raw, b"\r\n") else {
            if raw.len() > 64 {
                return Err(HttpError::Malformed("chunk size line too long".into()));
            }
            return Ok(None);
        };
        let line = std::str::from_utf8(&raw[..eol]).unwrap_or("");
        let size = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size, 16)
            .map_err(|_| HttpError::Malformed(format!("chunk size {size:?}")))?;
        if size == 0 {
            // Trailers are not waited for: the body is complete.
            return Ok(Some(Outcome::Body(body)));
        }
        if size > max_body || body.len() + size > max_body {
            return Err(HttpError::TooLarge(max_body));
        }
        let data = &raw[eol + 2..];
        if data.len() < size + 2 {
            return Ok(None);
        }
        if &data[size..size + 2] != b"\r\n" {
            return Err(HttpError::Malformed("chunk not followed by CRLF".into()));
        }
        body.extend_from_slice(&data[..size]);
        raw = &data[size + 2..];
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
