//! An idempotent consumer on RabbitMQ (AMQP 0.9.1, 127.0.0.1:5672, guest/guest), checked under
//! SIGKILL: the checkpoint of issue 33.
//!
//! A publisher puts payments on a queue with publisher confirms: every payment once, a share of
//! them twice or three times (a producer retrying after a lost confirm), shuffled, plus edge
//! payments (ids of 1, 248, 249 and 255 bytes, a 255-byte id of multi-byte UTF-8, ids that differ
//! only by case or by a trailing space, each published twice), a few poison messages (their
//! processing fails every time), a few unstorable messages (their processing produces a
//! completion the store refuses) and a few messages without an id. Worker processes consume them
//! with manual acknowledgements and a prefetch (`basic.qos`), and every delivery goes through
//! idemdb (`AsyncStore::begin`):
//!
//! - `Process`: the payment's effect is committed **with the message's completion** (on
//!   PostgreSQL an `INSERT` into the application's `effects` table, which has no unique
//!   constraint, and `commit_with` in the same transaction; embedded, an effect entity per
//!   message, keyed `effect/` + `derive_key(id)` so that any id's key fits the store's key limit,
//!   and a running total updated by compare-and-swap, in one `commit()` with the completion).
//!   Then an "effect" message is published downstream with publisher confirms, and the input is
//!   acknowledged only after the broker confirmed it.
//! - A commit the store refuses (`InvalidInput`: the same answer every time) is never retried:
//!   the lease ends with a stored terminal failure marked `refused` (with the reason), and the
//!   delivery is logged `refused` and dead-lettered. On PostgreSQL the refused `commit_with`
//!   rolls the whole transaction back (its `effects` row included). A later copy of the message
//!   finds that failure (`Begin::Failed`) and is dead-lettered as refused too.
//! - A commit that fails with a transient error (`Error::is_transient`: the database away, the
//!   engine busy) is retried in place with the same lease (50 ms doubling to 1 s, the lease
//!   renewed as it nears its end) for up to 30 s; a retry that finds the lease lost (the earlier
//!   try did commit, or the lease was taken over) requeues the delivery, and the redelivery finds
//!   the truth. Any other store error requeues the delivery. Neither counts as a failed attempt:
//!   only the handler's own failures (`fail_message`) do, and a lease that runs out (a worker
//!   killed, or the store away past the bound) is counted as an attempt by design, by the
//!   takeover that follows.
//! - `Completed` (a duplicate): acknowledged; a delivery the broker marks redelivered (its worker
//!   may have died between the commit and the downstream confirm) publishes the stored effect
//!   again, so every effect reaches the downstream queue at least once. `Failed` that is not a
//!   refusal: acknowledged as a duplicate too.
//! - `InProgress` (another worker holds the message): requeued (`basic.nack`) after a short pause.
//! - Processing that fails is `fail_message`d and requeued until the message is `Poisoned`; then
//!   it is rejected without requeue, and the queue's dead-letter exchange (`x-dead-letter-exchange`)
//!   puts it in the dead-letter queue. A message with no id (no `message_id` property, or no
//!   header named by `--id-header`) is refused the same way, counted and logged with the reason.
//!
//! A SIGKILLed worker's unacknowledged deliveries are requeued by the broker; the message it was
//! processing stays `InProgress` until its lease ends, then another worker takes it over. A worker
//! whose connection is closed (by the broker, or lost) closes it, waits for its consumers, and
//! reconnects (100 ms doubling to 5 s, each attempt logged) until it is asked to stop; the broker
//! redelivers what that connection left unacknowledged.
//!
//! - `rabbitmq_consumer check [--postgres URL] [--messages 10000] [--duplicate-percent 30]
//!   [--consumers 50] [--workers 4] [--kills 5] [--poison 5] [--unstorable 3] [--without-id 5]
//!   [--close-connections 1] [--id-header NAME] [--amqp HOST:PORT]` runs the whole scenario on
//!   queues named for the run and checks it. Without `--postgres`: the embedded store, one worker
//!   process with `--consumers` consumer tasks, SIGKILLed mid-run and restarted `--kills` times.
//!   With `--postgres`: `--workers` processes sharing the consumers, in the schema
//!   `idemdb_rabbitmq_demo` (emptied first), SIGKILLed in turn at random moments and restarted.
//!   `--close-connections` times (halfway between kills) the check closes every worker's
//!   connection from the broker's side (`rabbitmqctl close_connection`) and waits for each of
//!   those workers to connect again; the workers must then finish (one that exits by itself fails
//!   the check). The unstorable messages are published first, so that they are handled before
//!   any SIGKILL. The check, from the effects, the workers' outcome logs (their ids
//!   percent-encoded, so that ids with spaces or of any case compare exactly), idemdb's marks and
//!   the queues: no effect twice, every payment's effect exactly once (the edge payments
//!   included), every duplicate publication acknowledged as a duplicate (the dedup rate, 100%),
//!   every poison message in the dead-letter queue (read off it), every unstorable message refused
//!   at its first attempt, never retried, without an effect and in the dead-letter queue, every
//!   id-less message refused, nothing else refused, at least one downstream publication per
//!   effect, and at least one worker connection closed. It fails naming RabbitMQ, PostgreSQL or
//!   rabbitmqctl if it cannot reach or run them.
//! - `rabbitmq_consumer worker ...`: one worker process (started by `check`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use amqprs::callbacks::{ChannelCallback, ConnectionCallback};
use amqprs::channel::{
    BasicAckArguments, BasicCancelArguments, BasicConsumeArguments, BasicGetArguments,
    BasicNackArguments, BasicPublishArguments, BasicQosArguments, BasicRejectArguments, Channel,
    ConfirmSelectArguments, ConsumerMessage, ExchangeDeclareArguments, ExchangeDeleteArguments,
    ExchangeType, QueueBindArguments, QueueDeclareArguments, QueueDeleteArguments,
};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::{
    Ack, BasicProperties, Cancel, Close, CloseChannel, FieldTable, FieldValue, Nack, Return,
};
use async_trait::async_trait;
use idemdb::{
    AsyncStore, Begin, CommitConflict, Config, ConsumerOptions, Durability, Expect, FailKind,
    InvalidInput, Lease, MessageFailed, Response, SqlValue,
};

const DEFAULT_AMQP: &str = "127.0.0.1:5672";
const USER: &str = "guest";
const PASSWORD: &str = "guest";
const SCHEMA: &str = "idemdb_rabbitmq_demo";
/// The consumer group of idemdb, and the tenant of the embedded effect entities.
const GROUP: &str = "payments";
/// The header carrying which publication of a message a delivery is (0, 1, 2), for the check.
const COPY_HEADER: &str = "x-copy";
/// The lease of a delivery: how long a killed worker's message stays in progress.
const LEASE: Duration = Duration::from_secs(3);
/// Attempts (failures and taken-over leases) before a message is poisoned.
const MAX_ATTEMPTS: u32 = 6;
/// Unacknowledged deliveries per consumer (`basic.qos`).
const PREFETCH: u16 = 4;
/// The longest wait for one publisher confirm.
const CONFIRM_WAIT: Duration = Duration::from_secs(60);
/// How long a consumer finds no delivery before it stops, once asked to stop.
const IDLE: Duration = Duration::from_secs(2);
/// The check fails when no published message reaches an outcome for this long.
const STALL: Duration = Duration::from_secs(180);
/// Queues of a run that failed (and so were left for inspection) expire after an hour unused.
const QUEUE_EXPIRES_MS: i32 = 3_600_000;
/// A worker's connection name, followed by its process id (the check finds it by this name).
const WORKER_CONNECTION: &str = "idemdb-rabbitmq-worker-";
/// The first pause before reconnecting after a lost connection; it doubles up to the next.
const RECONNECT_FIRST: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(5);
/// A commit that fails with a transient error is retried in place, holding its lease: first
/// after this pause, doubling up to the next, for at most `RETRY_FOR` in all.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);
const RETRY_FOR: Duration = Duration::from_secs(30);
/// The metadata key of a stored terminal failure that records a refused commit (its reason).
const REFUSED: &str = "refused";
/// With `REFUSED`: the attempt whose commit was refused.
const REFUSED_ATTEMPT: &str = "attempt";

type Res<T> = Result<T, String>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `f`, or an error naming `what` if it takes longer than `secs` seconds.
async fn bounded<T>(what: &str, secs: u64, f: impl std::future::Future<Output = Res<T>>) -> Res<T> {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .unwrap_or_else(|_| Err(format!("{what}: no answer within {secs} s")))
}

/// SplitMix64.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

// ---------------------------------------------------------------------------------------------
// RabbitMQ: connections, channels, publisher confirms.

/// The names of one run's broker objects: nothing left by an earlier run can count.
#[derive(Clone)]
struct Names {
    prefix: String,
    input: String,
    dlx: String,
    dead: String,
    effects: String,
}

impl Names {
    fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
            input: format!("{prefix}.payments"),
            dlx: format!("{prefix}.dlx"),
            dead: format!("{prefix}.dead-letters"),
            effects: format!("{prefix}.effects"),
        }
    }
}

fn amqp(what: &'static str) -> impl Fn(amqprs::error::Error) -> String {
    move |e| format!("RabbitMQ: {what}: {e}")
}

/// What the broker told a channel asynchronously: confirms, returns, a close.
#[derive(Default)]
struct ChannelWatch {
    state: Mutex<WatchState>,
    notify: tokio::sync::Notify,
}

#[derive(Default)]
struct WatchState {
    /// Publications not confirmed yet, by sequence number.
    pending: BTreeSet<u64>,
    nacked: BTreeSet<u64>,
    returned: Vec<String>,
    closed: Option<String>,
}

impl ChannelWatch {
    fn confirm(&self, tag: u64, multiple: bool, ack: bool) {
        let mut s = lock(&self.state);
        let done: Vec<u64> = if multiple {
            s.pending.range(..=tag).copied().collect()
        } else {
            vec![tag]
        };
        for t in done {
            s.pending.remove(&t);
            if !ack {
                s.nacked.insert(t);
            }
        }
        drop(s);
        self.notify.notify_waiters();
    }

    fn close(&self, why: String) {
        lock(&self.state).closed.get_or_insert(why);
        self.notify.notify_waiters();
    }

    fn closed(&self) -> String {
        lock(&self.state)
            .closed
            .clone()
            .unwrap_or_else(|| "no reason given".into())
    }

