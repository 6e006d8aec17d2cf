//! One HTTPS GET at a time, driven by the reactor: the fetch machinery the shared CF domain
//! list (`reactor::cflist`) and Telegram's range list (`reactor::tgranges`) share. DNS from the
//! reactor's resolver (or the `socks5h://` outbound proxy's), TCP + TLS through `net::dial`
//! with [`DialKind::Tls`] (so the outbound proxy and every dial stage apply; plain TCP for an
//! `http://` URL where the owner allows one), then an HTTP/1.1
//! GET parsed by `route::cflist::http`, following https redirects; one deadline bounds it all.
//!
//! Owns the one socket of its owner's token and the fetch deadline; hands back the body or why
//! not. What the body means, the schedule and the cache are the owner's. Compiled as
//! `reactor::cflist::get` (beside `fetch.rs`, see its header).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use mio::{Registry, Token};

use crate::dns::{Lookup, Resolver};
use crate::error::Failure;
use crate::net::dial::{Dial, DialKind, DialSpec, DialStep, Upstream};
use crate::net::io::Io;
use crate::net::outbound::{self, Outbound};
use crate::rng::Rng;
use crate::route::cflist::http::{self, Outcome, Response};
use crate::route::cflist::Url;

/// Redirects followed per fetch, at most (https only).
pub const MAX_REDIRECTS: u8 = 3;

/// How often a name still being resolved is looked up again (ms).
const RESOLVE_RECHECK_MS: u64 = 20;

/// A finished GET: the `200` body, or why not (a line for the log and `ctl status`).
pub(in crate::reactor) type Got = Result<Vec<u8>, String>;

/// What resolving and dialling borrow from the reactor: the registry, the resolver and the
/// outbound setting in force.
pub(in crate::reactor) type Deps<'a> = (&'a Registry, &'a mut Resolver, Option<&'a Outbound>);

/// What driving a dial borrows: the TLS client configuration, the wall clock (s), the
/// generator.
pub(in crate::reactor) type DialDeps<'a> = (&'a Arc<rustls::ClientConfig>, u64, &'a mut Rng);

/// Asks whether a dial through the outbound proxy may start at a time (ms): the ladder's
/// [`Ladder::proxy_may_dial`](crate::route::ladder::Ladder::proxy_may_dial).
pub(in crate::reactor) type Gate<'a> = dyn FnMut(u64) -> Result<(), u64> + 'a;

enum Step {
    Resolve {
        recheck_at: u64,
    },
    Dial(Box<Dial>),
    Talk {
        up: Box<Upstream>,
        req: Vec<u8>,
        sent: usize,
        resp: Response,
    },
}

struct Fetch {
    url: Url,
    /// TLS (`https://`), or plain TCP (`http://`, only where the owner allows it).
    tls: bool,
    redirects: u8,
    deadline: u64,
    step: Step,
}

/// The GET machinery of one owner: at most one fetch at a time on `token`.
pub(in crate::reactor) struct Getter {
    token: Token,
    timeout_ms: u64,
    max_body: usize,
    /// The media type asked for and, when set, required of a `200` (DoH); `None`: a plain
    /// text download (`Accept: text/plain`, any type taken).
    media: Option<&'static str>,
    fetch: Option<Fetch>,
    /// What the last dial through the outbound proxy said about it, for the ladder: `Ok` it
    /// got past the proxy, `Err` the proxy's own failure. The owner takes it after each call.
    pub(in crate::reactor) proxy_news: Option<Result<(), Failure>>,
}

impl Getter {
    /// No fetch yet; fetches will use `token`, end after `timeout_ms` and take bodies up to
    /// `max_body` bytes.
    pub(in crate::reactor) fn new(token: Token, timeout_ms: u64, max_body: usize) -> Getter {
        Getter {
            token,
            timeout_ms,
            max_body,
            media: None,
            fetch: None,
            proxy_news: None,
        }
    }

    /// The same machinery asking for `media` (`Accept`) and failing a `200` of another
    /// `Content-Type` (the DNS-over-HTTPS exchanges, `application/dns-message`).
    pub(in crate::reactor) fn for_media(mut self, media: &'static str) -> Getter {
        self.media = Some(media);
        self
    }

