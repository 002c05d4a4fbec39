//! The demo: a simulated payment service under retries, duplicate deliveries and crashing workers.
//! Invariants of the check:
//! - the charge ledger is kept outside the store, so "charged exactly once" is counted
//!   independently of what the store claims;
//! - every expectation holds whatever order the client threads run in: a key is reused for
//!   another amount only after its first request was answered, by the client that sent it (what
//!   a buggy client does), so the reuse always meets a finished record and is always refused;
//! - an answer the demo did not expect is a failed check of the demo, reported with what was
//!   expected and what came; only an error of the store itself is reported as the store's.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemdb::{Claim, ClaimOptions, Config, Durability, Response, Store};

pub struct Options {
    pub db: Option<PathBuf>,
    pub payments: usize,
    pub clients: usize,
    pub buffered: bool,
}

const TENANT: &str = "shop";
const LEASE: Duration = Duration::from_millis(250);
const CRASH_BEFORE_CHARGE: u64 = 3; // percent
const CRASH_AFTER_CHARGE: u64 = 3; // percent, after the "charged" checkpoint
const LOST_REPLY: u64 = 5; // percent of replies lost on the way back: the client retries
const DUPLICATE: u64 = 10; // percent of requests a proxy delivers twice
const MISUSE: u64 = 1; // percent of payments whose key a buggy client reuses for another amount

/// SplitMix64: enough randomness for a simulation, seeded per thread.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn percent(&mut self, p: u64) -> bool {
        self.next() % 100 < p
    }
}

struct Payment {
    key: String,
    amount: u64,
}

#[derive(Default)]
struct Tally {
    requests: AtomicU64,
    retries: AtomicU64,
    duplicates_sent: AtomicU64,
    charges: AtomicU64,
    replays: AtomicU64,
    in_progress: AtomicU64,
    crashes: AtomicU64,
    resumed: AtomicU64,
    mismatches: AtomicU64,
}

enum Reply {
    Ok(Vec<u8>),
    Crashed,
    Busy(Duration),
    Unprocessable,
    /// A claim outcome this demo does not know (`Claim` is non-exhaustive).
    Unknown(String),
}

/// Why a demo run could not give its verdict: the store failed a call, or an answer broke what
/// the demo expects (a failed check of the demo, not a store error).
#[derive(Debug)]
pub enum DemoError {
    Store(idemdb::Error),
    Check { expected: String, got: String },
}

impl std::fmt::Display for DemoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DemoError::Store(e) => write!(f, "the store failed a call: {e}"),
            DemoError::Check { expected, got } => {
                write!(f, "demo check failed: expected {expected}; got {got}")
            }
        }
    }
}

impl From<idemdb::Error> for DemoError {
    fn from(e: idemdb::Error) -> Self {
        DemoError::Store(e)
    }
}

fn fingerprint(p: &Payment, amount: u64) -> Vec<u8> {
    idemdb::fingerprint(&[b"POST /payments", p.key.as_bytes(), &amount.to_be_bytes()])
}

/// The payment service's handler.
fn handle(
    store: &Store,
    id: usize,
    p: &Payment,
    amount: u64,
    rng: &mut Rng,
    ledger: &Mutex<HashMap<usize, u32>>,
    t: &Tally,
) -> idemdb::Result<Reply> {
    t.requests.fetch_add(1, Ordering::Relaxed);
    let opts = ClaimOptions::default().lease(LEASE);
    match store.claim(TENANT, &p.key, fingerprint(p, amount), opts)? {
        Claim::Acquired(lease) => {
            let receipt = if let Some(cp) = lease.checkpoint().filter(|c| c.phase == "charged") {
                // A worker crashed after charging: resume from the recovery point, don't charge.
                t.resumed.fetch_add(1, Ordering::Relaxed);
                cp.state.clone()
            } else {
                if rng.percent(CRASH_BEFORE_CHARGE) {
                    t.crashes.fetch_add(1, Ordering::Relaxed);
                    return Ok(Reply::Crashed); // the lease is simply abandoned
                }
                // The side effect, recorded outside the store.
                *ledger
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(id)
                    .or_default() += 1;
                t.charges.fetch_add(1, Ordering::Relaxed);
                let receipt = format!("receipt {id}: charged {amount} (fence {})", lease.fence());
                if store
                    .checkpoint(&lease, "charged", receipt.as_bytes())?
                    .is_err()
                {
                    return Ok(Reply::Crashed);
                }
                if rng.percent(CRASH_AFTER_CHARGE) {
                    t.crashes.fetch_add(1, Ordering::Relaxed);
                    return Ok(Reply::Crashed);
                }
                receipt.into_bytes()
            };
            let resp = Response::new(receipt.clone()).with_status(201);
            match store.complete(&lease, resp)? {
                Ok(()) => Ok(Reply::Ok(receipt)),
                Err(_) => Ok(Reply::Crashed), // lost the lease: the client retries and replays
            }
        }
        Claim::Completed(r) => {
            t.replays.fetch_add(1, Ordering::Relaxed);
            Ok(Reply::Ok(r.response.body))
        }
        Claim::InProgress { retry_after } => {
            t.in_progress.fetch_add(1, Ordering::Relaxed);
            Ok(Reply::Busy(retry_after))
        }
        Claim::Mismatch => {
            t.mismatches.fetch_add(1, Ordering::Relaxed);
            Ok(Reply::Unprocessable)
        }
        Claim::Failed(r) => Ok(Reply::Ok(r.response.body)),
        // Claim is non-exhaustive: an outcome this demo does not know fails its check, not a guess.
        other => Ok(Reply::Unknown(format!("{other:?}"))),
    }
}

