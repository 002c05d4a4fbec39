//! A listening connection that goes silent is noticed (regression, issue 43 item 4). The
//! waiting store listens through a TCP relay (`Config::listen_url`) that, once it listens, holds
//! everything the server sends on it, as a NAT or load balancer that dropped an idle flow, or a
//! frozen host, would: nothing closes the socket. The holder then completes on another store.
//! Before the fix the listener stayed "listening" and the waiting duplicate slept to its 60 s
//! bound and answered `InProgress`; now the listener's heartbeat goes unanswered, the listener
//! counts the connection lost and wakes its waiters, and the duplicate claims again and gets the
//! holder's response (well before its bound: the time is printed, not asserted).

use std::time::{Duration, Instant};

use idemdb::{Claim, ClaimOptions, Config, Response};

use crate::relay;

const SCHEMA: &str = "idemdb_t_connections_silent_listener";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_listening_connection_is_noticed() {
    let direct = crate::system_url();
    crate::admin(
        &direct,
        &format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA}"),
    )
    .await;
    let config: tokio_postgres::Config = direct.parse().expect("the system server's URL");
    let target = crate::system_addr();
    let relay = relay::Relay::start(target);
    let db = config.get_dbname().unwrap_or("test");
    let user = config.get_user().unwrap_or("postgres");
    let search_path = format!("options=-c%20search_path%3D{SCHEMA}");
    let in_schema = format!("{direct}?{search_path}");
    let via_relay = format!(
        "postgres://{user}@127.0.0.1:{}/{db}?{search_path}",
        relay.port
    );

    let holder = Config::postgres(in_schema.clone())
        .sweep_interval(None)
        .open_async()
        .await
        .unwrap();
    let waiting = Config::postgres(in_schema)
        .listen_url(via_relay)
        .sweep_interval(None)
        .open_async()
        .await
        .unwrap();
    let held = ClaimOptions::default().lease(Duration::from_secs(120));
    let Claim::Acquired(lease) = holder.claim("t", "k", b"fp", held).await.unwrap() else {
        panic!("a new key is acquired");
    };
    let waiter = tokio::spawn({
        let waiting = waiting.clone();
        async move {
            waiting
                .claim("t", "k", b"fp", held.wait(Duration::from_secs(60)))
                .await
                .unwrap()
        }
    });
    // Until the waiting store listens, then its connection goes silent.
    let since = Instant::now();
    loop {
        let n = listeners(&format!("{direct}?{search_path}")).await;
        if n > 0 {
            break;
        }
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "waited 30 s for the listening connection"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    relay.hold_answers(Duration::from_secs(600));
    let done = Instant::now();
    holder
        .complete(&lease, Response::new(b"charged".to_vec()))
        .await
        .unwrap()
        .unwrap();
    match waiter.await.unwrap() {
        Claim::Completed(r) => assert_eq!(r.response.body, b"charged"),
        other => panic!(
            "the waiter got {other:?} after {:?}: the silent listener was not noticed",
            done.elapsed()
        ),
    }
    println!(
        "the waiter answered {:?} after the completion, through a silent listener",
        done.elapsed()
    );
    drop((holder, waiting));
    crate::admin(&direct, &format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")).await;
}

/// The sessions listening on the channel of the schema `url` searches.
async fn listeners(url: &str) -> i64 {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {url} is needed by this test: {e}"));
    let task = tokio::spawn(conn);
    let row = client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN ' || \
             idemdb_wait_channel()",
            &[],
        )
        .await
        .unwrap();
    drop(client);
    let _ = task.await;
    row.get(0)
}
