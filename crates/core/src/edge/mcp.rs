//! `/mcp` on the edge: the client's key and rate limit as for any request, then
//! the MCP endpoint; the response counted, logged and given its request ID as any
//! other. A missing key is a 401 in the JSON envelope without a `WWW-Authenticate`
//! challenge: some MCP clients take one for OAuth and drop the key they were given.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use http::{Request, Response, header};
use http_body_util::{BodyStream, Either, StreamBody};
use hyper::body::Incoming;
use tracing::Instrument;

use crate::edge::body::Body;
use crate::edge::handler::{Asked, Edge, Trail, request_id};
use crate::edge::head::Head;
use crate::edge::server::Connection;
use crate::mcp::{Caller, Mcp};

impl Edge {
    /// Serves one request to `/mcp` with `mcp`.
    pub fn agent(
        self: &Arc<Self>,
        mcp: &Arc<Mcp>,
        request: Request<Incoming>,
        connection: Arc<Connection>,
    ) -> BoxFuture<'static, Result<Response<Body>, Infallible>> {
        let started = Instant::now();
        let access = self.access.load_full();
        // What the count and the log line need once the request went to rmcp.
        let mut seen = Request::new(());
        *seen.method_mut() = request.method().clone();
        *seen.uri_mut() = request.uri().clone();
        *seen.version_mut() = request.version();
        *seen.headers_mut() = request.headers().clone();
        let mut trail = Trail::default();
        trail.mcp = true;
        // The request's span, as for REST: the fills a call causes are its children.
        trail.span =
            crate::telemetry::request_span(seen.method(), seen.uri().path(), seen.headers());
        let span = trail.span.clone();
        let (id, admitted) = {
            let head = Head::read(seen.headers());
            let id = request_id(head.request_id);
            // The key and the rate limit, as for a REST request.
            // The caller goes on under its token's identity, which a reload keeps
            // (the hub files an agent's watches under it, the sessions count by it).
            let admitted = access
                .admit(&head, seen.uri().query(), false, &mut trail)
                .map(|client| (access.tokens.stable(client), access.tokens.secret(client)));
            (id, admitted)
        };
        let edge = Arc::clone(self);
        let mcp = Arc::clone(mcp);
        let request_span = span.clone();
        let answered = async move {
            let served = match admitted {
                Ok((client, key)) => {
                    // The hub limits the quote streams an agent watches per
                    // client; a tool call's span is a child of the request's.
                    let mut request = request;
                    request.extensions_mut().insert(Caller {
                        client,
                        key,
                        span: request_span,
                    });
                    // rmcp's body (a JSON answer, or an event stream) as ours.
                    let (parts, body) = mcp.serve(request).await.into_parts();
                    let frames = BodyStream::new(body).boxed();
                    Ok(Response::from_parts(
                        parts,
                        Either::Right(StreamBody::new(frames)),
                    ))
                }
                Err(error) => Err(error),
            };
            let head = Head::read(seen.headers());
            let asked = Asked {
                request: &seen,
                head: &head,
                connection: &connection,
            };
            let mut response = edge.respond(&access, &asked, started, id, trail, served);
            response.headers_mut().remove(header::WWW_AUTHENTICATE);
            Ok(response)
        };
        match span {
            Some(span) => Box::pin(answered.instrument(span)),
            None => Box::pin(answered),
        }
    }
}
