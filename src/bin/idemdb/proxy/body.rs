//! The proxy's bodies. Invariant: no body waits forever: a client's request body must arrive
//! whole before its deadline, and an upstream's response body must send its next bytes within
//! its idle limit; either one late ends in an error, never a hang that holds a key's lease.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use idemdb::http::BoxError;
use tokio::time::{Instant, Sleep};

/// A body that fails once its timer runs out: a fixed deadline for the whole body, or an idle
/// limit restarted by every frame.
pub(crate) struct Timed<B> {
    inner: B,
    timer: Pin<Box<Sleep>>,
    idle: Option<Duration>,
    what: &'static str,
}

impl<B> Timed<B> {
    /// Fails if the whole body has not arrived by `deadline`.
    pub(crate) fn deadline(inner: B, deadline: Instant, what: &'static str) -> Self {
        Timed {
            inner,
            timer: Box::pin(tokio::time::sleep_until(deadline)),
            idle: None,
            what,
        }
    }

    /// Fails if no frame arrives for `idle`.
    pub(crate) fn idle(inner: B, idle: Duration, what: &'static str) -> Self {
        Timed {
            inner,
            timer: Box::pin(tokio::time::sleep(idle)),
            idle: Some(idle),
            what,
        }
    }
}

/// The error of a body whose timer ran out.
#[derive(Debug)]
pub(crate) struct TimedOut(&'static str);

impl std::fmt::Display for TimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} took too long", self.0)
    }
}

impl std::error::Error for TimedOut {}

impl<B> Body for Timed<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(idle) = this.idle {
                    this.timer.as_mut().reset(Instant::now() + idle);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match this.timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(TimedOut(this.what))))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body on its way to the upstream: the client's stream (passed through), or the bytes
/// the idempotency layer read to fingerprint it.
pub(crate) enum ProxyBody {
    Stream(Timed<Incoming>),
    Whole(Option<Bytes>),
}

impl From<Bytes> for ProxyBody {
    fn from(b: Bytes) -> Self {
        ProxyBody::Whole(Some(b))
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ProxyBody::Stream(s) => Pin::new(s).poll_frame(cx),
            ProxyBody::Whole(b) => Poll::Ready(
                b.take()
                    .filter(|b| !b.is_empty())
                    .map(|b| Ok(Frame::data(b))),
            ),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Stream(s) => s.is_end_stream(),
            ProxyBody::Whole(b) => b.as_ref().is_none_or(Bytes::is_empty),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Stream(s) => s.size_hint(),
            ProxyBody::Whole(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
        }
    }
}