    /// True while a fetch runs.
    pub(in crate::reactor) fn busy(&self) -> bool {
        self.fetch.is_some()
    }

    /// The fetch deadline (ms), or the next re-check of a pending name; `None` when idle.
    pub(in crate::reactor) fn next_deadline(&self) -> Option<u64> {
        let f = self.fetch.as_ref()?;
        match f.step {
            Step::Resolve { recheck_at } => Some(recheck_at.min(f.deadline)),
            _ => Some(f.deadline),
        }
    }

    /// Starts a GET of `url` (a running one is dropped), over TLS or (`tls` false, an
    /// `http://` URL) plain TCP. `Some` when it ended at once.
    pub(in crate::reactor) fn start(
        &mut self,
        url: Url,
        tls: bool,
        now: u64,
        deps: Deps<'_>,
        gate: &mut Gate<'_>,
    ) -> Option<Got> {
        self.fetch = Some(Fetch {
            url,
            tls,
            redirects: 0,
            deadline: now + self.timeout_ms.max(1),
            step: Step::Resolve { recheck_at: now },
        });
        self.resolve(now, deps, gate)
    }

    /// Ends a fetch past its deadline, or re-checks a pending name (or a down outbound proxy,
    /// `gate`).
    pub(in crate::reactor) fn tick(
        &mut self,
        now: u64,
        deps: Deps<'_>,
        gate: &mut Gate<'_>,
    ) -> Option<Got> {
        let f = self.fetch.as_mut()?;
        if now >= f.deadline {
            self.fetch = None;
            let ms = self.timeout_ms;
            return Some(Err(format!("no complete answer within {ms} ms")));
        }
        if matches!(f.step, Step::Resolve { recheck_at } if recheck_at <= now) {
            return self.resolve(now, deps, gate);
        }
        None
    }

    fn resolve(
        &mut self,
        now: u64,
        (registry, dns, outbound): Deps<'_>,
        gate: &mut Gate<'_>,
    ) -> Option<Got> {
        let f = self.fetch.as_mut()?;
        // A name a `socks5h://` outbound proxy resolves needs no local answer (the dial sends
        // it the name, as for Worker and CF names).
        let remote = outbound::remote_name(outbound, &f.url.host);
        let ip = match (f.url.host.parse::<IpAddr>(), remote) {
            (Ok(ip), _) | (Err(_), Some(ip)) => ip,
            (Err(_), None) => match dns.lookup(&f.url.host, now) {
                Lookup::Ready(ip) => ip,
                Lookup::Pending => {
                    f.step = Step::Resolve {
                        recheck_at: now + RESOLVE_RECHECK_MS,
                    };
                    return None;
                }
                Lookup::Failed(why) => {
                    let host = f.url.host.clone();
                    self.fetch = None;
                    return Some(Err(format!("cannot resolve {host}: {why}")));
                }
            },
        };
        let spec = DialSpec {
            addr: SocketAddr::new(ip, f.url.port),
            kind: if f.tls {
                DialKind::Tls {
                    host: f.url.host.clone(),
                }
            } else {
                DialKind::Tcp
            },
        };
        if outbound::waits_for_proxy(outbound, spec.addr, Some(&f.url.host)) {
            // The outbound proxy's own name has no address yet: wait for it within the fetch's
            // deadline, as for the list host's name.
            f.step = Step::Resolve {
                recheck_at: now + RESOLVE_RECHECK_MS,
            };
            return None;
        }
        let proxied = outbound::goes_via_proxy(outbound, spec.addr, Some(&f.url.host));
        if proxied {
            if let Err(at) = gate(now) {
                // The outbound proxy is down and its re-check is not due: wait for it within
                // the fetch's deadline instead of dialling.
                f.step = Step::Resolve { recheck_at: at };
                return None;
            }
        }
        match Dial::start(&spec, outbound, registry, self.token, Duration::ZERO) {
            Ok(d) => {
                f.step = Step::Dial(Box::new(d));
                None
            }
            Err(failure) => {
                if failure.is_proxy() {
                    self.proxy_news = Some(Err(failure));
                }
                self.fetch = None;
                Some(Err(format!("cannot connect to {}: {failure}", spec.addr)))
            }
        }
    }