    /// Waits until every publication up to `through` on `ch` is confirmed; an error if one was
    /// nacked or returned unroutable, the channel or its connection closed (looked at every
    /// 250 ms too: a lost connection calls no channel callback), or no confirm came within
    /// `CONFIRM_WAIT`.
    async fn confirmed(&self, ch: &Channel, through: u64, what: &str) -> Res<()> {
        let deadline = tokio::time::Instant::now() + CONFIRM_WAIT;
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let s = lock(&self.state);
                if let Some(t) = s.nacked.range(..=through).next() {
                    return Err(format!("RabbitMQ nacked publication {t} ({what})"));
                }
                if let Some(r) = s.returned.first() {
                    return Err(format!("RabbitMQ returned {what} as unroutable: {r}"));
                }
                if s.pending.range(..=through).next().is_none() {
                    return Ok(());
                }
                if let Some(why) = &s.closed {
                    return Err(format!("RabbitMQ: {what}: the channel closed: {why}"));
                }
            }
            if !ch.is_open() {
                return Err(format!(
                    "RabbitMQ: {what}: the channel closed (connection open: {})",
                    ch.is_connection_open()
                ));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "RabbitMQ: no publisher confirm for {what} within {CONFIRM_WAIT:?}"
                ));
            }
            let slice = (tokio::time::Instant::now() + Duration::from_millis(250)).min(deadline);
            let _ = tokio::time::timeout_at(slice, notified).await;
        }
    }
}

struct WatchCallback(Arc<ChannelWatch>);

#[async_trait]
impl ChannelCallback for WatchCallback {
    async fn close(
        &mut self,
        _channel: &Channel,
        close: CloseChannel,
    ) -> Result<(), amqprs::error::Error> {
        self.0.close(format!("closed by the broker: {close}"));
        Ok(())
    }
    async fn cancel(
        &mut self,
        _channel: &Channel,
        cancel: Cancel,
    ) -> Result<(), amqprs::error::Error> {
        let tag = cancel.consumer_tag();
        self.0
            .close(format!("consumer {tag} cancelled by the broker"));
        Ok(())
    }
    async fn flow(
        &mut self,
        _channel: &Channel,
        active: bool,
    ) -> Result<bool, amqprs::error::Error> {
        Ok(active)
    }
    async fn publish_ack(&mut self, _channel: &Channel, ack: Ack) {
        self.0.confirm(ack.delivery_tag(), ack.mutiple(), true);
    }
    async fn publish_nack(&mut self, _channel: &Channel, nack: Nack) {
        self.0.confirm(nack.delivery_tag(), nack.multiple(), false);
    }
    async fn publish_return(
        &mut self,
        _channel: &Channel,
        ret: Return,
        properties: BasicProperties,
        _content: Vec<u8>,
    ) {
        let what = format!(
            "{} {} (message id {:?})",
            ret.reply_code(),
            ret.reply_text(),
            properties.message_id()
        );
        lock(&self.0.state).returned.push(what);
        self.0.notify.notify_waiters();
    }
}

struct ConnectionWatch;

#[async_trait]
impl ConnectionCallback for ConnectionWatch {
    async fn close(
        &mut self,
        _connection: &Connection,
        close: Close,
    ) -> Result<(), amqprs::error::Error> {
        eprintln!("rabbitmq_consumer: RabbitMQ closed the connection: {close}");
        Ok(())
    }
    async fn blocked(&mut self, _connection: &Connection, reason: String) {
        eprintln!("rabbitmq_consumer: RabbitMQ blocked the connection: {reason}");
    }
    async fn unblocked(&mut self, _connection: &Connection) {}
    async fn secret_updated(&mut self, _connection: &Connection) {}
}

/// `HOST:PORT` read.
fn host_port(addr: &str) -> Res<(&str, u16)> {
    addr.rsplit_once(':')
        .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
        .ok_or_else(|| format!("--amqp {addr}: expected HOST:PORT"))
}

async fn connect(addr: &str, name: &str) -> Res<Connection> {
    let unreachable = |why: String| format!("RabbitMQ at {addr} cannot be reached: {why}");
    let (host, port) = host_port(addr)?;
    let args = OpenConnectionArguments::new(host, port, USER, PASSWORD)
        .connection_name(name)
        .finish();
    let conn = match tokio::time::timeout(Duration::from_secs(20), Connection::open(&args)).await {
        Err(_) => return Err(unreachable("no answer within 20 s".into())),
        Ok(Err(e)) => return Err(unreachable(e.to_string())),
        Ok(Ok(c)) => c,
    };
    conn.register_callback(ConnectionWatch)
        .await
        .map_err(amqp("registering the connection callback"))?;
    Ok(conn)
}

async fn open_channel(conn: &Connection) -> Res<(Channel, Arc<ChannelWatch>)> {
    bounded("RabbitMQ: opening a channel", 30, async {
        let ch = conn
            .open_channel(None)
            .await
            .map_err(amqp("opening a channel"))?;
        let watch = Arc::new(ChannelWatch::default());
        ch.register_callback(WatchCallback(watch.clone()))
            .await
            .map_err(amqp("registering the channel callback"))?;
        Ok((ch, watch))
    })
    .await
}

/// A channel in confirm mode: every publication gets a sequence number, confirmed by the broker.
struct Publisher {
    ch: Channel,
    watch: Arc<ChannelWatch>,
    next: u64,
}

impl Publisher {
    async fn open(conn: &Connection) -> Res<Self> {
        let (ch, watch) = open_channel(conn).await?;
        ch.confirm_select(ConfirmSelectArguments::new(false))
            .await
            .map_err(amqp("confirm.select"))?;
        Ok(Self { ch, watch, next: 0 })
    }

    /// Publishes to `queue` through the default exchange, `mandatory` (an unroutable message is
    /// returned, and the wait for its confirm fails). Its sequence number.
    async fn publish(&mut self, queue: &str, props: BasicProperties, body: Vec<u8>) -> Res<u64> {
        self.next += 1;
        let tag = self.next;
        lock(&self.watch.state).pending.insert(tag);
        let args = BasicPublishArguments::new("", queue)
            .mandatory(true)
            .finish();
        self.ch
            .basic_publish(props, body, args)
            .await
            .map_err(amqp("basic.publish"))?;
        Ok(tag)
    }

    /// Waits for the broker's confirms of every publication up to `seq`.
    async fn confirmed(&self, seq: u64, what: &str) -> Res<()> {
        self.watch.confirmed(&self.ch, seq, what).await
    }

    async fn close(self) {
        let _ = self.ch.close().await;
    }
}

fn text_value(v: &FieldValue) -> Option<String> {
    match v {
        FieldValue::S(s) => Some(s.as_ref().clone()),
        FieldValue::b(n) => Some(n.to_string()),
        FieldValue::B(n) => Some(n.to_string()),
        FieldValue::s(n) => Some(n.to_string()),
        FieldValue::u(n) => Some(n.to_string()),
        FieldValue::I(n) => Some(n.to_string()),
        FieldValue::i(n) => Some(n.to_string()),
        FieldValue::l(n) => Some(n.to_string()),
        _ => None,
    }
}

fn header(props: &BasicProperties, name: &str) -> Option<String> {
    let key = name.try_into().ok()?;
    props.headers()?.get(&key).and_then(text_value)
}

/// The message's id: the `message_id` property, or the header `id_header`; why not otherwise.
fn message_id(props: &BasicProperties, id_header: Option<&str>) -> Result<String, String> {
    let (id, source) = match id_header {
        Some(name) => (header(props, name), format!("header {name}")),
        None => (props.message_id().cloned(), "message_id property".into()),
    };
    match id {
        Some(id) if !id.is_empty() => Ok(id),
        Some(_) => Err(format!("empty {source}")),
        None => Err(format!("no message id (no {source})")),
    }
}

/// `key=value` of a message body.
fn field<'a>(body: &'a str, key: &str) -> Option<&'a str> {
    body.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

fn table(entries: &[(&str, FieldValue)]) -> Res<FieldTable> {
    let mut t = FieldTable::new();
    for (k, v) in entries {
        let key = (*k)
            .try_into()
            .map_err(|_| format!("header name too long: {k}"))?;
        t.insert(key, v.clone());
    }
    Ok(t)
}

fn long_str(s: &str) -> Res<FieldValue> {
    let v: amqprs::LongStr = s.try_into().map_err(|_| format!("value too long: {s}"))?;
    Ok(FieldValue::S(v))
}

/// The run's topology: the input queue dead-letters into a fanout exchange bound to the
/// dead-letter queue; effects go to their own queue.
async fn declare(ch: &Channel, n: &Names) -> Res<()> {
    let expires = ("x-expires", FieldValue::I(QUEUE_EXPIRES_MS));
    ch.exchange_declare(
        ExchangeDeclareArguments::of_type(&n.dlx, ExchangeType::Fanout)
            .durable(true)
            // Gone with the dead-letter queue's binding (the queue expires if a run fails).
            .auto_delete(true)
            .finish(),
    )
    .await
    .map_err(amqp("declaring the dead-letter exchange"))?;
    for (queue, dead_letters) in [
        (&n.dead, None),
        (&n.effects, None),
        (&n.input, Some(&n.dlx)),
    ] {
        let mut args = vec![expires.clone()];
        if let Some(dlx) = dead_letters {
            args.push(("x-dead-letter-exchange", long_str(dlx)?));
        }
        ch.queue_declare(
            QueueDeclareArguments::new(queue)
                .durable(true)
                .arguments(table(&args)?)
                .finish(),
        )
        .await
        .map_err(amqp("declaring a queue"))?;
    }
    ch.queue_bind(QueueBindArguments::new(&n.dead, &n.dlx, ""))
        .await
        .map_err(amqp("binding the dead-letter queue"))?;
    Ok(())
}

/// Messages ready in `queue` and its consumers (a passive declare: no management plugin needed).
async fn queue_counts(ch: &Channel, queue: &str) -> Res<(u32, u32)> {
    let declared = bounded("RabbitMQ: a passive declare", 30, async {
        ch.queue_declare(QueueDeclareArguments::new(queue).passive(true).finish())
            .await
            .map_err(amqp("reading a queue's counts"))
    })
    .await?;
    declared
        .map(|(_, messages, consumers)| (messages, consumers))
        .ok_or_else(|| format!("RabbitMQ: no answer to a passive declare of {queue}"))
}

