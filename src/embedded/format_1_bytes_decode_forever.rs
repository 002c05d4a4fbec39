//! Format 1, the embedded store's on-disk format, decodes forever. The bytes checked in under
//! `tests/fixtures/format-1/` were written once by the encoders of the build that introduced
//! them (the ignored test [`write_the_fixtures`], run once) and must decode, field by field, to
//! the values written out below in every later build; and today's encoders (all deterministic)
//! must still write exactly those bytes. Every kind of stored value is here: a request record in
//! each state, an entity and its tombstone, a causal entity with siblings, a replica version
//! vector, an offset window, unique reservations (plain and bound to a lease), the generic
//! envelope they are sealed in, an unmerged envelope, the `meta` values, and the key of every
//! column family. A change to a stored layout (a field of `Record` added, moved or retyped, a
//! key's layout, the envelope) fails here: format 1 never changes, a new layout is a new format
//! version (`format::FORMAT`) with fixtures of its own, and format 1 keeps decoding. (As fjall's
//! `keyspace_v2_load_fixture` and redb's `backward_compatibility` tests do.)

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::{BTreeMap, BTreeSet};

use crate::causal::{decode_causal, decode_vv, encode_vv, merge_vv_operands};
use crate::causal::{Sibling, Siblings, VersionVector};
use crate::embedded::codec::{decode_record, decode_record_view, encode_record, record_expiry};
use crate::embedded::schema::versions_fold;
use crate::entities::{decode_entity, encode_entity, StoredEntity};
use crate::error::{Error, Result};
use crate::format::{self, Kind, Namespace};
use crate::offsets::OffsetWindow;
use crate::record::{Checkpoint, Record, Response, State, StateView};
use crate::unique::{unique_key, StoredReservation};

/// A checked-in fixture: its name and the bytes of `tests/fixtures/format-1/NAME.bin`.
macro_rules! fixture {
    ($name:literal) => {
        (
            $name,
            include_bytes!(concat!("../../tests/fixtures/format-1/", $name, ".bin")) as &[u8],
        )
    };
}

/// Every checked-in fixture of format 1.
const CHECKED_IN: &[(&str, &[u8])] = &[
    fixture!("record-pending"),
    fixture!("record-released"),
    fixture!("record-completed"),
    fixture!("record-failed"),
    fixture!("envelope"),
    fixture!("entity-live"),
    fixture!("entity-tombstone"),
    fixture!("causal-siblings"),
    fixture!("version-vector"),
    fixture!("offset-window"),
    fixture!("reservation-plain"),
    fixture!("reservation-bound"),
    fixture!("unmerged"),
    fixture!("meta-format"),
    fixture!("meta-store-id"),
    fixture!("meta-high-water"),
    fixture!("key-record-request"),
    fixture!("key-record-consumer"),
    fixture!("key-expiry-index"),
    fixture!("key-entity"),
    fixture!("key-causal"),
    fixture!("key-replica-vector"),
    fixture!("key-offsets"),
    fixture!("key-unique"),
];

/// The checked-in bytes of fixture `name`.
fn checked_in(name: &str) -> &'static [u8] {
    CHECKED_IN
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, b)| *b)
        .unwrap_or_else(|| panic!("no checked-in fixture {name}"))
}

// The values the fixtures hold, written out (not computed by the code under test).

const TENANT: &[u8] = b"acme";
const KEY: &[u8] = b"key-1";
const CREATED_AT: u64 = 1_700_000_000_000;
const EXPIRES_AT: u64 = 1_700_086_400_000;

/// A 32-byte request fingerprint: 0xA0, 0xA1, ..., 0xBF.
fn fingerprint() -> Vec<u8> {
    (0xA0..=0xBF).collect()
}

