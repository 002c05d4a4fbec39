//! The claim and holder rules are written once in Rust (`requests::claim_step`,
//! `requests::lease_lost`, on the shared floor) and restated in SQL where the database must
//! decide under its row lock (`idemdb_claim`, `idemdb_holder`, migrations 2 and 7): the same
//! table of cases goes to both, and every answer must agree. A case is a key's row (none, or
//! each state, live or expiring exactly now, claimed with this fingerprint or another, its lease
//! live, ending exactly now or run out, its token the caller's or another) and a call at the
//! test clock's `NOW`. PostgreSQL only (the embedded store has no SQL).

use idemdb::__internal::{claim_rule, holder_rule};

use crate::harness::{admin_in_schema, Harness};

const NOW: i64 = 1_000_000;
const OURS: i64 = 7;
const STATES: [(&str, i16); 4] = [
    ("pending", 0),
    ("released", 1),
    ("completed", 2),
    ("failed", 3),
];

/// A key's row for a case: (state, its code, expired (`expires_at` = `NOW`), its fingerprint
/// ours, its lease's end relative to `NOW` (5 s after, exactly `NOW`, 1 ms before), its fence
/// ours).
type Row = (&'static str, i16, bool, bool, i64, bool);

fn rows() -> Vec<Option<Row>> {
    let mut out = vec![None];
    for (state, code) in STATES {
        for expired in [false, true] {
            for same_fp in [true, false] {
                for lease_end in [5_000, 0, -1] {
                    for our_fence in [true, false] {
                        out.push(Some((state, code, expired, same_fp, lease_end, our_fence)));
                    }
                }
            }
        }
    }
    out
}

async fn client(schema: &str) -> tokio_postgres::Client {
    let url = admin_in_schema(schema);
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {url} cannot be reached: {e}"));
    tokio::spawn(conn);
    client
}

/// Writes the case's row for `key` (none: nothing).
async fn put_row(c: &tokio_postgres::Client, key: &[u8], row: Option<Row>) {
    let Some((_, code, expired, same_fp, lease_end, our_fence)) = row else {
        return;
    };
    let fp: &[u8] = if same_fp { b"ours" } else { b"theirs" };
    let expires_at = if expired { NOW } else { NOW + 100_000 };
    let lease_until = NOW + lease_end;
    let fence = if our_fence { OURS } else { OURS + 1 };
    let finished = (code >= 2).then_some(NOW - 10);
    let body: Option<&[u8]> = (code >= 2).then_some(b"stored");
    c.execute(
        "INSERT INTO idemdb_requests (ns, tenant, key, fingerprint, created_at, expires_at, \
         fence, attempts, takeovers, state, lease_until, taken_over, finished_at, \
         response_body, response_meta) \
         VALUES (0, 'rules', $1, $2, 0, $3, $4, 1, 0, $5, $6, false, $7, $8, '{}')",
        &[
            &key,
            &fp,
            &expires_at,
            &fence,
            &code,
            &lease_until,
            &finished,
            &body,
        ],
    )
    .await
    .unwrap();
}

/// What `idemdb_claim` decided, named as [`claim_rule`] names its steps.
async fn sql_claim(c: &tokio_postgres::Client, key: &[u8], row: Option<Row>) -> String {
    let r = c
        .query_one(
            "SELECT acquired, attempts, taken_over, state, fingerprint \
             FROM idemdb_claim(0::smallint, 'rules'::bytea, $1, 'ours'::bytea, 5000, 100000, \
             $2, 1)",
            &[&key, &NOW],
        )
        .await
        .unwrap();
    let acquired: Option<bool> = r.get(0);
    let attempts: i32 = r.get(1);
    let taken_over: bool = r.get(2);
    let state: Option<i16> = r.get(3);
    let fingerprint: Option<Vec<u8>> = r.get(4);
    match acquired {
        Some(true) if taken_over => "takeover".into(),
        Some(true) if attempts == 1 => match row {
            None => "absent".into(),
            Some(_) => "expired".into(),
        },
        Some(true) => "acquire".into(),
        Some(false) if fingerprint.as_deref() != Some(b"ours") => "mismatch".into(),
        Some(false) => match state {
            Some(0) => "in_progress".into(),
            Some(2) => "completed".into(),
            Some(3) => "failed".into(),
            other => format!("not acquired, state {other:?}"),
        },
        None => "undecided".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let h = Harness::postgres(module_path!(), |c| c).await;
    let schema = h.schema().unwrap();
    let c = client(&schema).await;
    let now = u64::try_from(NOW).unwrap();
    let mut disagree = Vec::new();
    for (i, row) in rows().into_iter().enumerate() {
        // The claim rule.
        let key = format!("claim-{i}").into_bytes();
        put_row(&c, &key, row).await;
        let rust = claim_rule(
            row.map(|(state, _, expired, same_fp, lease_end, _)| {
                let fp: &[u8] = if same_fp { b"ours" } else { b"theirs" };
                (
                    if expired { now } else { now + 100_000 },
                    fp,
                    state,
                    now.checked_add_signed(lease_end).unwrap(),
                )
            }),
            b"ours",
            now,
        );
        let sql = sql_claim(&c, &key, row).await;
        if sql != rust {
            disagree.push(format!("claim of {row:?}: the rule says {rust}, SQL {sql}"));
        }

        // The holder rule: a renewal by the lease with token OURS.
        let key = format!("holder-{i}").into_bytes();
        put_row(&c, &key, row).await;
        let rust = holder_rule(
            row.map(|(state, _, expired, _, _, our_fence)| {
                let fence = if our_fence { OURS } else { OURS + 1 };
                (!expired, state, u64::try_from(fence).unwrap())
            }),
            u64::try_from(OURS).unwrap(),
        );
        let r = c
            .query_one(
                "SELECT done_until FROM idemdb_holder(0::smallint, 'rules'::bytea, $1, $2, $3, \
                 4::smallint, NULL, NULL, 1000, NULL)",
                &[&key, &OURS, &NOW],
            )
            .await
            .unwrap();
        let applied = r.get::<_, Option<i64>>(0).is_some();
        if applied != rust.is_none() {
            disagree.push(format!(
                "renewal of {row:?}: the rule says {rust:?}, SQL {}",
                if applied { "applied" } else { "refused" }
            ));
        }
    }
    assert!(
        disagree.is_empty(),
        "the SQL and the shared rules disagree:\n{}",
        disagree.join("\n")
    );
    drop(c);
    h.cleanup().await;
}