/// Every message of `queue`, taken off it (`basic.get` with auto-ack) until it is empty.
async fn drain(ch: &Channel, queue: &str) -> Res<Vec<(BasicProperties, Vec<u8>)>> {
    let mut out = Vec::new();
    loop {
        let got = tokio::time::timeout(
            Duration::from_secs(30),
            ch.basic_get(BasicGetArguments::new(queue).no_ack(true).finish()),
        )
        .await
        .map_err(|_| format!("RabbitMQ: no answer to basic.get on {queue} within 30 s"))?
        .map_err(amqp("basic.get"))?;
        match got {
            Some((_, props, body)) => out.push((props, body)),
            None => return Ok(out),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The worker.

/// A field of an outcome log line, unambiguous: `%`, whitespace (the separators included) and
/// control characters are percent-encoded, byte by byte of their UTF-8; the rest as it is.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c == '%' || c.is_whitespace() || c.is_control() {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The text `escape` encoded.
fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One line per handled delivery, appended before the broker is answered (so a kill between the
/// two repeats the answer, never loses the line): `kind ref copy redelivered pid`, the reference
/// and the copy `escape`d (an id may hold spaces, tabs or newlines).
struct OutcomeLog(Mutex<std::fs::File>);

impl OutcomeLog {
    fn open(dir: &Path) -> Res<Self> {
        let path = dir.join(format!("outcomes-{}.log", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Self(Mutex::new(f)))
    }

    fn record(&self, kind: &str, reference: &str, copy: &str, redelivered: bool) -> Res<()> {
        let line = format!(
            "{kind}\t{}\t{}\t{}\t{}\n",
            escape(reference),
            escape(copy),
            u8::from(redelivered),
            std::process::id()
        );
        lock(&self.0)
            .write_all(line.as_bytes())
            .map_err(|e| format!("writing the outcome log: {e}"))
    }
}

struct Worker {
    store: AsyncStore,
    postgres: bool,
    /// RabbitMQ's `HOST:PORT`, for the first connection and every reconnection.
    amqp: String,
    names: Names,
    id_header: Option<String>,
    log: OutcomeLog,
    stop: PathBuf,
    opts: ConsumerOptions,
}

/// What a delivery carries, read without trusting any of it.
struct Delivery {
    tag: u64,
    redelivered: bool,
    /// The id, or why there is none.
    id: Result<String, String>,
    /// For the logs: the id, else the body's `ref=`.
    reference: String,
    copy: String,
    body: String,
}

enum Committed {
    Done,
    LeaseLost,
}

/// Why a commit did not happen: typed, because what the worker does next depends on it.
enum CommitError {
    /// The store refused what the commit holds (`Error::InvalidInput`): it refuses it every
    /// time, so it is never retried.
    Refused(InvalidInput),
    /// Any other store error: retried in place when transient (`Error::is_transient`), else the
    /// delivery is requeued (the commit's outcome is unknown: the redelivery finds it).
    Store(idemdb::Error),
    /// The example's own trouble with the data (a negative amount, a running total that keeps
    /// moving): requeued like a store error.
    Other(String),
}

impl From<idemdb::Error> for CommitError {
    fn from(e: idemdb::Error) -> Self {
        match e {
            idemdb::Error::InvalidInput(why) => CommitError::Refused(why),
            e => CommitError::Store(e),
        }
    }
}

impl std::fmt::Display for CommitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommitError::Refused(why) => write!(f, "refused by the store: {why}"),
            CommitError::Store(e) => write!(f, "{e}"),
            CommitError::Other(e) => f.write_str(e),
        }
    }
}

/// The entity key of a message's effect (embedded): `effect/` and the SHA-256 of the id, so that
/// it fits the store's key limit for every id the store accepts (`effect/{id}` did not for ids
/// over 248 bytes). Where the worker commits and where the check reads.
fn effect_key(id: &str) -> String {
    format!("effect/{}", idemdb::derive_key(&[id.as_bytes()]))
}

/// How long `lease` has left, by this machine's clock (the clock of both stores here).
fn lease_left(lease: &Lease) -> Duration {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    Duration::from_millis(lease.lease_until().saturating_sub(now))
}

/// What a call retried in place does next.
enum Retry {
    Again,
    /// `RETRY_FOR` is spent.
    GiveUp,
    /// The renewal found the lease lost.
    LeaseLost,
}

/// A store call retried in place while its lease is held: a pause from `RETRY_FIRST` doubling
/// to `RETRY_MAX`, the lease renewed when less than half of it is left, for at most `RETRY_FOR`.
struct InPlace {
    started: Instant,
    pause: Duration,
}

impl InPlace {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            pause: RETRY_FIRST,
        }
    }

    /// Waits before the next try, renewing the lease if it nears its end.
    async fn wait(&mut self, store: &AsyncStore, lease: &mut Lease) -> Retry {
        if self.started.elapsed() + self.pause > RETRY_FOR {
            return Retry::GiveUp;
        }
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(RETRY_MAX);
        if lease_left(lease) < LEASE / 2 {
            match store.renew(lease, LEASE).await {
                Ok(Ok(())) => {}
                Ok(Err(_lost)) => return Retry::LeaseLost,
                // The store is still away: the next try tells.
                Err(_) => {}
            }
        }
        Retry::Again
    }
}

/// Why a consumer stopped before it was asked to.
enum Halt {
    /// Its channel or its connection closed: the worker reconnects.
    Lost(String),
    /// Anything else (the outcome log cannot be written, a publication nacked): the worker exits.
    Fatal(String),
}

/// A consumer's error as a `Halt`: `Lost` when the connection or one of `channels` is closed.
fn halt(conn: &Connection, channels: &[&Channel], e: String) -> Halt {
    if !conn.is_open() || channels.iter().any(|c| !c.is_open()) {
        Halt::Lost(e)
    } else {
        Halt::Fatal(e)
    }
}

impl Worker {
    /// Runs `consumers` consumers on `conn` until they all stop: `Ok` when asked to. When one
    /// lost its channel or the connection, the connection is closed (if still open), so that
    /// every consumer stops, and each is waited for before the `Halt::Lost`.
    async fn session(
        self: &Arc<Self>,
        conn: &Connection,
        consumers: usize,
        session: u64,
    ) -> Result<(), Halt> {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..consumers.max(1) {
            tasks.spawn(self.clone().consume(conn.clone(), session, i));
        }
        let mut lost = None;
        while let Some(done) = tasks.join_next().await {
            match done {
                Ok(Ok(())) => {}
                Ok(Err(Halt::Lost(why))) if lost.is_none() => {
                    eprintln!(
                        "rabbitmq_consumer: worker {}: {why}; closing connection {session} and \
                         waiting for its consumers",
                        std::process::id()
                    );
                    if conn.is_open() {
                        let _ = tokio::time::timeout(Duration::from_secs(10), conn.clone().close())
                            .await;
                    }
                    lost = Some(why);
                }
                Ok(Err(Halt::Lost(_))) => {}
                Ok(Err(Halt::Fatal(e))) => return Err(Halt::Fatal(e)),
                Err(e) => return Err(Halt::Fatal(format!("a consumer task failed: {e}"))),
            }
        }
        lost.map_or(Ok(()), |why| Err(Halt::Lost(why)))
    }

    /// One consumer on a channel of `conn` (and a publisher channel for the effects), until it
    /// is asked to stop; otherwise a `Halt` says why it stopped.
    async fn consume(
        self: Arc<Self>,
        conn: Connection,
        session: u64,
        index: usize,
    ) -> Result<(), Halt> {
        let (ch, watch) = open_channel(&conn).await.map_err(|e| halt(&conn, &[], e))?;
        let on_ch = |e: String| halt(&conn, &[&ch], e);
        ch.basic_qos(BasicQosArguments::new(0, PREFETCH, false))
            .await
            .map_err(amqp("basic.qos"))
            .map_err(on_ch)?;
        let mut publisher = Publisher::open(&conn).await.map_err(on_ch)?;
        let tag = format!("idemdb-{}-{session}-{index}", std::process::id());
        let (tag, mut rx) = ch
            .basic_consume_rx(
                BasicConsumeArguments::new(&self.names.input, &tag)
                    .manual_ack(true)
                    .finish(),
            )
            .await
            .map_err(amqp("basic.consume"))
            .map_err(on_ch)?;
        loop {
            match tokio::time::timeout(IDLE, rx.recv()).await {
                Ok(Some(m)) => self
                    .handle(&ch, &mut publisher, m)
                    .await
                    .map_err(|e| halt(&conn, &[&ch, &publisher.ch], e))?,
                Ok(None) => {
                    return Err(on_ch(format!(
                        "consumer {tag}: RabbitMQ stopped the deliveries ({}; connection open: \
                         {})",
                        watch.closed(),
                        conn.is_open()
                    )))
                }
                Err(_) if !conn.is_open() || !ch.is_open() => {
                    return Err(Halt::Lost(format!(
                        "consumer {tag}: the connection or its channel closed"
                    )))
                }
                Err(_) if self.stop.exists() => break,
                Err(_) => {}
            }
        }
        ch.basic_cancel(BasicCancelArguments::new(&tag))
            .await
            .map_err(amqp("basic.cancel"))
            .map_err(on_ch)?;
        // Deliveries that arrived before the cancel took effect are handled, not dropped.
        while let Ok(Some(m)) = tokio::time::timeout(IDLE, rx.recv()).await {
            self.handle(&ch, &mut publisher, m)
                .await
                .map_err(|e| halt(&conn, &[&ch, &publisher.ch], e))?;
        }
        publisher.close().await;
        let _ = ch.close().await;
        Ok(())
    }

    fn read(&self, m: ConsumerMessage) -> Option<Delivery> {
        let Some(deliver) = m.deliver else {
            eprintln!("rabbitmq_consumer: a delivery without its method frame: skipped");
            return None;
        };
        let props = m.basic_properties.unwrap_or_default();
        let body = String::from_utf8_lossy(&m.content.unwrap_or_default()).into_owned();
        let id = message_id(&props, self.id_header.as_deref());
        let reference = match &id {
            Ok(id) => id.clone(),
            Err(_) => field(&body, "ref").unwrap_or("-").to_owned(),
        };
        Some(Delivery {
            tag: deliver.delivery_tag(),
            redelivered: deliver.redelivered(),
            id,
            reference,
            copy: header(&props, COPY_HEADER).unwrap_or_else(|| "?".into()),
            body,
        })
    }

    fn record(&self, kind: &str, d: &Delivery) -> Res<()> {
        self.log.record(kind, &d.reference, &d.copy, d.redelivered)
    }

    async fn ack(&self, ch: &Channel, d: &Delivery) -> Res<()> {
        ch.basic_ack(BasicAckArguments::new(d.tag, false))
            .await
            .map_err(amqp("basic.ack"))
    }

    async fn requeue(&self, ch: &Channel, d: &Delivery, pause: Duration) -> Res<()> {
        tokio::time::sleep(pause).await;
        ch.basic_nack(BasicNackArguments::new(d.tag, false, true))
            .await
            .map_err(amqp("basic.nack"))
    }

    /// Rejected without requeue: the dead-letter exchange takes it.
    async fn dead_letter(&self, ch: &Channel, d: &Delivery) -> Res<()> {
        ch.basic_reject(BasicRejectArguments::new(d.tag, false))
            .await
            .map_err(amqp("basic.reject"))
    }

    async fn refuse(&self, ch: &Channel, d: &Delivery, reason: &str) -> Res<()> {
        self.record("refused", d)?;
        eprintln!(
            "rabbitmq_consumer: refused delivery {} (ref {:?}): {reason}; dead-lettered",
            d.tag, d.reference
        );
        self.dead_letter(ch, d).await
    }

    /// Publishes the effect downstream and waits for the broker's confirm.
    async fn publish_effect(&self, publisher: &mut Publisher, id: &str, effect: &[u8]) -> Res<()> {
        let props = BasicProperties::default()
            .with_message_id(id)
            .with_persistence(true)
            .finish();
        let seq = publisher
            .publish(&self.names.effects, props, effect.to_vec())
            .await?;
        publisher
            .confirmed(seq, &format!("the effect of {id}"))
            .await
    }

