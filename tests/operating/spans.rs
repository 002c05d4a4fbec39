//! A tracing subscriber for tests: it keeps every closed span's name and fields.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// A closed span: its name and every field recorded on it, as text.
#[derive(Debug, Clone)]
pub struct Closed {
    pub name: String,
    pub fields: BTreeMap<String, String>,
}

impl Closed {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().into(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.to_string());
    }
}

/// Collects closed spans.
#[derive(Clone, Default)]
pub struct Capture(Arc<Mutex<Vec<Closed>>>);

impl Capture {
    pub fn spans(&self) -> Vec<Closed> {
        self.0.lock().unwrap().clone()
    }

    /// A subscriber that reports to this capture (install with `with_default` or `set_default`).
    pub fn subscriber(&self) -> impl Subscriber + Send + Sync {
        tracing_subscriber::registry().with(self.clone())
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut f = Fields::default();
        attrs.record(&mut f);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(f);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(f) = span.extensions_mut().get_mut::<Fields>() {
                values.record(f);
            }
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            let fields = span
                .extensions_mut()
                .remove::<Fields>()
                .map(|f| f.0)
                .unwrap_or_default();
            self.0.lock().unwrap().push(Closed {
                name: span.name().into(),
                fields,
            });
        }
    }
}

/// Panics if any field of any span holds `secret` (a key, a tenant, response bytes).
pub fn assert_absent(spans: &[Closed], secret: &str) {
    for s in spans {
        for (k, v) in &s.fields {
            assert!(
                !v.contains(secret),
                "span {} field {k} = {v:?} holds {secret:?}",
                s.name
            );
        }
    }
}