fn meta(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Pending, leased; its fence takes bincode's 3-byte varint form.
fn pending() -> Record {
    Record {
        expires_at: EXPIRES_AT,
        fingerprint: fingerprint(),
        created_at: CREATED_AT,
        fence: 300,
        attempts: 1,
        takeovers: 0,
        checkpoint: None,
        state: State::Pending {
            lease_until: 1_700_000_030_000,
        },
    }
}

/// Released for a retry, keeping a checkpoint; its fence takes the 5-byte varint form.
fn released() -> Record {
    Record {
        expires_at: EXPIRES_AT,
        fingerprint: fingerprint(),
        created_at: CREATED_AT,
        fence: 70_000,
        attempts: 2,
        takeovers: 1,
        checkpoint: Some(Checkpoint {
            phase: "charged".into(),
            state: vec![1, 2, 3],
        }),
        state: State::Released,
    }
}

/// Completed with a response with metadata; its fence takes the 9-byte varint form.
fn completed() -> Record {
    Record {
        expires_at: EXPIRES_AT,
        fingerprint: fingerprint(),
        created_at: CREATED_AT,
        fence: 1 << 40,
        attempts: 3,
        takeovers: 1,
        checkpoint: None,
        state: State::Completed {
            response: Response {
                body: br#"{"id":"pay_1","amount":100}"#.to_vec(),
                meta: meta(&[("content-type", "application/json"), ("status", "201")]),
            },
            at: 1_700_000_001_234,
        },
    }
}

/// Failed terminally, with its stored failure.
fn failed() -> Record {
    Record {
        expires_at: EXPIRES_AT,
        fingerprint: fingerprint(),
        created_at: CREATED_AT,
        fence: 5,
        attempts: 1,
        takeovers: 0,
        checkpoint: None,
        state: State::Failed {
            response: Response {
                body: b"card declined".to_vec(),
                meta: meta(&[("status", "402")]),
            },
            at: 1_700_000_002_000,
        },
    }
}

const ENVELOPE_BODY: &[u8] = b"format 1";
const ENTITY_VALUE: &[u8] = br#"{"name":"Ada"}"#;

fn vector(pairs: &[(&str, u64)]) -> VersionVector {
    let mut vv = VersionVector::new();
    for (actor, n) in pairs {
        vv.observe(actor, *n);
    }
    vv
}

/// Two concurrent siblings, and the context that covers both.
fn siblings() -> Siblings {
    Siblings {
        values: vec![
            Sibling {
                actor: "eu".into(),
                counter: 2,
                value: b"blue".to_vec(),
            },
            Sibling {
                actor: "us".into(),
                counter: 1,
                value: b"green".to_vec(),
            },
        ],
        context: vector(&[("eu", 2), ("us", 1)]),
    }
}

fn window() -> OffsetWindow {
    OffsetWindow {
        next: 1000,
        above: BTreeSet::from([1002, 1005]),
    }
}

fn request_key() -> Vec<u8> {
    format::record_key(Namespace::Requests, TENANT, KEY).to_vec()
}

fn bound_reservation() -> StoredReservation {
    StoredReservation {
        owner: Vec::new(),
        bound: Some((request_key(), 70_000)),
    }
}

const STORE_ID: u128 = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;
const HIGH_WATER: u64 = 1 << 40;
const UNMERGED_OPERAND: &[u8] = b"not a version vector";

/// Each fixture as today's encoders write it (every encoding here is deterministic).
fn encoded() -> Vec<(&'static str, Vec<u8>)> {
    let vv = encode_vv(&vector(&[("eu", 3), ("us", 300)])).unwrap();
    vec![
        ("record-pending", encode_record(&pending()).unwrap()),
        ("record-released", encode_record(&released()).unwrap()),
        ("record-completed", encode_record(&completed()).unwrap()),
        ("record-failed", encode_record(&failed()).unwrap()),
        ("envelope", format::seal(ENVELOPE_BODY)),
        ("entity-live", encode_entity(7, Some(ENTITY_VALUE))),
        ("entity-tombstone", encode_entity(8, None)),
        (
            "causal-siblings",
            format::seal_bincode("causal entity", &siblings()).unwrap(),
        ),
        (
            "unmerged",
            merge_vv_operands(Some(&vv), &[UNMERGED_OPERAND]),
        ),
        ("version-vector", vv),
        ("offset-window", crate::offsets::encode(&window()).unwrap()),
        (
            "reservation-plain",
            StoredReservation::plain(b"user-7".to_vec())
                .encode()
                .unwrap(),
        ),
        ("reservation-bound", bound_reservation().encode().unwrap()),
        ("meta-format", vec![format::FORMAT]),
        ("meta-store-id", STORE_ID.to_be_bytes().to_vec()),
        (
            "meta-high-water",
            format::max_u64_fold(None, &[&HIGH_WATER.to_be_bytes()]),
        ),
        ("key-record-request", request_key()),
        (
            "key-record-consumer",
            format::record_key(Namespace::Consumers, b"billing", b"orders/3/42").to_vec(),
        ),
        (
            "key-expiry-index",
            format::index_key(EXPIRES_AT, 300, &request_key()),
        ),
        (
            "key-entity",
            format::entity_key(Kind::Entity, TENANT, b"user/7"),
        ),
        (
            "key-causal",
            format::entity_key(Kind::Causal, TENANT, b"cart/9"),
        ),
        (
            "key-replica-vector",
            format::entity_key(Kind::ReplicaVector, TENANT, b"cart/9"),
        ),
        (
            "key-offsets",
            format::entity_key(
                Kind::Offsets,
                b"billing",
                &format::composite(&[b"orders", &3u32.to_be_bytes()]),
            ),
        ),
        (
            "key-unique",
            unique_key(b"email", &[b"ada@example.com", b"eu"]),
        ),
    ]
}

/// Writes the fixtures: run once, when format 1 was frozen
/// (`cargo test --features ... --lib format_1_bytes_decode_forever::write_the_fixtures --
/// --ignored`). Never run it to make a failing test pass: a fixture that no longer matches means
/// format 1 changed, which it must not.
#[test]
#[ignore = "writes tests/fixtures/format-1/: run once, when format 1 was frozen"]
fn write_the_fixtures() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format-1");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in encoded() {
        std::fs::write(dir.join(format!("{name}.bin")), bytes).unwrap();
    }
}