    async fn handle(&self, ch: &Channel, publisher: &mut Publisher, m: ConsumerMessage) -> Res<()> {
        let Some(d) = self.read(m) else {
            return Ok(());
        };
        let id = match &d.id {
            Ok(id) => id.clone(),
            Err(reason) => return self.refuse(ch, &d, reason).await,
        };
        match self.store.begin(GROUP, &id, self.opts).await {
            Ok(Begin::Process(lease)) => self.process(ch, publisher, &d, &id, lease).await,
            Ok(Begin::Completed(replay)) => {
                self.record("duplicate", &d)?;
                if d.redelivered {
                    // Its worker may have died after the commit, before the downstream confirm.
                    self.publish_effect(publisher, &id, &replay.response.body)
                        .await?;
                }
                self.ack(ch, &d).await
            }
            Ok(Begin::Failed(replay)) => match replay.response.meta.get(REFUSED) {
                // A copy of a message whose commit the store refused: refused the same way.
                Some(why) => {
                    self.refuse(ch, &d, &format!("its commit was refused before: {why}"))
                        .await
                }
                // A stored terminal failure of another kind (none in this scenario): a duplicate.
                None => {
                    self.record("duplicate", &d)?;
                    self.ack(ch, &d).await
                }
            },
            Ok(Begin::InProgress { retry_after }) => {
                self.record("in-progress", &d)?;
                let pause =
                    retry_after.clamp(Duration::from_millis(20), Duration::from_millis(250));
                self.requeue(ch, &d, pause).await
            }
            Ok(Begin::Poisoned { attempts }) => {
                self.record("poisoned", &d)?;
                eprintln!(
                    "rabbitmq_consumer: {id} is poisoned ({attempts} attempts); dead-lettered"
                );
                self.dead_letter(ch, &d).await
            }
            Ok(other) => {
                self.record("error", &d)?;
                eprintln!("rabbitmq_consumer: {id}: unexpected answer {other:?}; requeued");
                self.requeue(ch, &d, Duration::from_millis(200)).await
            }
            Err(idemdb::Error::InvalidInput(e)) => {
                self.refuse(ch, &d, &format!("message id refused by the store: {e}"))
                    .await
            }
            Err(e) => {
                self.record("error", &d)?;
                eprintln!("rabbitmq_consumer: {id}: the store failed ({e}); requeued");
                self.requeue(ch, &d, Duration::from_millis(200)).await
            }
        }
    }

    async fn process(
        &self,
        ch: &Channel,
        publisher: &mut Publisher,
        d: &Delivery,
        id: &str,
        mut lease: Lease,
    ) -> Res<()> {
        let amount = field(&d.body, "amount").and_then(|a| a.parse::<i64>().ok());
        let poison = field(&d.body, "kind") == Some("poison");
        let Some(amount) = amount.filter(|_| !poison) else {
            // The processing fails: a retry, until the message is poisoned.
            return match self.store.fail_message(&lease, self.opts).await {
                Ok(Ok(MessageFailed::Poisoned { attempts })) => {
                    self.record("poisoned", d)?;
                    eprintln!(
                        "rabbitmq_consumer: {id} failed {attempts} times: poisoned, dead-lettered"
                    );
                    self.dead_letter(ch, d).await
                }
                Ok(Ok(_)) => {
                    self.record("failed", d)?;
                    self.requeue(ch, d, Duration::from_millis(10)).await
                }
                Ok(Err(_lost)) => {
                    self.record("lease-lost", d)?;
                    self.requeue(ch, d, Duration::ZERO).await
                }
                Err(e) => {
                    self.record("error", d)?;
                    eprintln!("rabbitmq_consumer: {id}: fail_message failed ({e}); requeued");
                    self.requeue(ch, d, Duration::from_millis(200)).await
                }
            };
        };
        let effect = format!(
            "effect payment={id} amount={amount} copy={} worker={}",
            d.copy,
            std::process::id()
        );
        let mut completion = Response::new(effect.clone());
        if field(&d.body, "kind") == Some("unstorable") {
            // Metadata with a NUL byte: both backends refuse it (`InvalidInput::NulByte`), so
            // this message's commit is refused every time.
            completion = completion.with_meta("note", "unstorable\0");
        }
        match self
            .commit_retrying(&mut lease, id, amount, d, &completion)
            .await
        {
            Ok(Committed::Done) => {
                self.record("processed", d)?;
                self.publish_effect(publisher, id, effect.as_bytes())
                    .await?;
                self.ack(ch, d).await
            }
            Ok(Committed::LeaseLost) => {
                // Taken over after our lease ran out, or an earlier try did commit: the
                // redelivery finds out which.
                self.record("lease-lost", d)?;
                self.requeue(ch, d, Duration::ZERO).await
            }
            Err(CommitError::Refused(why)) => self.refuse_commit(ch, d, &mut lease, &why).await,
            Err(e) => {
                // The commit's outcome is unknown; either way a redelivery finds the truth. Not
                // a failure of the handler's: no `fail_message` (the lease runs out instead).
                self.record("error", d)?;
                eprintln!("rabbitmq_consumer: {id}: the commit failed ({e}); requeued");
                self.requeue(ch, d, Duration::from_millis(200)).await
            }
        }
    }

    /// The commit, retried in place with the same lease while it fails with a transient error
    /// (`InPlace`); a retry that finds the lease lost answers `LeaseLost`.
    async fn commit_retrying(
        &self,
        lease: &mut Lease,
        id: &str,
        amount: i64,
        d: &Delivery,
        completion: &Response,
    ) -> Result<Committed, CommitError> {
        let mut retry = InPlace::new();
        loop {
            let committed = if self.postgres {
                self.commit_sql(lease, id, amount, d, completion).await
            } else {
                self.commit_entities(lease, id, amount, d, completion).await
            };
            let e = match committed {
                Err(CommitError::Store(e)) if e.is_transient() => e,
                other => return other,
            };
            eprintln!("rabbitmq_consumer: {id}: the commit failed ({e}); retried in place");
            match retry.wait(&self.store, lease).await {
                Retry::Again => {}
                Retry::LeaseLost => return Ok(Committed::LeaseLost),
                Retry::GiveUp => return Err(CommitError::Store(e)),
            }
        }
    }

    /// A commit the store refused: never retried, never counted as a failed attempt. The lease
    /// ends with a stored terminal failure marked `REFUSED` (the reason, and the attempt), so
    /// that a later copy is refused without processing; then the delivery is dead-lettered.
    async fn refuse_commit(
        &self,
        ch: &Channel,
        d: &Delivery,
        lease: &mut Lease,
        why: &InvalidInput,
    ) -> Res<()> {
        // A NUL byte would make the failure itself unstorable.
        let reason = why.to_string().replace('\0', "\\0");
        let failure = Response::new(Vec::new())
            .with_meta(REFUSED, reason.clone())
            .with_meta(REFUSED_ATTEMPT, lease.attempt().to_string());
        let mut retry = InPlace::new();
        loop {
            let e = match self
                .store
                .fail(lease, FailKind::Terminal(failure.clone()))
                .await
            {
                Ok(Ok(())) => {
                    let reason = format!("the store refused its commit: {reason}");
                    return self.refuse(ch, d, &reason).await;
                }
                Ok(Err(_lost)) => {
                    self.record("lease-lost", d)?;
                    return self.requeue(ch, d, Duration::ZERO).await;
                }
                Err(e) if e.is_transient() => match retry.wait(&self.store, lease).await {
                    Retry::Again => continue,
                    Retry::LeaseLost => {
                        self.record("lease-lost", d)?;
                        return self.requeue(ch, d, Duration::ZERO).await;
                    }
                    Retry::GiveUp => e,
                },
                Err(e) => e,
            };
            // The lease runs out and the next attempt is refused again.
            self.record("error", d)?;
            eprintln!(
                "rabbitmq_consumer: {:?}: storing its refusal failed ({e}); requeued",
                d.reference
            );
            return self.requeue(ch, d, Duration::from_millis(200)).await;
        }
    }

    /// PostgreSQL: the effect row and the completion in one transaction. A `commit_with` that
    /// fails or is refused (`InvalidInput`, before anything of idemdb's is sent) leaves no row:
    /// the transaction is dropped unfinished, which closes its connection and so rolls it back
    /// (the invariant of `SqlTransaction`); a conflict rolls it back explicitly.
    async fn commit_sql(
        &self,
        lease: &Lease,
        id: &str,
        amount: i64,
        d: &Delivery,
        completion: &Response,
    ) -> Result<Committed, CommitError> {
        let copy = d.copy.parse::<i64>().unwrap_or(-1);
        let mut tx = self.store.transaction().await?;
        tx.execute(
            "INSERT INTO effects (message, copy, worker, amount) VALUES ($1, $2, $3, $4)",
            &[
                id.into(),
                SqlValue::Int(copy),
                std::process::id().into(),
                SqlValue::Int(amount),
            ],
        )
        .await?;
        let done = tx
            .commit_with(self.store.commit().complete(lease, completion.clone()))
            .await?;
        Ok(match done {
            Ok(_) => Committed::Done,
            Err(_) => Committed::LeaseLost, // rolled back, the effect row included
        })
    }

    /// Embedded: the message's effect entity (the copies that took effect, one expected; keyed
    /// by `effect_key`) and the running total, by compare-and-swap, in one commit with the
    /// completion.
    async fn commit_entities(
        &self,
        lease: &Lease,
        id: &str,
        amount: i64,
        d: &Delivery,
        completion: &Response,
    ) -> Result<Committed, CommitError> {
        let key = effect_key(id);
        let amount = u64::try_from(amount)
            .map_err(|_| CommitError::Other(format!("negative amount {amount}")))?;
        for _ in 0..10_000 {
            let total = self.store.get_entity(GROUP, "total").await?;
            let (total_expect, total) = match total {
                Some(t) => (
                    Expect::Version(t.version),
                    be_u64(&t.value).map_err(CommitError::Other)?,
                ),
                None => (Expect::Absent, 0),
            };
            let before = self.store.get_entity(GROUP, &key).await?;
            let (effect_expect, mut copies) = match before {
                Some(e) => (
                    Expect::Version(e.version),
                    String::from_utf8_lossy(&e.value).into_owned() + ",",
                ),
                None => (Expect::Absent, String::new()),
            };
            copies.push_str(&d.copy);
            let applied = self
                .store
                .commit()
                .put(GROUP, &key, effect_expect, copies)
                .put(GROUP, "total", total_expect, (total + amount).to_be_bytes())
                .complete(lease, completion.clone())
                .apply()
                .await?;
            match applied {
                Ok(_) => return Ok(Committed::Done),
                Err(CommitConflict::Lease { .. }) => return Ok(Committed::LeaseLost),
                Err(_) => tokio::task::yield_now().await, // the total moved: read it again
            }
        }
        Err(CommitError::Other(
            "the running total kept changing: 10,000 conflicts in a row".into(),
        ))
    }
}

