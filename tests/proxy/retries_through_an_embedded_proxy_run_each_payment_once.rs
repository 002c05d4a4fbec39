//! One `idemdb proxy` on an embedded store (`--db DIR`): 200 payments sent by clients that retry
//! (duplicates, concurrent twins, retries while the first request runs, retries after a lost
//! reply) each run exactly once at the upstream, every 201 a client got is the first answer byte
//! for byte, and a 409 comes only while the payment's first request is running.

use crate::clients::{check_each_ran_once, send_payments};
use crate::harness::{Proxy, Store, Upstream};

#[test]
fn retries_through_an_embedded_proxy_run_each_payment_once() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(dir.path());
    let proxy = Proxy::start(&upstream.url(), &Store::Db(dir.path().join("store")), &[]);

    let payments = send_payments(&[proxy.addr], 200, 8);
    check_each_ran_once(&payments, &upstream);
}
