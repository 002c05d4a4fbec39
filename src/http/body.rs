//! Bodies: the layer's boxed response body, reading a body up to a limit, and a body that puts
//! back the bytes already read in front of the rest. Invariant: no byte of a response is dropped
//! or reordered, whether it was stored or passed through.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full};

/// The error type of bodies passed through the layer.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of every response the layer returns: a stored or replayed body, a problem document, or
/// the handler's own body passed through.
pub type HttpBody = UnsyncBoxBody<Bytes, BoxError>;

pub(crate) fn full(bytes: impl Into<Bytes>) -> HttpBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

pub(crate) fn boxed<B>(body: B) -> HttpBody
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

/// What reading a response body up to a limit gave.
pub(crate) enum Read {
    /// The whole body, within the limit.
    Whole(Bytes),
    /// The body is larger than the limit: the bytes read so far and the rest, to pass through.
    TooLarge(HttpBody),
    /// The body failed before its end (the error is the handler's; the client gets a 502).
    Failed,
}

/// Reads `body` up to `limit` bytes. Trailers are not kept (a stored response has none).
pub(crate) async fn read_limited<B>(body: B, limit: usize) -> Read
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let mut body = Box::pin(body);
    let mut buf = BytesMut::new();
    loop {
        match body.frame().await {
            None => return Read::Whole(buf.freeze()),
            Some(Err(_)) => return Read::Failed,
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    buf.extend_from_slice(&data);
                    if buf.len() > limit {
                        return Read::TooLarge(boxed(Prefixed {
                            prefix: Some(buf.freeze()),
                            rest: body,
                        }));
                    }
                }
            }
        }
    }
}

/// `prefix` then whatever `rest` still yields.
struct Prefixed<B> {
    prefix: Option<Bytes>,
    rest: Pin<Box<B>>,
}

impl<B: Body<Data = Bytes>> Body for Prefixed<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        if let Some(p) = this.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(p))));
        }
        this.rest.as_mut().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = self.rest.size_hint();
        if let Some(p) = &self.prefix {
            let n = p.len() as u64;
            // Raise the upper bound first: each setter asserts lower <= upper.
            if let Some(u) = hint.upper() {
                hint.set_upper(u.saturating_add(n));
            }
            hint.set_lower(hint.lower().saturating_add(n));
        }
        hint
    }
}