fn be_u64(v: &[u8]) -> Res<u64> {
    let bytes: [u8; 8] = v
        .try_into()
        .map_err(|_| format!("a running total of {} bytes", v.len()))?;
    Ok(u64::from_be_bytes(bytes))
}

fn in_schema(url: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-c%20search_path%3D{SCHEMA}")
}

async fn open_postgres(url: &str, pool: usize) -> Res<AsyncStore> {
    Config::postgres(in_schema(url))
        .pool_size(pool)
        .open_async()
        .await
        .map_err(|e| format!("PostgreSQL at {url} cannot be reached: {e}"))
}

async fn open_embedded(dir: &Path) -> Res<AsyncStore> {
    Config::new(dir.join("store"))
        // A SIGKILL, not a power cut, is what this scenario survives: `Buffered` is enough.
        .durability(Durability::Buffered)
        .open_async()
        .await
        .map_err(|e| format!("the embedded store in {}: {e}", dir.display()))
}

fn consumer_options() -> ConsumerOptions {
    ConsumerOptions::default()
        .lease(LEASE)
        .max_attempts(MAX_ATTEMPTS)
}

/// One worker process: its consumers on a connection to RabbitMQ, and a new connection whenever
/// one is lost (100 ms doubling to 5 s between attempts, each logged), until it is asked to stop.
async fn worker(args: &[String]) -> Res<()> {
    let dir = PathBuf::from(arg(args, "--dir").ok_or("worker: --dir is required")?);
    let prefix = arg(args, "--prefix").ok_or("worker: --prefix is required")?;
    let consumers: usize = num(args, "--consumers", 1)?;
    let amqp_addr = arg(args, "--amqp").unwrap_or_else(|| DEFAULT_AMQP.into());
    host_port(&amqp_addr)?;
    let postgres = arg(args, "--postgres");
    let store = match &postgres {
        Some(url) => open_postgres(url, consumers.clamp(2, 10)).await?,
        None => open_embedded(&dir).await?,
    };
    let w = Arc::new(Worker {
        store,
        postgres: postgres.is_some(),
        amqp: amqp_addr,
        names: Names::new(&prefix),
        id_header: arg(args, "--id-header"),
        log: OutcomeLog::open(&dir)?,
        stop: dir.join("stop"),
        opts: consumer_options(),
    });
    let pid = std::process::id();
    let name = format!("{WORKER_CONNECTION}{pid}");
    let (mut pause, mut session) = (RECONNECT_FIRST, 0u64);
    loop {
        match connect(&w.amqp, &name).await {
            Ok(conn) => {
                session += 1;
                if session > 1 {
                    eprintln!(
                        "rabbitmq_consumer: worker {pid}: reconnected (connection {session})"
                    );
                }
                pause = RECONNECT_FIRST;
                let ended = w.session(&conn, consumers, session).await;
                if conn.is_open() {
                    let _ = tokio::time::timeout(Duration::from_secs(10), conn.close()).await;
                }
                match ended {
                    Ok(()) => return Ok(()),
                    Err(Halt::Fatal(e)) => return Err(e),
                    Err(Halt::Lost(_)) => {} // said by `session`
                }
            }
            Err(e) => eprintln!("rabbitmq_consumer: worker {pid}: {e}"),
        }
        if w.stop.exists() {
            eprintln!("rabbitmq_consumer: worker {pid}: asked to stop; not reconnecting");
            return Ok(());
        }
        eprintln!("rabbitmq_consumer: worker {pid}: reconnecting to RabbitMQ in {pause:?}");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RECONNECT_MAX);
    }
}

// ---------------------------------------------------------------------------------------------
// The check.

struct CheckOpts {
    postgres: Option<String>,
    amqp: String,
    messages: usize,
    duplicate_percent: u64,
    consumers: usize,
    workers: usize,
    kills: usize,
    poison: usize,
    unstorable: usize,
    without_id: usize,
    close_connections: usize,
    id_header: Option<String>,
}

/// What was published.
struct Plan {
    /// Payment id → (amount, copies published): the edge payments included.
    payments: BTreeMap<String, (i64, usize)>,
    /// The edge payments (`edge_ids`), each published twice.
    edge: BTreeSet<String>,
    poison: BTreeSet<String>,
    /// Messages whose commit the store refuses (`kind=unstorable`).
    unstorable: BTreeSet<String>,
    /// The `ref=` of each message published without an id.
    orphans: BTreeSet<String>,
    /// Every publication: payments' copies, poison, unstorable and orphans.
    publications: usize,
}

/// The edge payments' ids: 1 byte, 248 (the longest `effect/{id}` fitted the key limit), 249 and
/// 255 (the store's key limit) bytes, 255 bytes of multi-byte UTF-8 (`é`, `€`, an emoji), two
/// ids that differ only by case, two that differ only by a trailing space.
fn edge_ids() -> Vec<String> {
    let sized = |n: usize| -> String {
        let head = format!("edge-{n}-");
        if n <= head.len() {
            "e".repeat(n)
        } else {
            let fill = "x".repeat(n - head.len());
            head + &fill
        }
    };
    let mut utf8 = String::from("edge-utf8-");
    for c in ['é', '€', '🦀'].iter().cycle() {
        if utf8.len() + c.len_utf8() > 255 {
            break;
        }
        utf8.push(*c);
    }
    while utf8.len() < 255 {
        utf8.push('u');
    }
    let mut ids: Vec<String> = [1, 248, 249, 255].into_iter().map(sized).collect();
    ids.push(utf8);
    ids.extend(["Pay-Case", "pay-case", "pay-space", "pay-space "].map(String::from));
    ids
}

impl Plan {
    fn duplicates(&self) -> usize {
        self.payments.values().map(|(_, c)| c - 1).sum()
    }
}

fn make_plan(o: &CheckOpts, rng: &mut Rng) -> (Plan, Vec<(Option<String>, String, usize)>) {
    let mut plan = Plan {
        payments: BTreeMap::new(),
        edge: BTreeSet::new(),
        poison: BTreeSet::new(),
        unstorable: BTreeSet::new(),
        orphans: BTreeSet::new(),
        publications: 0,
    };
    // (id, body, copy)
    let mut out = Vec::new();
    let pct = o.duplicate_percent.min(100);
    for i in 0..o.messages {
        let id = format!("pay-{i:06}");
        let amount = 100 + i64::try_from(i % 9_900).unwrap_or(0);
        let r = rng.below(100);
        // Of the duplicated share, one in six is published three times (5% of all at 30%).
        let copies = if r < pct / 6 {
            3
        } else if r < pct {
            2
        } else {
            1
        };
        for copy in 0..copies {
            let body = format!("ref={id} amount={amount} kind=payment");
            out.push((Some(id.clone()), body, copy));
        }
        plan.payments.insert(id, (amount, copies));
    }
    for (k, id) in edge_ids().into_iter().enumerate() {
        let amount = 10_000 + i64::try_from(k).unwrap_or(0);
        for copy in 0..2 {
            out.push((
                Some(id.clone()),
                format!("amount={amount} kind=payment"),
                copy,
            ));
        }
        plan.payments.insert(id.clone(), (amount, 2));
        plan.edge.insert(id);
    }
    for k in 0..o.poison {
        let id = format!("poison-{k:03}");
        out.push((Some(id.clone()), format!("ref={id} kind=poison"), 0));
        plan.poison.insert(id);
    }
    for k in 0..o.without_id {
        let r = format!("orphan-{k:03}");
        out.push((None, format!("ref={r} amount=1 kind=payment"), 0));
        plan.orphans.insert(r);
    }
    // Fisher-Yates.
    for i in (1..out.len()).rev() {
        let j = usize::try_from(rng.below(i as u64 + 1)).unwrap_or(0);
        out.swap(i, j);
    }
    // The unstorable messages first: they are handled before any SIGKILL (the first lands a
    // good share of the payments later), so the check can require each to be refused at its
    // first attempt; a kill while one is held would make its next attempt a takeover.
    let unstorable: Vec<String> = (0..o.unstorable)
        .map(|k| format!("unstorable-{k:03}"))
        .collect();
    let first = unstorable.iter().map(|id| {
        (
            Some(id.clone()),
            format!("ref={id} amount=1 kind=unstorable"),
            0,
        )
    });
    out.splice(0..0, first);
    plan.unstorable.extend(unstorable);
    plan.publications = out.len();
    (plan, out)
}

async fn publish_all(
    conn: &Connection,
    n: &Names,
    id_header: Option<&str>,
    list: Vec<(Option<String>, String, usize)>,
) -> Res<()> {
    let mut p = Publisher::open(conn).await?;
    let mut last = 0;
    for (i, (id, body, copy)) in list.into_iter().enumerate() {
        let copy_value = FieldValue::I(i32::try_from(copy).unwrap_or(0));
        let mut props = BasicProperties::default();
        props.with_persistence(true);
        match (&id, id_header) {
            (Some(id), Some(h)) => {
                props.with_headers(table(&[(h, long_str(id)?), (COPY_HEADER, copy_value)])?);
            }
            (Some(id), None) => {
                props
                    .with_message_id(id)
                    .with_headers(table(&[(COPY_HEADER, copy_value)])?);
            }
            (None, _) => {
                props.with_headers(table(&[(COPY_HEADER, copy_value)])?);
            }
        }
        last = p
            .publish(&n.input, props.finish(), body.into_bytes())
            .await?;
        if (i + 1) % 500 == 0 {
            p.confirmed(last, "the published payments").await?;
        }
    }
    p.confirmed(last, "the published payments").await?;
    p.close().await;
    Ok(())
}

/// The workers' outcome logs, read back as they grow.
#[derive(Default)]
struct Outcomes {
    /// How far each log was read (complete lines only).
    offsets: BTreeMap<PathBuf, u64>,
    lines: usize,
    redelivered: usize,
    /// Lines per kind.
    count: BTreeMap<String, usize>,
    /// Distinct (ref, copy) per kind.
    pairs: BTreeMap<String, BTreeSet<(String, String)>>,
    /// Publications that reached an outcome that ends them: processed, acknowledged as a
    /// duplicate, dead-lettered as poison or refused.
    ended: BTreeSet<(String, String)>,
    /// Payments processed.
    processed: BTreeSet<String>,
}