pub fn run(o: &Options) -> Result<bool, DemoError> {
    let tmp;
    let dir = match &o.db {
        Some(d) => d.clone(),
        None => {
            tmp = std::env::temp_dir().join(format!(
                "idemdb-demo-{}",
                idemdb::mint_key(&idemdb::SystemClock)
            ));
            tmp
        }
    };
    let durability = if o.buffered {
        Durability::Buffered
    } else {
        Durability::Synced
    };
    let store = Config::new(&dir).durability(durability).open()?;
    println!(
        "idemdb demo: {} payments from {} concurrent clients, {:?} durability, store in {}",
        o.payments,
        o.clients,
        durability,
        dir.display()
    );
    println!(
        "faults: {DUPLICATE}% duplicate deliveries, {LOST_REPLY}% lost replies, {CRASH_BEFORE_CHARGE}% workers crash before \
         charging, {CRASH_AFTER_CHARGE}% after, {MISUSE}% keys reused for another amount; lease {LEASE:?}"
    );
    let payments: Vec<Payment> = (0..o.payments)
        .map(|i| Payment {
            key: idemdb::mint_key(&idemdb::SystemClock),
            amount: 100 + (i as u64 % 900),
        })
        .collect();
    let ledger = Mutex::new(HashMap::<usize, u32>::new());
    let replies = Mutex::new(HashMap::<usize, Vec<Vec<u8>>>::new());
    let tally = Tally::default();
    let next = AtomicUsize::new(0);
    let misuse_rejected = AtomicU64::new(0);
    let misuse_tried = AtomicU64::new(0);
    let failure: Mutex<Option<DemoError>> = Mutex::new(None);
    let seed =
        u64::from_str_radix(&idemdb::mint_key(&idemdb::SystemClock)[10..22], 32).unwrap_or(7);
    let started = std::time::Instant::now();

    // Work items: each payment once, plus duplicate deliveries pushed as separate items so that
    // another client thread sends them concurrently. An item marked for reuse is followed, by the
    // same client once it has its answer, by a request with the same key and another amount.
    let mut work: Vec<(usize, bool)> = Vec::new();
    let mut r = Rng(seed);
    for i in 0..payments.len() {
        let reuse = r.percent(MISUSE);
        work.push((i, reuse));
        if r.percent(DUPLICATE) {
            work.push((i, false));
            tally.duplicates_sent.fetch_add(1, Ordering::Relaxed);
        }
    }
    let work = Arc::new(work);

    std::thread::scope(|s| {
        for c in 0..o.clients {
            let (store, work, ledger, replies, tally, next, failure) =
                (&store, &work, &ledger, &replies, &tally, &next, &failure);
            let (misuse_rejected, misuse_tried, payments) =
                (&misuse_rejected, &misuse_tried, &payments);
            s.spawn(move || {
                let mut rng = Rng(seed ^ (c as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
                let fail = |e: DemoError| {
                    let mut f = failure.lock().unwrap_or_else(|e| e.into_inner());
                    f.get_or_insert(e);
                };
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(id, reuse)) = work.get(i) else {
                        return;
                    };
                    let p = &payments[id];
                    // The payment as sent, then (for an item marked for reuse, once the first
                    // request was answered) the same key with another amount.
                    let sends: &[(u64, bool)] = if reuse {
                        &[(p.amount, false), (p.amount + 1, true)]
                    } else {
                        &[(p.amount, false)]
                    };
                    for &(amount, misuse) in sends {
                        if misuse {
                            misuse_tried.fetch_add(1, Ordering::Relaxed);
                        }
                        let mut first = true;
                        loop {
                            if !first {
                                tally.retries.fetch_add(1, Ordering::Relaxed);
                            }
                            first = false;
                            let reply = match handle(store, id, p, amount, &mut rng, ledger, tally)
                            {
                                Ok(r) => r,
                                Err(e) => return fail(e.into()),
                            };
                            match reply {
                                Reply::Ok(body) if misuse => {
                                    return fail(DemoError::Check {
                                        expected: format!(
                                        "422 for payment {id}'s key reused for amount {amount} \
                                         after it was charged {}",
                                        p.amount
                                    ),
                                        got: format!(
                                            "a success: {:?}",
                                            String::from_utf8_lossy(&body)
                                        ),
                                    });
                                }
                                Reply::Ok(body) => {
                                    if rng.percent(LOST_REPLY) {
                                        continue; // the reply never arrived: retry at once
                                    }
                                    replies
                                        .lock()
                                        .unwrap_or_else(|e| e.into_inner())
                                        .entry(id)
                                        .or_default()
                                        .push(body);
                                    break;
                                }
                                Reply::Unprocessable => {
                                    if misuse {
                                        misuse_rejected.fetch_add(1, Ordering::Relaxed);
                                        break;
                                    }
                                    // Only a reused key can mismatch; anything else is a bug.
                                    return fail(DemoError::Check {
                                        expected: format!(
                                            "payment {id} (amount {amount}, its own key) to be \
                                         charged or replayed"
                                        ),
                                        got: "422: the key was refused as used for another request"
                                            .into(),
                                    });
                                }
                                Reply::Unknown(outcome) => {
                                    return fail(DemoError::Check {
                                        expected: format!(
                                            "a claim outcome the demo knows for payment {id}"
                                        ),
                                        got: outcome,
                                    });
                                }
                                Reply::Crashed => std::thread::sleep(LEASE / 2),
                                Reply::Busy(after) => {
                                    std::thread::sleep(after.min(Duration::from_millis(50)))
                                }
                            }
                        }
                    }
                }
            });
        }
    });
    let elapsed = started.elapsed();
    if let Some(e) = failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    let ledger = ledger.into_inner().unwrap_or_else(|e| e.into_inner());
    let replies = replies.into_inner().unwrap_or_else(|e| e.into_inner());

    // The checks, against the ledger and the replies, not the store's counters.
    let charged_once = (0..o.payments).all(|i| ledger.get(&i) == Some(&1));
    let double = ledger.values().filter(|&&n| n > 1).count();
    let never = (0..o.payments).filter(|i| !ledger.contains_key(i)).count();
    let consistent = (0..o.payments).all(|i| {
        replies
            .get(&i)
            .is_some_and(|v| !v.is_empty() && v.iter().all(|b| b == &v[0]))
    });
    let stats = store.stats()?;
    let c = stats.counters;
    let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let rows = [
        ("payments", o.payments as u64),
        ("requests handled", ld(&tally.requests)),
        ("client retries", ld(&tally.retries)),
        ("duplicate deliveries sent", ld(&tally.duplicates_sent)),
        ("worker crashes (simulated)", ld(&tally.crashes)),
        (
            "charges executed (ledger)",
            ledger.values().map(|&n| u64::from(n)).sum(),
        ),
        ("duplicates prevented: replayed", ld(&tally.replays)),
        ("duplicates prevented: in progress", ld(&tally.in_progress)),
        ("expired leases taken over", c.takeover),
        ("resumed from checkpoint", ld(&tally.resumed)),
        ("key reused for another amount (422)", ld(&misuse_rejected)),
    ];
    println!();
    println!("| {:<38} | {:>10} |", "measure", "count");
    println!("|{:-<40}|{:->12}|", "", "");
    for (name, v) in rows {
        println!("| {name:<38} | {v:>10} |");
    }
    println!();
    let mismatch_ok = ld(&misuse_rejected) == ld(&misuse_tried);
    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    println!(
        "check: every payment charged exactly once ........ {} ({double} charged twice or more, {never} never)",
        verdict(charged_once)
    );
    println!(
        "check: every client got the same receipt per key .. {}",
        verdict(consistent)
    );
    println!(
        "check: every reused key was refused (422) ......... {}",
        verdict(mismatch_ok)
    );
    let rps = ld(&tally.requests) as f64 / elapsed.as_secs_f64();
    println!("time: {:.2} s, {rps:.0} requests/s", elapsed.as_secs_f64());
    drop(store);
    if o.db.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(charged_once && consistent && mismatch_ok)
}
