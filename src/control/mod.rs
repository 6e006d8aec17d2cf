//! The control protocol's sans-IO core (`--control-socket`, the `ctl` applet): one request line
//! in, one reply out, no sockets and no clocks.
//!
//! Wire format (one request per connection; the server closes after the reply): the request is
//! `VERB [ARG] [--json]\n`, at most [`request::MAX_REQUEST`] bytes ([`request::parse`]); the
//! reply is `ok\n` followed by a body, or `error MESSAGE\n` ([`ok`], [`error`]). The reactor's
//! shell (`server.rs`, compiled as `reactor::control`) owns the socket, gathers a [`status::Status`] snapshot and calls
//! in here; [`render`] draws it as a table or JSON, [`metrics`] as Prometheus text.

pub mod metrics;
pub mod render;
pub mod request;
pub mod status;

/// An `ok` reply: `ok\n` then `body` (a final newline is added if `body` lacks one and is not
/// empty).
pub fn ok(body: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(3 + body.len() + 1);
    out.extend_from_slice(b"ok\n");
    out.extend_from_slice(body.as_bytes());
    if !body.is_empty() && !body.ends_with('\n') {
        out.push(b'\n');
    }
    out
}

/// An `error` reply: `error MESSAGE\n`, the message folded onto one line (line breaks and other
/// control characters become spaces).
pub fn error(message: &str) -> Vec<u8> {
    let one: String = message
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    format!("error {}\n", one.trim()).into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_ok_plus_body_or_one_error_line() {
        assert_eq!(ok(""), b"ok\n");
        assert_eq!(ok("a\nb"), b"ok\na\nb\n");
        assert_eq!(ok("a\n"), b"ok\na\n");
        assert_eq!(error("bad\nthing\r"), b"error bad thing\n");
    }
}