impl Outcomes {
    /// Reads the lines the workers appended since the last call.
    fn refresh(&mut self, dir: &Path) -> Res<()> {
        use std::io::{Read as _, Seek as _};
        let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in entries {
            let path = entry.map_err(|e| e.to_string())?.path();
            let is_log = path
                .file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| f.starts_with("outcomes-") && f.ends_with(".log"));
            if !is_log {
                continue;
            }
            let start = self.offsets.get(&path).copied().unwrap_or(0);
            let mut buf = Vec::new();
            let mut f =
                std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            f.seek(std::io::SeekFrom::Start(start))
                .and_then(|_| f.read_to_end(&mut buf))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            let Some(end) = buf.iter().rposition(|b| *b == b'\n') else {
                continue;
            };
            for line in String::from_utf8_lossy(&buf[..end]).lines() {
                self.add(line);
            }
            self.offsets.insert(path, start + end as u64 + 1);
        }
        Ok(())
    }

    fn add(&mut self, line: &str) {
        let f: Vec<&str> = line.split('\t').collect();
        let [kind, reference, copy, redelivered, _pid] = f.as_slice() else {
            return;
        };
        let (reference, copy) = (unescape(reference), unescape(copy));
        let pair = (reference.clone(), copy);
        self.lines += 1;
        self.redelivered += usize::from(*redelivered == "1");
        *self.count.entry((*kind).to_owned()).or_default() += 1;
        if matches!(*kind, "processed" | "duplicate" | "poisoned" | "refused") {
            self.ended.insert(pair.clone());
        }
        if *kind == "processed" {
            self.processed.insert(reference);
        }
        self.pairs
            .entry((*kind).to_owned())
            .or_default()
            .insert(pair);
    }

    fn lines_of(&self, kind: &str) -> usize {
        self.count.get(kind).copied().unwrap_or(0)
    }

    fn pairs_of(&self, kind: &str) -> BTreeSet<(String, String)> {
        self.pairs.get(kind).cloned().unwrap_or_default()
    }
}

struct Workers {
    exe: PathBuf,
    base: Vec<String>,
    shares: Vec<usize>,
    children: Vec<tokio::process::Child>,
}

impl Workers {
    fn spawn(&self, i: usize) -> Res<tokio::process::Child> {
        let share = self.shares.get(i).copied().unwrap_or(1);
        tokio::process::Command::new(&self.exe)
            .args(&self.base)
            .args(["--consumers", &share.to_string()])
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting a worker: {e}"))
    }

    async fn kill_and_restart(&mut self, i: usize) -> Res<()> {
        let fresh = {
            let Some(child) = self.children.get_mut(i) else {
                return Ok(());
            };
            child.start_kill().map_err(|e| format!("SIGKILL: {e}"))?;
            tokio::time::timeout(Duration::from_secs(30), child.wait())
                .await
                .map_err(|_| format!("worker {i} did not die within 30 s of its SIGKILL"))?
                .map_err(|e| e.to_string())?;
            self.spawn(i)?
        };
        self.children[i] = fresh;
        Ok(())
    }

    /// An error if a worker exited by itself (its reason is on stderr above).
    fn check_alive(&mut self) -> Res<()> {
        for (i, child) in self.children.iter_mut().enumerate() {
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                return Err(format!(
                    "worker {i} exited by itself ({status}); its error is printed above"
                ));
            }
        }
        Ok(())
    }
}

