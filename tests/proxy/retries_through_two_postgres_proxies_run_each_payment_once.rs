//! Two `idemdb proxy` instances on one PostgreSQL schema behave as one: 200 payments sent by
//! clients that retry (duplicates, twins landing on both instances at once, retries alternating
//! between the instances while the first request runs, retries after a lost reply) each run
//! exactly once at the upstream, every 201 a client got is the first answer byte for byte, and a
//! 409 comes only while the payment's first request is running.

use crate::clients::{check_each_ran_once, send_payments};
use crate::harness::{Proxy, Schema, Store, Upstream};

#[test]
fn retries_through_two_postgres_proxies_run_each_payment_once() {
    let schema = Schema::fresh(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(dir.path());
    let store = Store::Postgres(schema.url());
    let a = Proxy::start(&upstream.url(), &store, &[]);
    let b = Proxy::start(&upstream.url(), &store, &[]);

    let payments = send_payments(&[a.addr, b.addr], 200, 8);
    check_each_ran_once(&payments, &upstream);
}
