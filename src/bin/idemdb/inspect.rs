//! `idemdb inspect` and `idemdb stats`'s output: stored items as a human table or as JSON (one
//! JSON document per call: an array of items, or the stats object). Bytes that are UTF-8 print as
//! text; others as `{"hex": "..."}` in JSON and `0x...` in the table.

use idemdb::{DataKind, Detail, Item, RecordInfo, RecordState, Stats};
use serde_json::{json, Map, Value};

/// Bytes as JSON: a string if UTF-8, else `{"hex": ...}`.
pub(crate) fn bytes_json(b: &[u8]) -> Value {
    match std::str::from_utf8(b) {
        Ok(s) => Value::String(s.into()),
        Err(_) => json!({ "hex": hex(b) }),
    }
}

/// Bytes for a human: the text if UTF-8 (quoted), else `0x` and hex.
pub(crate) fn bytes_text(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => format!("{s:?}"),
        Err(_) => format!("0x{}", hex(b)),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn record_json(r: &RecordInfo, expired: bool) -> Map<String, Value> {
    let mut m = Map::new();
    let (state, extra) = match &r.state {
        RecordState::Pending { lease_until } => ("pending", json!({ "lease_until": lease_until })),
        RecordState::Released => ("released", json!({})),
        RecordState::Completed(rep) | RecordState::Failed(rep) => (
            if matches!(r.state, RecordState::Completed(_)) {
                "completed"
            } else {
                "failed"
            },
            json!({
                "finished_at": rep.finished_at,
                "response": {
                    "body_bytes": rep.response.body.len(),
                    "body": bytes_json(&rep.response.body),
                    "meta": rep.response.meta,
                },
            }),
        ),
        _ => ("unknown", json!({})),
    };
    m.insert("state".into(), state.into());
    if let Value::Object(extra) = extra {
        m.extend(extra);
    }
    m.insert("expired".into(), expired.into());
    m.insert("created_at".into(), r.created_at.into());
    m.insert("expires_at".into(), r.expires_at.into());
    m.insert("fence".into(), r.fence.into());
    m.insert("attempts".into(), r.attempts.into());
    m.insert("takeovers".into(), r.takeovers.into());
    m.insert("fingerprint_hex".into(), hex(&r.fingerprint).into());
    if let Some(cp) = &r.checkpoint {
        m.insert(
            "checkpoint".into(),
            json!({ "phase": cp.phase, "state_bytes": cp.state.len() }),
        );
    }
    m
}

/// One item as a JSON object.
pub(crate) fn item_json(item: &Item) -> Value {
    let mut m = Map::new();
    m.insert("kind".into(), item.kind.name().into());
    m.insert("scope".into(), bytes_json(&item.scope));
    m.insert("key".into(), bytes_json(&item.key));
    match &item.detail {
        Detail::Record { info, expired } => m.extend(record_json(info, *expired)),
        Detail::Entity { version, value } => {
            m.insert("version".into(), (*version).into());
            m.insert("tombstone".into(), value.is_none().into());
            if let Some(v) = value {
                m.insert("value".into(), bytes_json(v));
            }
        }
        Detail::Causal(s) => {
            let values: Vec<Value> = s
                .values
                .iter()
                .map(|v| json!({ "actor": v.actor, "counter": v.counter, "value": bytes_json(&v.value) }))
                .collect();
            m.insert("siblings".into(), values.into());
            m.insert("context".into(), vector_json(&s.context));
        }
        Detail::ReplicaVector(v) => {
            m.insert("vector".into(), vector_json(v));
        }
        Detail::Reservation {
            value,
            owner,
            bound_fence,
            live,
        } => {
            m.insert(
                "key".into(),
                bytes_json(value.first().map_or(&[][..], |v| v)),
            );
            let parts: Vec<Value> = value.iter().map(|p| bytes_json(p)).collect();
            m.insert("value".into(), parts.into());
            m.insert("owner".into(), bytes_json(owner));
            m.insert("bound_fence".into(), (*bound_fence).into());
            m.insert("live".into(), (*live).into());
        }
        Detail::Offsets {
            topic,
            partition,
            window,
        } => {
            m.insert("key".into(), bytes_json(topic));
            m.insert("partition".into(), (*partition).into());
            m.insert("watermark".into(), window.watermark().into());
            let above: Vec<u64> = window.processed_above().collect();
            m.insert("processed_above".into(), above.into());
        }
        Detail::Damaged { reason } => {
            m.insert("damaged".into(), reason.as_str().into());
        }
        _ => {
            m.insert("detail".into(), format!("{:?}", item.detail).into());
        }
    }
    Value::Object(m)
}

fn vector_json(v: &idemdb::VersionVector) -> Value {
    Value::Object(v.iter().map(|(a, n)| (a.to_string(), n.into())).collect())
}

/// One item as a line of the human table: kind, scope, key, and what is stored.
pub(crate) fn item_line(item: &Item) -> String {
    let what = match &item.detail {
        Detail::Record { info, expired } => {
            let state = match &info.state {
                RecordState::Pending { lease_until } => {
                    format!("pending (lease until {lease_until})")
                }
                RecordState::Released => "released".into(),
                RecordState::Completed(r) => {
                    format!(
                        "completed at {} ({} body bytes)",
                        r.finished_at,
                        r.response.body.len()
                    )
                }
                RecordState::Failed(r) => {
                    format!(
                        "failed at {} ({} body bytes)",
                        r.finished_at,
                        r.response.body.len()
                    )
                }
                other => format!("{other:?}"),
            };
            let expired = if *expired { ", EXPIRED" } else { "" };
            format!(
                "{state}, fence {}, attempts {}, expires {}{expired}",
                info.fence, info.attempts, info.expires_at
            )
        }
        Detail::Entity { version, value } => match value {
            Some(v) => format!("version {version}: {}", bytes_text(v)),
            None => format!("version {version}: deleted (tombstone)"),
        },
        Detail::Causal(s) => format!("{} sibling(s)", s.values.len()),
        Detail::ReplicaVector(v) => format!("{:?}", v.iter().collect::<Vec<_>>()),
        Detail::Reservation {
            value,
            owner,
            bound_fence,
            live,
        } => {
            let parts: Vec<String> = value.iter().map(|p| bytes_text(p)).collect();
            let holder = match bound_fence {
                Some(f) => format!("bound to the lease with fence {f}"),
                None => format!("owner {}", bytes_text(owner)),
            };
            let live = if *live { "" } else { " (lease ended: free)" };
            format!("value [{}], {holder}{live}", parts.join(", "))
        }
        Detail::Offsets {
            topic,
            partition,
            window,
        } => format!(
            "topic {} partition {partition}: watermark {:?}, {} processed above",
            bytes_text(topic),
            window.watermark(),
            window.out_of_order_len()
        ),
        Detail::Damaged { reason } => format!("DAMAGED: {reason}"),
        other => format!("{other:?}"),
    };
    format!(
        "{:<12} {:<20} {:<28} {what}",
        item.kind.name(),
        bytes_text(&item.scope),
        bytes_text(&item.key)
    )
}

/// The kinds `--kind` names (`all`: every kind).
pub(crate) fn kinds(arg: Option<&str>) -> Result<Vec<DataKind>, String> {
    match arg {
        None => Ok(vec![DataKind::Records]),
        Some("all") => Ok(DataKind::ALL.to_vec()),
        Some(list) => list
            .split(',')
            .map(|k| {
                DataKind::from_name(k).ok_or_else(|| {
                    let names: Vec<&str> = DataKind::ALL.iter().map(|k| k.name()).collect();
                    format!("--kind {k}: not one of {} or all", names.join(", "))
                })
            })
            .collect(),
    }
}

/// The embedded store's stats as JSON.
pub(crate) fn stats_json(s: &Stats) -> Value {
    json!({
        "estimated_records": s.estimated_records,
        "estimated_index_entries": s.estimated_index_entries,
        "live_sst_bytes": s.live_sst_bytes,
        "memtable_bytes": s.memtable_bytes,
        "pending_in_memory": s.pending_in_memory,
        "sweep_lag_ms": s.sweep_lag_ms,
    })
}

/// The embedded store's stats as lines.
pub(crate) fn stats_lines(s: &Stats) -> Vec<String> {
    vec![
        format!("estimated records        {}", s.estimated_records),
        format!("estimated index entries  {}", s.estimated_index_entries),
        format!("live SST bytes           {}", s.live_sst_bytes),
        format!("memtable bytes           {}", s.memtable_bytes),
        format!("pending in memory        {}", s.pending_in_memory),
        format!("sweep lag ms             {}", s.sweep_lag_ms),
    ]
}

/// Whether the item's key (a reservation's first part, the offsets' topic) is exactly `key`.
pub(crate) fn matches(item: &Item, key: &[u8]) -> bool {
    match &item.detail {
        Detail::Reservation { value, .. } => {
            value.len() == 1 && value.first().is_some_and(|v| v == key)
        }
        Detail::Offsets { topic, .. } => topic == key,
        _ => item.key == key,
    }
}
