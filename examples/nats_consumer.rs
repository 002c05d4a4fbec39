//! An exactly-once consumer on a real broker: NATS JetStream on 127.0.0.1:4222.
//!
//! A producer publishes payments to a JetStream stream, and retries some publishes (duplicates
//! with the same payment id). A worker pulls them with explicit acks and a short ack wait, and
//! "crashes" before acknowledging some of them, so JetStream redelivers those. Every delivery goes
//! through idemdb (`begin` / `complete`); the charge ledger, kept outside the store, must count
//! every payment exactly once. The NATS protocol is spoken directly over TCP (a few commands) to
//! keep the dependency list short. If no server answers, the example says so and exits.
//!
//! Run: `cargo run --release --example nats_consumer` (add `-- --db DIR` to keep the store).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use idemdb::{Begin, Config, ConsumerOptions, Durability, Response};

const ADDR: &str = "127.0.0.1:4222";
const STREAM: &str = "IDEMDB_PAYMENTS";
const PAYMENTS: u32 = 300;

struct Msg {
    reply: Option<String>,
    status: Option<String>,
    payload: Vec<u8>,
}

struct Nats {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Nats {
    fn connect() -> std::io::Result<Nats> {
        let s =
            TcpStream::connect_timeout(&ADDR.parse().expect("address"), Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut n = Nats {
            r: BufReader::new(s.try_clone()?),
            w: s,
        };
        let mut info = String::new();
        n.r.read_line(&mut info)?;
        n.send("CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\"name\":\"idemdb-example\"}\r\nPING\r\n")?;
        n.send("SUB _INBOX.idemdb.> 1\r\n")?;
        Ok(n)
    }

    fn send(&mut self, s: &str) -> std::io::Result<()> {
        self.w.write_all(s.as_bytes())
    }

    fn publish(
        &mut self,
        subject: &str,
        reply: Option<&str>,
        payload: &[u8],
    ) -> std::io::Result<()> {
        let head = match reply {
            Some(r) => format!("PUB {subject} {r} {}\r\n", payload.len()),
            None => format!("PUB {subject} {}\r\n", payload.len()),
        };
        self.w.write_all(head.as_bytes())?;
        self.w.write_all(payload)?;
        self.w.write_all(b"\r\n")
    }

    /// The next message delivered to this connection (answering server PINGs on the way).
    fn next(&mut self) -> std::io::Result<Msg> {
        loop {
            let mut line = String::new();
            if self.r.read_line(&mut line)? == 0 {
                return Err(std::io::Error::other("connection closed"));
            }
            let parts: Vec<&str> = line.split_whitespace().collect();
            match parts.first().copied() {
                Some("PING") => self.send("PONG\r\n")?,
                Some("-ERR") => return Err(std::io::Error::other(line)),
                Some("MSG") => {
                    let (reply, len) = match parts.as_slice() {
                        [_, _, _, r, n] => (Some(r.to_string()), n.parse().unwrap_or(0)),
                        [_, _, _, n] => (None, n.parse().unwrap_or(0)),
                        _ => return Err(std::io::Error::other(line)),
                    };
                    let payload = self.read_exact(len)?;
                    return Ok(Msg {
                        reply,
                        status: None,
                        payload,
                    });
                }
                Some("HMSG") => {
                    let (reply, hlen, total): (Option<String>, usize, usize) = match parts
                        .as_slice()
                    {
                        [_, _, _, r, h, t] => (
                            Some(r.to_string()),
                            h.parse().unwrap_or(0),
                            t.parse().unwrap_or(0),
                        ),
                        [_, _, _, h, t] => (None, h.parse().unwrap_or(0), t.parse().unwrap_or(0)),
                        _ => return Err(std::io::Error::other(line)),
                    };
                    let all = self.read_exact(total)?;
                    let (headers, payload) = all.split_at(hlen.min(all.len()));
                    let first = String::from_utf8_lossy(headers)
                        .lines()
                        .next()
                        .unwrap_or("")
                        .to_string();
                    let status = first.split_whitespace().nth(1).map(str::to_string);
                    return Ok(Msg {
                        reply,
                        status,
                        payload: payload.to_vec(),
                    });
                }
                _ => {} // PONG, +OK, INFO updates
            }
        }
    }

    fn read_exact(&mut self, n: usize) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0u8; n + 2];
        self.r.read_exact(&mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    fn request(&mut self, subject: &str, payload: &str) -> std::io::Result<String> {
        self.publish(subject, Some("_INBOX.idemdb.req"), payload.as_bytes())?;
        let m = self.next()?;
        Ok(String::from_utf8_lossy(&m.payload).into_owned())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut nats = match Nats::connect() {
        Ok(n) => n,
        Err(e) => {
            return Err(format!(
                "cannot reach the NATS server on {ADDR} ({e}); start one with `nats-server -js`"
            )
            .into());
        }
    };
    let args: Vec<String> = std::env::args().collect();
    let tmp = tempfile_dir();
    let dir = args
        .iter()
        .position(|a| a == "--db")
        .and_then(|i| args.get(i + 1))
        .map_or(tmp.clone(), std::path::PathBuf::from);
    let store = Config::new(&dir).durability(Durability::Synced).open()?;
    let group = idemdb::mint_key(&idemdb::SystemClock); // a fresh consumer group per run

    // A memory stream and a pull consumer that redelivers unacknowledged messages after 1 s.
    let _ = nats.request(&format!("$JS.API.STREAM.DELETE.{STREAM}"), "")?;
    let created = nats.request(
        &format!("$JS.API.STREAM.CREATE.{STREAM}"),
        &format!(
            "{{\"name\":\"{STREAM}\",\"subjects\":[\"idemdb.payments\"],\"storage\":\"memory\"}}"
        ),
    )?;
    if created.contains("\"error\"") {
        return Err(format!(
            "JetStream is not enabled on the NATS server on {ADDR} (run `nats-server -js`): {created}"
        )
        .into());
    }
    let consumer = nats.request(
        &format!("$JS.API.CONSUMER.DURABLE.CREATE.{STREAM}.worker"),
        &format!(
            "{{\"stream_name\":\"{STREAM}\",\"config\":{{\"durable_name\":\"worker\",\"ack_policy\":\"explicit\",\"ack_wait\":1000000000,\"max_deliver\":-1}}}}"
        ),
    )?;
    if consumer.contains("\"error\"") {
        return Err(format!("cannot create the consumer: {consumer}").into());
    }

    // The producer: every payment once, 20% published again (a retry after a lost publish ack).
    let mut published = 0;
    for i in 0..PAYMENTS {
        let body = format!("payment-{i}:{}", 100 + i);
        let copies = if i.is_multiple_of(5) { 2 } else { 1 };
        for _ in 0..copies {
            nats.publish("idemdb.payments", None, body.as_bytes())?;
            published += 1;
        }
    }

    // The worker.
    let opts = ConsumerOptions::default();
    let mut ledger: HashMap<String, u32> = HashMap::new();
    let (mut deliveries, mut duplicates, mut crashes, mut idle) = (0u32, 0u32, 0u32, 0u32);
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    while idle < 3 {
        nats.publish(
            &format!("$JS.API.CONSUMER.MSG.NEXT.{STREAM}.worker"),
            Some("_INBOX.idemdb.fetch"),
            b"{\"batch\":50,\"expires\":1500000000}",
        )?;
        let mut got = 0;
        loop {
            let m = nats.next()?;
            if m.status.is_some() {
                break; // 404/408: this pull is over
            }
            got += 1;
            deliveries += 1;
            let text = String::from_utf8_lossy(&m.payload).into_owned();
            let id = text.split(':').next().unwrap_or_default().to_string();
            let ack = |n: &mut Nats| -> std::io::Result<()> {
                match &m.reply {
                    Some(r) => n.publish(r, None, b""),
                    None => Ok(()),
                }
            };
            match store.begin(&group, &id, opts)? {
                Begin::Process(lease) => {
                    *ledger.entry(id.clone()).or_default() += 1; // the effect: charge once
                    store
                        .complete(&lease, Response::new(format!("charged {text}")))?
                        .map_err(|l| format!("lease lost: {l:?}"))?;
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    if rng.is_multiple_of(10) {
                        crashes += 1; // crashed before the ack: JetStream redelivers it
                        continue;
                    }
                    ack(&mut nats)?;
                }
                Begin::Completed(_) | Begin::Failed(_) => {
                    duplicates += 1;
                    ack(&mut nats)?;
                }
                Begin::Poisoned { .. } => ack(&mut nats)?, // would go to a dead-letter queue
                // In progress elsewhere, or an outcome this example does not know: no ack, so
                // JetStream redelivers it later.
                _ => {}
            }
            if got == 50 {
                break;
            }
        }
        idle = if got == 0 { idle + 1 } else { 0 };
    }
    let _ = nats.request(&format!("$JS.API.STREAM.DELETE.{STREAM}"), "")?;

    let once = (0..PAYMENTS).all(|i| ledger.get(&format!("payment-{i}")) == Some(&1));
    println!("| measure                          | count |");
    println!("|----------------------------------|-------|");
    println!("| payments                         | {PAYMENTS:>5} |");
    println!("| messages published (with retries)| {published:>5} |");
    println!("| deliveries from JetStream        | {deliveries:>5} |");
    println!("| worker crashes before ack        | {crashes:>5} |");
    println!("| duplicates detected and acked    | {duplicates:>5} |");
    println!(
        "| charges (ledger)                 | {:>5} |",
        ledger.values().sum::<u32>()
    );
    println!(
        "every payment charged exactly once: {}",
        if once { "PASS" } else { "FAIL" }
    );
    drop(store);
    if dir == tmp {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    if once {
        Ok(())
    } else {
        Err("a payment was charged more or less than once".into())
    }
}

fn tempfile_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "idemdb-nats-{}",
        idemdb::mint_key(&idemdb::SystemClock)
    ))
}