    /// Socket readiness for the fetch.
    pub(in crate::reactor) fn on_event(
        &mut self,
        now: u64,
        deps: Deps<'_>,
        dial: DialDeps<'_>,
        gate: &mut Gate<'_>,
    ) -> Option<Got> {
        let f = self.fetch.as_mut()?;
        let outcome = match drive(f, dial, (self.max_body, self.media), &mut self.proxy_news) {
            Ok(None) => return None,
            Ok(Some(o)) => o,
            Err(why) => {
                self.fetch = None;
                return Some(Err(why));
            }
        };
        let f = self.fetch.take()?;
        match outcome {
            Outcome::Body(b) => Some(Ok(b)),
            Outcome::Status(code) => Some(Err(format!("{} answered HTTP {code}", f.url.host))),
            Outcome::Redirect(_) if f.redirects >= MAX_REDIRECTS => {
                Some(Err(format!("more than {MAX_REDIRECTS} redirects")))
            }
            Outcome::Redirect(url) => {
                // A path on the same server keeps the scheme; any other target is https.
                let same = url.host == f.url.host && url.port == f.url.port;
                self.fetch = Some(Fetch {
                    tls: f.tls || !same,
                    url,
                    redirects: f.redirects + 1,
                    deadline: f.deadline,
                    step: Step::Resolve { recheck_at: now },
                });
                self.resolve(now, deps, gate)
            }
        }
    }
}

/// Advances the dial and the exchange as far as the socket allows (bodies up to `max_body`,
/// `media` as in [`Getter::for_media`]). A dial through the outbound proxy that ended leaves
/// what it says about the proxy in `proxy_news`.
fn drive(
    f: &mut Fetch,
    (tls, wall_s, rng): DialDeps<'_>,
    (max_body, media): (usize, Option<&'static str>),
    proxy_news: &mut Option<Result<(), Failure>>,
) -> Result<Option<Outcome>, String> {
    loop {
        match &mut f.step {
            Step::Resolve { .. } => return Ok(None),
            Step::Dial(d) => match d.drive(tls, wall_s, rng) {
                DialStep::Pending => return Ok(None),
                DialStep::Failed {
                    detail, failure, ..
                } => {
                    if d.via().is_some() {
                        *proxy_news = Some(if failure.is_proxy() {
                            Err(failure)
                        } else {
                            Ok(())
                        });
                    }
                    return Err(format!("{}: {failure}: {detail}", f.url.host));
                }
                DialStep::Ready(up) => {
                    if d.via().is_some() {
                        *proxy_news = Some(Ok(()));
                    }
                    f.step = Step::Talk {
                        up: Box::new(up),
                        req: http::request_accepting(&f.url, "", media.unwrap_or("text/plain")),
                        sent: 0,
                        resp: match media {
                            Some(m) => Response::new(f.url.clone(), max_body).requiring_type(m),
                            None => Response::new(f.url.clone(), max_body),
                        },
                    }
                }
            },
            Step::Talk {
                up,
                req,
                sent,
                resp,
            } => {
                while *sent < req.len() {
                    match up.write(&req[*sent..]) {
                        Io::Done(n) => *sent += n,
                        Io::Blocked => break,
                        Io::Eof => return Err("closed while sending the request".into()),
                        Io::Failed(e) => return Err(format!("{}: {e}", f.url.host)),
                    }
                }
                up.flush().map_err(|e| format!("{}: {e}", f.url.host))?;
                let mut buf = [0u8; 4096];
                loop {
                    match up.read(&mut buf) {
                        Io::Done(n) => {
                            if let Some(o) = resp.feed(&buf[..n]).map_err(|e| e.to_string())? {
                                up.shutdown();
                                return Ok(Some(o));
                            }
                        }
                        Io::Blocked => return Ok(None),
                        Io::Eof => return resp.eof().map(Some).map_err(|e| e.to_string()),
                        Io::Failed(e) => return Err(format!("{}: {e}", f.url.host)),
                    }
                }
            }
        }
    }
}
