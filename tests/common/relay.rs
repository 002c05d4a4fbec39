//! A TCP relay in front of a database server, shared by the test binaries that include it
//! (`#[path]`): it can cut every connection and refuse new ones, or hold what the server sends.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A TCP relay to `target` on 127.0.0.1 that can cut every connection and refuse new ones (a
/// database gone away), and let them through again, or hold what the database sends for a while
/// (answers that come late: the database acted, its caller does not know yet).
pub struct Relay {
    pub port: u16,
    up: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    /// Until when bytes from the database are held (kept, then sent in order).
    held_until: Arc<Mutex<Option<Instant>>>,
}

/// Copies `from` to `to` until either ends; while `held_until` is in the future, what was read is
/// kept and written when it has passed.
fn relay_copy(
    mut from: TcpStream,
    mut to: TcpStream,
    held_until: Option<Arc<Mutex<Option<Instant>>>>,
) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while let Some(until) = held_until.as_ref().and_then(|h| *h.lock().unwrap()) {
            let now = Instant::now();
            if now >= until {
                break;
            }
            std::thread::sleep((until - now).min(Duration::from_millis(20)));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

impl Relay {
    pub fn start(target: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        let port = listener.local_addr().expect("relay address").port();
        let up = Arc::new(AtomicBool::new(true));
        let stop = Arc::new(AtomicBool::new(false));
        let conns = Arc::new(Mutex::new(Vec::new()));
        let held_until = Arc::new(Mutex::new(None));
        let (u, s, cs, held) = (up.clone(), stop.clone(), conns.clone(), held_until.clone());
        std::thread::spawn(move || {
            for inbound in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(inbound) = inbound else { continue };
                if !u.load(Ordering::SeqCst) {
                    let _ = inbound.shutdown(Shutdown::Both); // refused
                    continue;
                }
                let Ok(outbound) = TcpStream::connect(target) else {
                    eprintln!("the relay cannot reach PostgreSQL at {target}");
                    continue;
                };
                let mut list = cs.lock().unwrap();
                for (from, to, hold) in [
                    (
                        inbound.try_clone().unwrap(),
                        outbound.try_clone().unwrap(),
                        None,
                    ),
                    (
                        outbound.try_clone().unwrap(),
                        inbound.try_clone().unwrap(),
                        Some(held.clone()),
                    ),
                ] {
                    std::thread::spawn(move || relay_copy(from, to, hold));
                }
                list.push(inbound);
                list.push(outbound);
            }
        });
        Relay {
            port,
            up,
            stop,
            conns,
            held_until,
        }
    }

    /// Holds everything the database sends, on every connection, for `d` from now (then sends
    /// it, in order).
    pub fn hold_answers(&self, d: Duration) {
        *self.held_until.lock().unwrap() = Some(Instant::now() + d);
    }

    /// Cuts every connection and refuses new ones.
    pub fn down(&self) {
        self.up.store(false, Ordering::SeqCst);
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    pub fn up(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.down();
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // wakes the accepting thread
    }
}

/// A relay to `target` that answers `N` ("no TLS") to every SSL or GSS encryption request a
/// client sends first, as a server without TLS (or anything in the path) would, and then passes
/// the plain connection through; its port.
pub fn refusing_tls(target: SocketAddr) -> u16 {
    const SSL_REQUEST: u32 = 80_877_103;
    const GSS_REQUEST: u32 = 80_877_104;
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
    let port = listener.local_addr().expect("relay address").port();
    std::thread::spawn(move || {
        for inbound in listener.incoming() {
            let Ok(mut inbound) = inbound else { continue };
            std::thread::spawn(move || {
                // Answer each encryption request with `N`; the first other message goes on.
                let first = loop {
                    let mut head = [0u8; 8];
                    if inbound.read_exact(&mut head).is_err() {
                        return;
                    }
                    let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
                    let code = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
                    if len == 8 && (code == SSL_REQUEST || code == GSS_REQUEST) {
                        if inbound.write_all(b"N").is_err() {
                            return;
                        }
                        continue;
                    }
                    break head;
                };
                let Ok(mut outbound) = TcpStream::connect(target) else {
                    return;
                };
                if outbound.write_all(&first).is_err() {
                    return;
                }
                let (a, b) = (inbound.try_clone().unwrap(), outbound.try_clone().unwrap());
                std::thread::spawn(move || relay_copy(a, b, None));
                relay_copy(outbound, inbound, None);
            });
        }
    });
    port
}

/// The address of the first host of a PostgreSQL `url` (over TCP), for a relay to stand before.
pub fn server_addr(url: &str) -> SocketAddr {
    use std::net::ToSocketAddrs;
    let config: tokio_postgres::Config = url
        .parse()
        .unwrap_or_else(|e| panic!("{url} is not a PostgreSQL URL: {e}"));
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        other => panic!("{url}: the server must be reached over TCP, not {other:?}"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    (host.as_str(), port)
        .to_socket_addrs()
        .unwrap_or_else(|e| panic!("{url}: its host does not resolve: {e}"))
        .next()
        .unwrap_or_else(|| panic!("{url}: its host has no address"))
}