const NEVER_CHANGES: &str = "format 1 must never change: the stores written by earlier builds \
     hold these bytes; a new layout is a new format version (format::FORMAT) with fixtures of \
     its own, and format 1 keeps decoding";

#[test]
fn todays_encoders_write_the_checked_in_bytes() {
    let encoded = encoded();
    let names: Vec<&str> = encoded.iter().map(|(n, _)| *n).collect();
    let mut checked: Vec<&str> = CHECKED_IN.iter().map(|(n, _)| *n).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    checked.sort_unstable();
    assert_eq!(sorted, checked, "every fixture is encoded and checked in");
    for (name, bytes) in &encoded {
        assert_eq!(
            bytes.as_slice(),
            checked_in(name),
            "today's encoder writes fixture {name} differently from \
             tests/fixtures/format-1/{name}.bin: {NEVER_CHANGES}"
        );
    }
}

#[test]
fn every_file_of_the_fixture_directory_is_checked() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format-1");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".bin") {
            assert!(
                CHECKED_IN.iter().any(|(n, _)| *n == stem),
                "tests/fixtures/format-1/{name} is not in CHECKED_IN"
            );
        }
    }
}

/// `got` equals `want`, field by field, each mismatch named.
fn assert_record(name: &str, got: &Record, want: &Record) {
    assert_eq!(got.expires_at, want.expires_at, "{name}: expires_at");
    assert_eq!(got.fingerprint, want.fingerprint, "{name}: fingerprint");
    assert_eq!(got.created_at, want.created_at, "{name}: created_at");
    assert_eq!(got.fence, want.fence, "{name}: fence");
    assert_eq!(got.attempts, want.attempts, "{name}: attempts");
    assert_eq!(got.takeovers, want.takeovers, "{name}: takeovers");
    assert_eq!(got.checkpoint, want.checkpoint, "{name}: checkpoint");
    match (&got.state, &want.state) {
        (State::Pending { lease_until: a }, State::Pending { lease_until: b }) => {
            assert_eq!(a, b, "{name}: lease_until")
        }
        (State::Released, State::Released) => {}
        (State::Completed { response: a, at }, State::Completed { response: b, at: t })
        | (State::Failed { response: a, at }, State::Failed { response: b, at: t }) => {
            assert_eq!(a.body, b.body, "{name}: response body");
            assert_eq!(a.meta, b.meta, "{name}: response metadata");
            assert_eq!(at, t, "{name}: finished at");
        }
        (a, b) => panic!("{name}: state {a:?}, expected {b:?}"),
    }
    assert_eq!(got, want, "{name}");
}