/// `rabbitmqctl ARGS`: its output, or an error naming it.
async fn rabbitmqctl(args: &[&str]) -> Res<String> {
    let what = format!("rabbitmqctl {}", args.join(" "));
    let run = tokio::process::Command::new("rabbitmqctl")
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .map_err(|_| format!("{what}: no answer within 60 s"))?
        .map_err(|e| {
            format!(
                "{what}: cannot run it ({e}); the check closes the workers' connections with \
                 rabbitmqctl: run it on RabbitMQ's machine, as a user allowed to use rabbitmqctl"
            )
        })?;
    if !out.status.success() {
        return Err(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The workers' connections that `rabbitmqctl list_connections` shows: (the connection's pid,
/// the worker's process id), found by their name (`WORKER_CONNECTION` and one of `pids`).
async fn worker_connections(pids: &[u32]) -> Res<Vec<(String, u32)>> {
    let listed = rabbitmqctl(&[
        "-q",
        "list_connections",
        "--no-table-headers",
        "pid",
        "client_properties",
    ])
    .await?;
    Ok(listed
        .lines()
        .filter_map(|line| {
            let (conn, props) = line.split_once('\t')?;
            let worker = pids
                .iter()
                .find(|p| props.contains(&format!("\"{WORKER_CONNECTION}{p}\"")))?;
            Some((conn.trim().to_owned(), *worker))
        })
        .collect())
}

/// Closes the workers' connections from the broker's side with `rabbitmqctl close_connection`
/// (waiting up to 20 s for one to be listed: a worker restarted a moment ago may not have
/// connected yet), then waits up to 60 s for each of those workers to be connected again; how
/// many connections it closed, at least one.
async fn close_worker_connections(pids: &[u32]) -> Res<usize> {
    let t = Instant::now();
    let found = loop {
        let found = worker_connections(pids).await?;
        if !found.is_empty() || t.elapsed() > Duration::from_secs(20) {
            break found;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (mut closed, mut last_error) = (Vec::new(), None);
    for (conn, worker) in found {
        match rabbitmqctl(&["close_connection", &conn, "test: closed by the check"]).await {
            Ok(_) => closed.push((conn, worker)),
            Err(e) => last_error = Some(e),
        }
    }
    if closed.is_empty() {
        return Err(last_error.unwrap_or_else(|| {
            format!(
                "rabbitmqctl list_connections shows no connection named {WORKER_CONNECTION}PID \
                 of the workers {pids:?} within 20 s"
            )
        }));
    }
    let t = Instant::now();
    loop {
        let now = worker_connections(pids).await?;
        // A worker is back once a connection of its own is listed that was not closed.
        let back = |w: u32| {
            now.iter()
                .any(|(c, n)| *n == w && !closed.iter().any(|(x, _)| x == c))
        };
        let waiting: Vec<u32> = closed
            .iter()
            .map(|(_, w)| *w)
            .filter(|w| !back(*w))
            .collect();
        if waiting.is_empty() {
            break;
        }
        if t.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "the workers {waiting:?} did not reconnect within 60 s of RabbitMQ closing their \
                 connections"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "rabbitmq_consumer: closed {} worker connection(s) from the broker's side (rabbitmqctl \
         close_connection); every one of those workers reconnected within {:.1?}",
        closed.len(),
        t.elapsed()
    );
    Ok(closed.len())
}

/// The first characters of a long id, for a message.
fn short(id: &str) -> String {
    id.chars().take(24).collect()
}

fn pct(part: usize, whole: usize) -> String {
    if whole == 0 {
        "n/a (no duplicates published)".into()
    } else {
        format!("{:.2}%", part as f64 * 100.0 / whole as f64)
    }
}

/// Effects as the application stored them: payment id → the copies that took effect.
struct Effects {
    copies: BTreeMap<String, Vec<String>>,
    amount_sum: i64,
    /// Embedded: the running total, and the sum its effects say it should be.
    total: Option<u64>,
}

async fn read_effects(store: &AsyncStore, plan: &Plan, postgres: bool) -> Res<Effects> {
    let mut copies: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut amount_sum = 0i64;
    let mut total = None;
    if postgres {
        let mut tx = store.transaction().await.map_err(|e| e.to_string())?;
        let rows = tx
            .query("SELECT message, copy, amount FROM effects", &[])
            .await
            .map_err(|e| e.to_string())?;
        tx.commit().await.map_err(|e| e.to_string())?;
        for row in rows {
            match row.as_slice() {
                [SqlValue::Text(m), SqlValue::Int(c), SqlValue::Int(a)] => {
                    copies.entry(m.clone()).or_default().push(c.to_string());
                    amount_sum += a;
                }
                other => return Err(format!("unexpected effects row {other:?}")),
            }
        }
    } else {
        let ids = plan
            .payments
            .keys()
            .chain(plan.poison.iter())
            .chain(plan.unstorable.iter())
            .chain(plan.orphans.iter());
        for id in ids {
            let entity = match store.get_entity(GROUP, effect_key(id)).await {
                Ok(entity) => entity,
                // A key the store refuses holds no effect (the payment's check says it is lost).
                Err(idemdb::Error::InvalidInput(_)) => None,
                Err(e) => return Err(e.to_string()),
            };
            if let Some(e) = entity {
                let list: Vec<String> = String::from_utf8_lossy(&e.value)
                    .split(',')
                    .map(str::to_owned)
                    .collect();
                let amount = plan.payments.get(id).map_or(0, |(a, _)| *a);
                amount_sum += amount * i64::try_from(list.len()).unwrap_or(0);
                copies.insert(id.clone(), list);
            }
        }
        if let Some(t) = store
            .get_entity(GROUP, "total")
            .await
            .map_err(|e| e.to_string())?
        {
            total = Some(be_u64(&t.value)?);
        }
    }
    Ok(Effects {
        copies,
        amount_sum,
        total,
    })
}

/// What idemdb says of the messages.
struct Marks {
    /// Payments completed.
    completed: usize,
    /// Poison messages poisoned.
    poisoned: usize,
    /// Unstorable messages ended with a stored refusal of their first attempt.
    refused_first: usize,
    /// Every other answer, as `id: answer`.
    wrong: Vec<String>,
}

/// Asks idemdb about every message (concurrently): payments must be completed, poison messages
/// poisoned, unstorable messages failed with the refusal of their first attempt.
async fn marks(store: &AsyncStore, plan: &Plan) -> Res<Marks> {
    let ids: Vec<String> = plan
        .payments
        .keys()
        .chain(plan.poison.iter())
        .chain(plan.unstorable.iter())
        .cloned()
        .collect();
    let mut set = tokio::task::JoinSet::new();
    for chunk in ids.chunks(ids.len().div_ceil(16).max(1)) {
        let (store, chunk) = (store.clone(), chunk.to_vec());
        set.spawn(async move {
            let mut out = Vec::new();
            for id in chunk {
                let b = store.begin(GROUP, &id, consumer_options()).await;
                out.push((id, b.map_err(|e| e.to_string())));
            }
            out
        });
    }
    let mut m = Marks {
        completed: 0,
        poisoned: 0,
        refused_first: 0,
        wrong: Vec::new(),
    };
    while let Some(r) = set.join_next().await {
        for (id, b) in r.map_err(|e| e.to_string())? {
            let payment = plan.payments.contains_key(&id);
            let poison = plan.poison.contains(&id);
            let refused_first = |r: &idemdb::Replay| {
                r.response.meta.contains_key(REFUSED)
                    && r.response.meta.get(REFUSED_ATTEMPT).map(String::as_str) == Some("1")
            };
            match b? {
                Begin::Completed(_) if payment => m.completed += 1,
                Begin::Poisoned { .. } if poison => m.poisoned += 1,
                Begin::Failed(r) if plan.unstorable.contains(&id) && refused_first(&r) => {
                    m.refused_first += 1;
                }
                other => m.wrong.push(format!("{:?}: {other:?}", short(&id))),
            }
        }
    }
    Ok(m)
}

async fn check(o: CheckOpts) -> Res<()> {
    let started = Instant::now();
    let run = format!(
        "{}-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0),
        std::process::id()
    );
    let prefix = format!("idemdb.rabbitmq.{run}");
    let names = Names::new(&prefix);

    // The services first: fail naming the one that cannot be reached.
    let conn = connect(&o.amqp, "idemdb-rabbitmq-check").await?;
    let store = match &o.postgres {
        Some(url) => {
            Some(bounded(&format!("PostgreSQL at {url}"), 120, setup_postgres(url)).await?)
        }
        None => None,
    };
    let (ch, _watch) = open_channel(&conn).await?;
    bounded("RabbitMQ: declaring the queues", 60, declare(&ch, &names)).await?;
    // The outcome logs (and the embedded store): a directory of the run's own.
    let dir = std::env::temp_dir().join(format!("idemdb-rabbitmq-{run}"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;

    let result = run_and_verify(&o, &names, &dir, &conn, &ch, store, started).await;
    if result.is_ok() {
        let cleanup = async {
            for q in [&names.input, &names.dead, &names.effects] {
                let _ = ch.queue_delete(QueueDeleteArguments::new(q)).await;
            }
            let _ = ch
                .exchange_delete(ExchangeDeleteArguments::new(&names.dlx))
                .await;
            Ok(())
        };
        let _ = bounded("RabbitMQ: deleting the run's queues", 30, cleanup).await;
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!(
            "rabbitmq_consumer: left for inspection: {} (outcome logs, store) and the queues \
             {prefix}.* (they expire after an hour unused)",
            dir.display()
        );
    }
    let _ = bounded("closing", 10, async {
        let _ = ch.close().await;
        let _ = conn.close().await;
        Ok(())
    })
    .await;
    result
}

/// The schema emptied, the store opened in it, and the application's effects table.
async fn setup_postgres(url: &str) -> Res<AsyncStore> {
    let (admin, c) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("PostgreSQL at {url} cannot be reached: {e}"))?;
    tokio::spawn(c);
    admin
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA}"
        ))
        .await
        .map_err(|e| format!("PostgreSQL at {url}: emptying {SCHEMA}: {e}"))?;
    let store = open_postgres(url, 8).await?;
    // No unique constraint: a duplicated effect would be a second row.
    let mut tx = store.transaction().await.map_err(|e| e.to_string())?;
    tx.execute(
        "CREATE TABLE effects (message text NOT NULL, copy integer NOT NULL, \
         worker integer NOT NULL, amount bigint NOT NULL)",
        &[],
    )
    .await
    .map_err(|e| e.to_string())?;
    tx.commit().await.map_err(|e| e.to_string())?;
    Ok(store)
}

async fn run_and_verify(
    o: &CheckOpts,
    names: &Names,
    dir: &Path,
    conn: &Connection,
    ch: &Channel,
    store: Option<AsyncStore>,
    started: Instant,
) -> Res<()> {
    let mut rng = Rng(0x0051_D0C5 ^ o.messages as u64);
    let (plan, list) = make_plan(o, &mut rng);
    let t = Instant::now();
    publish_all(conn, names, o.id_header.as_deref(), list).await?;
    let publish_time = t.elapsed();
    println!(
        "rabbitmq_consumer: published {} messages ({} payments, {} of them edge payments, {} \
         duplicate publications, {} poison, {} unstorable, {} without an id) with publisher \
         confirms in {publish_time:.1?}",
        plan.publications,
        plan.payments.len(),
        plan.edge.len(),
        plan.duplicates(),
        plan.poison.len(),
        plan.unstorable.len(),
        plan.orphans.len()
    );

    // The workers.
    let processes = if o.postgres.is_some() {
        o.workers.max(1)
    } else {
        1
    };
    let per = o.consumers.max(1) / processes;
    let extra = o.consumers.max(1) % processes;
    let shares: Vec<usize> = (0..processes)
        .map(|i| (per + usize::from(i < extra)).max(1))
        .collect();
    let mut base: Vec<String> = vec![
        "worker".into(),
        "--dir".into(),
        dir.display().to_string(),
        "--prefix".into(),
        names.prefix.clone(),
        "--amqp".into(),
        o.amqp.clone(),
    ];
    if let Some(url) = &o.postgres {
        base.extend(["--postgres".into(), url.clone()]);
    }
    if let Some(h) = &o.id_header {
        base.extend(["--id-header".into(), h.clone()]);
    }
    let mut w = Workers {
        exe: std::env::current_exe().map_err(|e| e.to_string())?,
        base,
        shares,
        children: Vec::new(),
    };
    for i in 0..processes {
        let child = w.spawn(i)?;
        w.children.push(child);
    }
    let t = Instant::now();

    // The killer: SIGKILLs a random worker at evenly spread moments of progress (plus a random
    // pause), and restarts it; until every publication has reached its outcome. Between kills,
    // the broker closes every worker's connection `--close-connections` times.
    let (mut killed, mut last_ended, mut last_change) = (0usize, 0usize, Instant::now());
    let (mut closes, mut closed_connections) = (0usize, 0usize);
    // Close j lands when close_span × (j + 1.5) payments are processed: halfway between kills.
    let close_span = plan.payments.len() / (o.kills.max(o.close_connections) + 1);
    let close_target = |j: usize| close_span * (j + 1) + close_span / 2;
    let mut out = Outcomes::default();
    // Kill k lands when span × (k + 1) payments are processed, give or take a quarter span.
    let span = plan.payments.len() / (o.kills + 1);
    let mut next_target = |k: usize| {
        span * (k + 1) - span / 4 + usize::try_from(rng.below(span as u64 / 2 + 1)).unwrap_or(0)
    };
    let mut target = next_target(0);
    loop {
        out.refresh(dir)?;
        let ended = out.ended.len();
        if ended >= plan.publications && killed >= o.kills && closes >= o.close_connections {
            break;
        }
        if ended != last_ended {
            (last_ended, last_change) = (ended, Instant::now());
        } else if last_change.elapsed() > STALL {
            return Err(format!(
                "no progress for {STALL:?} while waiting for every publication to be processed, \
                 acknowledged as a duplicate, dead-lettered or refused: {ended} of {} done",
                plan.publications
            ));
        }
        if killed < o.kills && out.processed.len() >= target {
            let i = killed % processes;
            w.kill_and_restart(i).await?;
            killed += 1;
            target = next_target(killed);
            continue;
        }
        if closes < o.close_connections && out.processed.len() >= close_target(closes) {
            let pids: Vec<u32> = w
                .children
                .iter()
                .filter_map(tokio::process::Child::id)
                .collect();
            closed_connections += close_worker_connections(&pids).await?;
            closes += 1;
            continue;
        }
        w.check_alive()?;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Redeliveries of publications already ended (a worker killed after its outcome, before
    // its ack) are still handled; wait for the queue to be empty, then stop the workers.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (ready, _) = queue_counts(ch, &names.input).await?;
        if ready == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{ready} messages still ready in {} 120 s after every publication ended",
                names.input
            ));
        }
        w.check_alive()?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    std::fs::write(dir.join("stop"), b"").map_err(|e| e.to_string())?;
    for (i, child) in w.children.iter_mut().enumerate() {
        let status = tokio::time::timeout(Duration::from_secs(120), child.wait())
            .await
            .map_err(|_| format!("worker {i} did not stop within 120 s of being asked to"))?
            .map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("worker {i} failed: {status}"));
        }
    }
    let consume_time = t.elapsed();
    // Nothing left unacknowledged: once the workers' connections are gone, the input is empty.
    let deadline = Instant::now() + Duration::from_secs(30);
    let leftover = loop {
        let (ready, consumers) = queue_counts(ch, &names.input).await?;
        if consumers == 0 {
            break ready;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{consumers} consumers still on {} 30 s after the workers exited",
                names.input
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    // The results.
    out.refresh(dir)?;
    let store = match store {
        Some(s) => s,
        None => open_embedded(dir).await?,
    };
    let effects = read_effects(&store, &plan, o.postgres.is_some()).await?;
    let marks = marks(&store, &plan).await?;
    let dead = drain(ch, &names.dead).await?;
    let downstream = drain(ch, &names.effects).await?;

    let mut failures = Vec::new();
    let applications: usize = effects.copies.values().map(Vec::len).sum();
    let duplicated: usize = effects
        .copies
        .values()
        .map(|c| c.len().saturating_sub(1))
        .sum();
    let lost: Vec<&String> = plan
        .payments
        .keys()
        .filter(|id| !effects.copies.contains_key(*id))
        .collect();
    let foreign: Vec<&String> = effects
        .copies
        .keys()
        .filter(|id| !plan.payments.contains_key(*id))
        .collect();
    let expected_sum: i64 = plan.payments.values().map(|(a, _)| a).sum();
    // Dedup: each publication of a payment other than the one that took effect must have been
    // acknowledged as a duplicate.
    let dup_pairs = out.pairs_of("duplicate");
    let mut dup_acked = 0;
    for (id, (_, copies)) in &plan.payments {
        let effect_copy = effects
            .copies
            .get(id)
            .and_then(|c| c.first())
            .cloned()
            .unwrap_or_default();
        for c in 0..*copies {
            let c = c.to_string();
            if c != effect_copy && dup_pairs.contains(&(id.clone(), c)) {
                dup_acked += 1;
            }
        }
    }
    let redelivered_after_effect = dup_pairs
        .iter()
        .filter(|(id, c)| effects.copies.get(id).and_then(|v| v.first()) == Some(c))
        .count();
    // The dead-letter queue, read off the broker.
    let (mut dead_poison, mut dead_unstorable, mut dead_orphans, mut dead_other) = (
        BTreeSet::new(),
        BTreeSet::new(),
        BTreeSet::new(),
        Vec::new(),
    );
    for (props, body) in &dead {
        let body = String::from_utf8_lossy(body);
        match message_id(props, o.id_header.as_deref()) {
            Ok(id) if plan.poison.contains(&id) => {
                dead_poison.insert(id);
            }
            Ok(id) if plan.unstorable.contains(&id) => {
                dead_unstorable.insert(id);
            }
            Ok(id) => dead_other.push(id),
            Err(_) => match field(&body, "ref") {
                Some(r) if plan.orphans.contains(r) => {
                    dead_orphans.insert(r.to_owned());
                }
                _ => dead_other.push(body.into_owned()),
            },
        }
    }
    let downstream_ids: BTreeSet<String> = downstream
        .iter()
        .filter_map(|(p, _)| p.message_id().cloned())
        .collect();
    let refused: BTreeSet<String> = out
        .pairs_of("refused")
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    let refused_expected: BTreeSet<String> =
        plan.orphans.union(&plan.unstorable).cloned().collect();
    // An unstorable message is refused at its first attempt, never retried: no other outcome.
    let unstorable_retried: BTreeSet<String> = ["failed", "error", "poisoned", "processed"]
        .iter()
        .flat_map(|kind| out.pairs_of(kind))
        .map(|(r, _)| r)
        .filter(|r| plan.unstorable.contains(r))
        .collect();
    let unstorable_effects: Vec<&String> = plan
        .unstorable
        .iter()
        .filter(|id| effects.copies.contains_key(*id))
        .collect();
    // The edge payments: exactly one effect each (the general checks count them too).
    let edge_wrong: Vec<String> = plan
        .edge
        .iter()
        .filter(|id| effects.copies.get(*id).map(Vec::len) != Some(1))
        .map(|id| {
            let n = effects.copies.get(id).map_or(0, Vec::len);
            format!("{} bytes {:?}…: {n} effects", id.len(), short(id))
        })
        .collect();

    if duplicated > 0 {
        failures.push(format!("{duplicated} duplicated effects"));
    }
    if !lost.is_empty() {
        failures.push(format!(
            "{} payments without an effect (first: {:?})",
            lost.len(),
            lost.first().map(|id| short(id))
        ));
    }
    if !foreign.is_empty() {
        failures.push(format!(
            "effects of messages that are not payments: {foreign:?}"
        ));
    }
    if effects.amount_sum != expected_sum {
        failures.push(format!(
            "the effects add up to {}, the payments to {expected_sum}",
            effects.amount_sum
        ));
    }
    if let Some(total) = effects.total {
        if i64::try_from(total).ok() != Some(effects.amount_sum) {
            failures.push(format!(
                "the running total is {total}, its effect entities add up to {}",
                effects.amount_sum
            ));
        }
    } else if o.postgres.is_none() {
        failures.push("no running total".into());
    }
    if dup_acked != plan.duplicates() {
        failures.push(format!(
            "{dup_acked} of {} duplicate publications acknowledged as duplicates",
            plan.duplicates()
        ));
    }
    if !edge_wrong.is_empty() {
        failures.push(format!(
            "{} of {} edge payments without exactly one effect: {}",
            edge_wrong.len(),
            plan.edge.len(),
            edge_wrong.join(", ")
        ));
    }
    if marks.completed != plan.payments.len()
        || marks.poisoned != plan.poison.len()
        || marks.refused_first != plan.unstorable.len()
    {
        failures.push(format!(
            "idemdb marks {} payments completed, {} messages poisoned and {} refused at their \
             first attempt; expected {}, {} and {}; first of the others: {:?}",
            marks.completed,
            marks.poisoned,
            marks.refused_first,
            plan.payments.len(),
            plan.poison.len(),
            plan.unstorable.len(),
            marks.wrong.first()
        ));
    }
    if dead_poison != plan.poison {
        failures.push(format!(
            "{} of {} poison messages in the dead-letter queue",
            dead_poison.len(),
            plan.poison.len()
        ));
    }
    if dead_orphans != plan.orphans
        || dead_unstorable != plan.unstorable
        || refused != refused_expected
    {
        let wrongly: Vec<&String> = refused.difference(&refused_expected).collect();
        failures.push(format!(
            "{} messages refused, {} expected ({} without an id, {} unstorable); in the \
             dead-letter queue {} without an id and {} unstorable; refused but not expected to \
             be: {}",
            refused.len(),
            refused_expected.len(),
            plan.orphans.len(),
            plan.unstorable.len(),
            dead_orphans.len(),
            dead_unstorable.len(),
            wrongly
                .iter()
                .map(|id| format!("{} bytes {:?}…", id.len(), short(id)))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !unstorable_retried.is_empty() {
        failures.push(format!(
            "unstorable messages retried instead of refused: {unstorable_retried:?}"
        ));
    }
    if !unstorable_effects.is_empty() {
        failures.push(format!(
            "unstorable messages with an effect: {unstorable_effects:?}"
        ));
    }
    if o.close_connections > 0 && closed_connections == 0 {
        failures.push("no worker connection was closed".into());
    }
    if !dead_other.is_empty() {
        failures.push(format!(
            "{} unexpected messages in the dead-letter queue (first: {:?})",
            dead_other.len(),
            dead_other.first().map(|m| short(m))
        ));
    }
    let missing_downstream = plan
        .payments
        .keys()
        .filter(|id| !downstream_ids.contains(*id))
        .count();
    if missing_downstream > 0 || downstream.len() < plan.payments.len() {
        failures.push(format!(
            "{missing_downstream} effects never published downstream ({} publications read)",
            downstream.len()
        ));
    }
    if leftover > 0 {
        failures.push(format!(
            "{leftover} messages left in {} after the workers stopped",
            names.input
        ));
    }
    if killed != o.kills {
        failures.push(format!("{killed} SIGKILLs, {} asked", o.kills));
    }

    let backend = match &o.postgres {
        Some(_) => format!("PostgreSQL, {processes} worker processes"),
        None => "embedded RocksDB, 1 worker process".into(),
    };
    let rows: Vec<(&str, String)> = vec![
        ("backend", backend),
        (
            "consumers (prefetch each)",
            format!("{} ({PREFETCH})", o.consumers),
        ),
        (
            "payments (distinct messages)",
            plan.payments.len().to_string(),
        ),
        (
            "duplicate publications (2 or 3 copies)",
            plan.duplicates().to_string(),
        ),
        (
            "  of them edge payments (1/248/249/255 bytes, UTF-8, case, space)",
            plan.edge.len().to_string(),
        ),
        (
            "poison / unstorable / without id messages",
            format!(
                "{} / {} / {}",
                plan.poison.len(),
                plan.unstorable.len(),
                plan.orphans.len()
            ),
        ),
        ("publications in all", plan.publications.to_string()),
        ("deliveries handled", out.lines.to_string()),
        (
            "  of them redelivered by the broker",
            out.redelivered.to_string(),
        ),
        ("effects (processed)", applications.to_string()),
        ("duplicated effects", duplicated.to_string()),
        ("payments without an effect", lost.len().to_string()),
        (
            "edge payments with exactly one effect",
            format!(
                "{} of {}",
                plan.edge.len() - edge_wrong.len(),
                plan.edge.len()
            ),
        ),
        (
            "duplicates acknowledged as duplicates",
            dup_acked.to_string(),
        ),
        (
            "dedup rate (acked as duplicate / duplicate publications)",
            pct(dup_acked, plan.duplicates()),
        ),
        (
            "redeliveries of a processed copy acked as duplicates",
            redelivered_after_effect.to_string(),
        ),
        (
            "in progress elsewhere: requeued",
            out.lines_of("in-progress").to_string(),
        ),
        (
            "failed attempts requeued",
            out.lines_of("failed").to_string(),
        ),
        (
            "leases lost at commit: requeued",
            out.lines_of("lease-lost").to_string(),
        ),
        ("store errors: requeued", out.lines_of("error").to_string()),
        (
            "poisoned, dead-lettered (read off the DLQ)",
            format!("{} ({})", out.pairs_of("poisoned").len(), dead_poison.len()),
        ),
        (
            "refused: without id + unstorable + others (read off the DLQ)",
            format!(
                "{} + {} + {} ({} + {} + {})",
                refused.intersection(&plan.orphans).count(),
                refused.intersection(&plan.unstorable).count(),
                refused.difference(&refused_expected).count(),
                dead_orphans.len(),
                dead_unstorable.len(),
                dead_other.len()
            ),
        ),
        (
            "unstorable: refused at 1st attempt / retried / with an effect",
            format!(
                "{} / {} / {}",
                marks.refused_first,
                unstorable_retried.len(),
                unstorable_effects.len()
            ),
        ),
        (
            "downstream effect publications (distinct)",
            format!("{} ({})", downstream.len(), downstream_ids.len()),
        ),
        ("SIGKILLs", killed.to_string()),
        (
            "worker connections closed by the broker, reconnected (rabbitmqctl)",
            format!("{closed_connections} (in {closes} rounds)"),
        ),
        ("publish time", format!("{publish_time:.1?}")),
        (
            "consume time (workers start to stop)",
            format!("{consume_time:.1?}"),
        ),
        ("wall time", format!("{:.1?}", started.elapsed())),
    ];
    println!("| measure | value |");
    println!("|---|---|");
    for (k, v) in &rows {
        println!("| {k} | {v} |");
    }
    if failures.is_empty() {
        println!(
            "rabbitmq_consumer: PASS: every payment took effect exactly once ({applications} \
             effects, none duplicated, none lost, the edge payments included), dedup rate {}, \
             every poison message in the dead-letter queue, every unstorable message refused at \
             its first attempt with no effect, every message without an id refused, every \
             effect published downstream, the workers reconnected after {closed_connections} \
             closed connection(s)",
            pct(dup_acked, plan.duplicates())
        );
        Ok(())
    } else {
        Err(format!("FAIL: {}", failures.join("; ")))
    }
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn num<T: FromStr>(args: &[String], name: &str, default: T) -> Res<T> {
    match arg(args, name) {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| format!("{name} {v}: expected a number")),
    }
}

const USAGE: &str = "usage: rabbitmq_consumer check [--postgres URL] [--messages 10000] \
    [--duplicate-percent 30] [--consumers 50] [--workers 4] [--kills 5] [--poison 5] \
    [--unstorable 3] [--without-id 5] [--close-connections 1] [--id-header NAME] \
    [--amqp HOST:PORT]";

const CHECK_FLAGS: [&str; 12] = [
    "--postgres",
    "--messages",
    "--duplicate-percent",
    "--consumers",
    "--workers",
    "--kills",
    "--poison",
    "--unstorable",
    "--without-id",
    "--close-connections",
    "--id-header",
    "--amqp",
];

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("worker") => worker(&args).await,
        Some("check") => {
            let opts = (|| -> Res<CheckOpts> {
                for pair in args[1..].chunks(2) {
                    if !CHECK_FLAGS.contains(&pair[0].as_str()) || pair.len() < 2 {
                        return Err(format!("{}: unknown flag, or no value", pair[0]));
                    }
                }
                Ok(CheckOpts {
                    postgres: arg(&args, "--postgres"),
                    amqp: arg(&args, "--amqp").unwrap_or_else(|| DEFAULT_AMQP.into()),
                    messages: num(&args, "--messages", 10_000)?,
                    duplicate_percent: num(&args, "--duplicate-percent", 30)?,
                    consumers: num(&args, "--consumers", 50)?,
                    workers: num(&args, "--workers", 4)?,
                    kills: num(&args, "--kills", 5)?,
                    poison: num(&args, "--poison", 5)?,
                    unstorable: num(&args, "--unstorable", 3)?,
                    without_id: num(&args, "--without-id", 5)?,
                    close_connections: num(&args, "--close-connections", 1)?,
                    id_header: arg(&args, "--id-header"),
                })
            })();
            match opts {
                Ok(o) => check(o).await,
                Err(e) => Err(format!("{e}\n{USAGE}")),
            }
        }
        _ => Err(USAGE.into()),
    };
    if let Err(e) = result {
        eprintln!("rabbitmq_consumer: {e}");
        std::process::exit(1);
    }
}
