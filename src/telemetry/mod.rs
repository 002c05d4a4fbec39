//! Telemetry, which every floor may use: the spans each operation opens (`spans`) and the outcome
//! counters each backend keeps (`counters`). Invariant: nothing here decides an outcome; it only
//! names and counts what a backend decided, the same way for both backends.

pub(crate) mod counters;
pub(crate) mod spans;