#[test]
fn records_in_every_state_decode_to_their_fields() {
    for (name, want) in [
        ("record-pending", pending()),
        ("record-released", released()),
        ("record-completed", completed()),
        ("record-failed", failed()),
    ] {
        let bytes = checked_in(name);
        assert_record(name, &decode_record(bytes).unwrap(), &want);
        // The header the compaction filter reads: format byte, then the expiry (u64 BE).
        assert_eq!(bytes[0], 1, "{name}: format byte");
        assert_eq!(
            bytes[1..9],
            EXPIRES_AT.to_be_bytes(),
            "{name}: expiry header"
        );
        assert_eq!(
            record_expiry(bytes),
            Some(EXPIRES_AT),
            "{name}: record_expiry"
        );
    }
}

/// The borrowed view (the claim path's hand-written decoder) reads the same fields.
#[test]
fn the_borrowed_record_view_reads_the_same_fields() {
    for (name, want) in [
        ("record-pending", pending()),
        ("record-released", released()),
        ("record-completed", completed()),
        ("record-failed", failed()),
    ] {
        let v = decode_record_view(checked_in(name)).unwrap();
        assert_eq!(v.expires_at, want.expires_at, "{name}: expires_at");
        assert_eq!(
            v.fingerprint,
            want.fingerprint.as_slice(),
            "{name}: fingerprint"
        );
        assert_eq!(v._created_at, want.created_at, "{name}: created_at");
        assert_eq!(v.fence, want.fence, "{name}: fence");
        assert_eq!(v._attempts, want.attempts, "{name}: attempts");
        assert_eq!(v._takeovers, want.takeovers, "{name}: takeovers");
        assert_eq!(v._checkpoint, want.checkpoint, "{name}: checkpoint");
        match (v.state, &want.state) {
            (StateView::Pending { lease_until: a }, State::Pending { lease_until: b }) => {
                assert_eq!(a, *b, "{name}: lease_until")
            }
            (StateView::Released, State::Released) => {}
            (StateView::Completed { response: a, at }, State::Completed { response: b, at: t })
            | (StateView::Failed { response: a, at }, State::Failed { response: b, at: t }) => {
                assert_eq!(a.body, b.body.as_slice(), "{name}: response body");
                assert_eq!(a.meta, b.meta, "{name}: response metadata");
                assert_eq!(at, *t, "{name}: finished at");
            }
            (a, b) => panic!("{name}: state {a:?}, expected {b:?}"),
        }
    }
}

#[test]
fn the_envelope_is_format_byte_body_and_crc32() {
    let bytes = checked_in("envelope");
    assert_eq!(format::unseal("envelope", bytes).unwrap(), ENVELOPE_BODY);
    let (payload, crc) = bytes.split_at(bytes.len() - 4);
    assert_eq!(payload[0], 1, "format byte");
    assert_eq!(&payload[1..], ENVELOPE_BODY, "body");
    assert_eq!(crc, crc32fast::hash(payload).to_be_bytes(), "crc32 BE");
}

#[test]
fn entities_and_tombstones_decode_to_their_version_and_value() {
    assert_eq!(
        decode_entity(checked_in("entity-live")).unwrap(),
        StoredEntity {
            version: 7,
            value: Some(ENTITY_VALUE.to_vec()),
        }
    );
    assert_eq!(
        decode_entity(checked_in("entity-tombstone")).unwrap(),
        StoredEntity {
            version: 8,
            value: None,
        }
    );
}

#[test]
fn causal_entities_and_replica_vectors_decode() {
    let s = decode_causal(Some(checked_in("causal-siblings"))).unwrap();
    let values: Vec<(&str, u64, &[u8])> = s
        .values
        .iter()
        .map(|v| (v.actor.as_str(), v.counter, v.value.as_slice()))
        .collect();
    assert_eq!(
        values,
        [("eu", 2, &b"blue"[..]), ("us", 1, &b"green"[..])],
        "siblings"
    );
    assert_eq!(
        s.context.iter().collect::<Vec<_>>(),
        [("eu", 2), ("us", 1)],
        "context"
    );
    assert_eq!(s, siblings());
    let vv = decode_vv(Some(checked_in("version-vector"))).unwrap();
    assert_eq!(vv.iter().collect::<Vec<_>>(), [("eu", 3), ("us", 300)]);
}

