//! The simulator's response body: a whole buffer, or the stream's chunks. Its own,
//! like the rest of the other side of the wire.

use std::convert::Infallible;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use http_body_util::{Either, Full, StreamBody};
use hyper::body::Frame;

/// Every answer's body.
pub type Body =
    Either<Full<Bytes>, StreamBody<BoxStream<'static, Result<Frame<Bytes>, Infallible>>>>;

/// A whole body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Either::Left(Full::new(bytes.into()))
}

/// A body streamed chunk by chunk.
pub fn stream(chunks: BoxStream<'static, Bytes>) -> Body {
    Either::Right(StreamBody::new(chunks.map(|b| Ok(Frame::data(b))).boxed()))
}
