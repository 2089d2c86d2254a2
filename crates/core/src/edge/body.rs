//! The one response body type: a whole `Bytes` (every JSON answer, no boxing on the
//! hit path) or a stream of frames (text/event-stream).

use std::convert::Infallible;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use http_body_util::{Either, Full, StreamBody};
use hyper::body::Frame;

/// A streamed body: frames of `Bytes` until the stream ends.
pub type Stream = StreamBody<BoxStream<'static, Result<Frame<Bytes>, Infallible>>>;

/// Every response's body.
pub type Body = Either<Full<Bytes>, Stream>;

/// A whole body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Either::Left(Full::new(bytes.into()))
}

/// An empty body.
pub fn empty() -> Body {
    Either::Left(Full::new(Bytes::new()))
}

/// A streamed body from a stream of chunks.
pub fn stream(chunks: BoxStream<'static, Bytes>) -> Body {
    use futures_util::StreamExt;
    Either::Right(StreamBody::new(chunks.map(|b| Ok(Frame::data(b))).boxed()))
}