#[test]
fn offset_windows_decode() {
    let w: OffsetWindow =
        format::unseal_bincode("offset window", checked_in("offset-window")).unwrap();
    assert_eq!(w.next, 1000, "next");
    assert_eq!(w.above, BTreeSet::from([1002, 1005]), "above");
    assert_eq!(w.watermark(), Some(999));
}

#[test]
fn reservations_plain_and_bound_decode() {
    let plain: StoredReservation =
        format::unseal_bincode("reservation", checked_in("reservation-plain")).unwrap();
    assert_eq!(plain.owner, b"user-7", "plain owner");
    assert_eq!(plain.bound, None, "plain: not bound");
    let bound: StoredReservation =
        format::unseal_bincode("reservation", checked_in("reservation-bound")).unwrap();
    assert_eq!(bound.owner, b"", "bound: no plain owner");
    let (record, fence) = bound.bound.unwrap();
    assert_eq!(
        format::split_record_key_ns(&record),
        Some((Namespace::Requests, TENANT, KEY)),
        "bound: the lease's record key"
    );
    assert_eq!(fence, 70_000, "bound: the lease's fence");
}

/// The merge operators of the `versions` column family read format-1 values and write them back
/// unchanged when joined with themselves.
#[test]
fn the_merge_folds_read_format_1() {
    for (key, value) in [
        ("key-replica-vector", "version-vector"),
        ("key-offsets", "offset-window"),
    ] {
        let v = checked_in(value);
        assert_eq!(
            versions_fold(checked_in(key), Some(v), &[v]),
            v,
            "{value} joined with itself"
        );
    }
    let high = checked_in("meta-high-water");
    assert_eq!(format::max_u64_fold(Some(high), &[high]), high);
}

#[test]
fn an_unmerged_envelope_is_corrupted_on_every_read() {
    let bytes = checked_in("unmerged");
    assert_eq!(bytes[0], 0xFE, "the unmerged format byte");
    match decode_vv(Some(bytes)) {
        Err(Error::Corrupted { what, reason }) => {
            assert_eq!(what, "version vector");
            assert!(reason.contains("unmerged"), "{reason}");
        }
        other => panic!("an unmerged envelope read as {other:?}"),
    }
    // Merged again, it stays whole (the unmerged inputs are kept, never dropped).
    let again = versions_fold(checked_in("key-replica-vector"), Some(bytes), &[bytes]);
    assert!(matches!(
        decode_vv(Some(&again)),
        Err(Error::Corrupted { .. })
    ));
}

#[test]
fn meta_values_decode() {
    assert_eq!(checked_in("meta-format"), [1u8], "the format marker");
    assert_eq!(format::FORMAT, 1, "this build writes format 1");
    let id: [u8; 16] = checked_in("meta-store-id").try_into().unwrap();
    assert_eq!(u128::from_be_bytes(id), STORE_ID, "store id, u128 BE");
    assert_eq!(
        format::decode_u64(checked_in("meta-high-water")),
        Some(HIGH_WATER),
        "a high-water mark, u64 BE"
    );
}

#[test]
fn keys_split_back_into_their_parts() {
    assert_eq!(
        format::split_record_key_ns(checked_in("key-record-request")),
        Some((Namespace::Requests, TENANT, KEY))
    );
    assert_eq!(
        format::split_record_key_ns(checked_in("key-record-consumer")),
        Some((Namespace::Consumers, &b"billing"[..], &b"orders/3/42"[..]))
    );
    let index = checked_in("key-expiry-index");
    assert_eq!(
        format::split_index_key(index),
        Some((EXPIRES_AT, request_key().as_slice())),
        "expiry index key: (expiry, record key)"
    );
    let ulid = ulid::Ulid::from_bytes(index[..16].try_into().unwrap());
    assert_eq!(ulid.random(), 300, "expiry index key: the fence");
    for (name, kind, tenant, id) in [
        ("key-entity", Kind::Entity, TENANT, &b"user/7"[..]),
        ("key-causal", Kind::Causal, TENANT, &b"cart/9"[..]),
        (
            "key-replica-vector",
            Kind::ReplicaVector,
            TENANT,
            &b"cart/9"[..],
        ),
    ] {
        let key = checked_in(name);
        assert_eq!(Kind::of_key(key), Some(kind), "{name}: kind byte");
        assert_eq!(
            format::split_record_key_ns(&key[1..]),
            Some((Namespace::Requests, tenant, id)),
            "{name}: (tenant, id)"
        );
    }
    let offsets = checked_in("key-offsets");
    assert_eq!(Kind::of_key(offsets), Some(Kind::Offsets));
    let (group, id) = format::split_record_key(&offsets[1..]).unwrap();
    assert_eq!(group, b"billing", "offsets: the group");
    assert_eq!(
        format::split_composite(id),
        Some(vec![&b"orders"[..], &[0u8, 0, 0, 3][..]]),
        "offsets: (topic, partition u32 BE)"
    );
    let unique = checked_in("key-unique");
    assert_eq!(Kind::of_key(unique), Some(Kind::Unique));
    let (index, value) = format::split_record_key(&unique[1..]).unwrap();
    assert_eq!(index, b"email", "unique: the index");
    assert_eq!(
        format::split_composite(value),
        Some(vec![&b"ada@example.com"[..], &b"eu"[..]]),
        "unique: the value's parts"
    );
}

type Decoder = fn(&[u8]) -> Result<()>;

/// Both record decoders (the owned one and the claim path's borrowed view): they must agree.
fn record_decoders(b: &[u8]) -> Result<()> {
    match (decode_record(b), decode_record_view(b)) {
        (Ok(_), Ok(_)) => Ok(()),
        (Err(e), Err(Error::Corrupted { what: "record", .. })) => Err(e),
        (a, v) => panic!("the record decoders disagree: {a:?}, {v:?}"),
    }
}

/// Every checksummed value fixture, with what its decoder names and the decoder.
const SEALED: &[(&str, &str, Decoder)] = &[
    ("record-pending", "record", record_decoders),
    ("record-released", "record", record_decoders),
    ("record-completed", "record", record_decoders),
    ("record-failed", "record", record_decoders),
    ("envelope", "envelope", |b| {
        format::unseal("envelope", b).map(drop)
    }),
    ("entity-live", "entity", |b| decode_entity(b).map(drop)),
    ("entity-tombstone", "entity", |b| decode_entity(b).map(drop)),
    ("causal-siblings", "causal entity", |b| {
        decode_causal(Some(b)).map(drop)
    }),
    ("version-vector", "version vector", |b| {
        decode_vv(Some(b)).map(drop)
    }),
    ("offset-window", "offset window", |b| {
        format::unseal_bincode::<OffsetWindow>("offset window", b).map(drop)
    }),
    ("reservation-plain", "reservation", |b| {
        format::unseal_bincode::<StoredReservation>("reservation", b).map(drop)
    }),
    ("reservation-bound", "reservation", |b| {
        format::unseal_bincode::<StoredReservation>("reservation", b).map(drop)
    }),
];

/// One byte of a checked-in value flipped, anywhere, is a typed `Corrupted` error of that
/// value's decoder: never a panic, never a value.
#[test]
fn a_flipped_byte_is_a_corrupted_error() {
    for (name, what, decode) in SEALED {
        let bytes = checked_in(name);
        decode(bytes).unwrap();
        for at in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xFF] {
                let mut bad = bytes.to_vec();
                bad[at] ^= flip;
                match decode(&bad) {
                    Err(Error::Corrupted { what: w, .. }) => {
                        assert_eq!(w, *what, "{name}, byte {at} ^ {flip:#04x}")
                    }
                    other => panic!("{name}, byte {at} ^ {flip:#04x}: {other:?}"),
                }
                if name.starts_with("record-") {
                    assert_eq!(record_expiry(&bad), None, "{name}, byte {at}: expiry");
                }
            }
        }
    }
}
