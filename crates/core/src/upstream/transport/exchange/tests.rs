//! The exchange's framing, fed the way the network may hand it over: a byte at a
//! time (every partial parse taken), a few bytes at a time, and at once. The real
//! sockets, TLS and the pool are `transport/tests.rs`'s.

use super::*;

use std::time::Duration;

use http::HeaderMap;

/// Reads an answer from `answer`'s bytes, which the far end hands over at most
/// `per_read` bytes at a time and then closes when `close` (else holds open: the
/// answer must end by its framing). The result, and what the connection's buffer
/// kept after it.
async fn read_from(
    answer: &[u8],
    per_read: usize,
    close: bool,
    limit: u64,
) -> (Result<(Received, bool), WireError>, BytesMut) {
    let (mut near, mut far) = tokio::io::duplex(per_read);
    let answer = answer.to_vec();
    let writer = tokio::spawn(async move {
        let _ = far.write_all(&answer).await;
        if !close {
            std::future::pending::<()>().await;
        }
    });
    let mut buf = BytesMut::new();
    let got = tokio::time::timeout(
        Duration::from_secs(10),
        read_answer(&mut near, &mut buf, limit),
    )
    .await
    .expect("the answer ends by its framing or its connection's end");
    writer.abort();
    (got, buf)
}

/// The answer read whole at each of three read sizes, all alike; and that it
/// left nothing in the buffer.
async fn read_whole(answer: &[u8], close: bool) -> (Received, bool) {
    let mut seen = Vec::new();
    for per_read in [1, 7, 64 * 1024] {
        let (got, buf) = read_from(answer, per_read, close, 1024).await;
        let (received, keep) = got.unwrap_or_else(|e| panic!("{per_read} a read: {e}"));
        assert!(buf.is_empty(), "{per_read} a read left {buf:?}");
        seen.push((received, keep));
    }
    for (received, keep) in &seen[1..] {
        assert_eq!(received.status, seen[0].0.status);
        assert_eq!(received.body, seen[0].0.body);
        assert_eq!(*keep, seen[0].1);
    }
    seen.swap_remove(0)
}

async fn refused(answer: &[u8], close: bool, limit: u64) -> WireError {
    let (got, _) = read_from(answer, 5, close, limit).await;
    got.expect_err("refused")
}

#[tokio::test]
async fn a_body_of_announced_length_is_read_into_a_buffer_of_its_own() {
    let (got, keep) = read_whole(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(&got.body[..], b"hello");
    assert!(keep && !got.close_delimited);
    let own = got
        .body
        .try_into_mut()
        .expect("the body's buffer is its own");
    assert_eq!(own.capacity(), 5, "sized to the body");
}

#[tokio::test]
async fn chunks_are_joined_and_their_extensions_and_trailers_dropped() {
    let answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
        5;name=value\r\nhello\r\n6\r\n world\r\n0\r\nx-trailer: 1\r\n\r\n";
    let (got, keep) = read_whole(answer, false).await;
    assert_eq!(&got.body[..], b"hello world");
    assert!(keep && !got.close_delimited);
    let (got, _) = read_whole(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        false,
    )
    .await;
    assert_eq!(&got.body[..], b"{}", "the last coding decides");
}

#[tokio::test]
async fn a_body_without_length_or_chunks_ends_with_the_connection() {
    for head in [
        &b"HTTP/1.1 200 OK\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\n",
    ] {
        let answer = [head, b"{\"a\":1}"].concat();
        let (got, keep) = read_whole(&answer, true).await;
        assert_eq!(&got.body[..], b"{\"a\":1}");
        assert!(got.close_delimited && !keep);
    }
}

#[tokio::test]
async fn interim_answers_are_skipped() {
    let (got, keep) = read_whole(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\n{}",
        false,
    )
    .await;
    assert_eq!(got.status, StatusCode::NOT_FOUND);
    assert_eq!(&got.body[..], b"{}");
    assert!(keep);
}

#[tokio::test]
async fn no_content_has_no_body_and_keeps_the_connection() {
    for answer in [
        &b"HTTP/1.1 204 No Content\r\n\r\n"[..],
        b"HTTP/1.1 304 Not Modified\r\ncontent-length: 10\r\n\r\n",
    ] {
        let (got, keep) = read_whole(answer, false).await;
        assert!(got.body.is_empty() && keep && !got.close_delimited);
    }
}

#[tokio::test]
async fn a_connection_is_kept_only_when_the_answer_allows() {
    let answers: [(&[u8], bool); 5] = [
        (
            b"HTTP/1.1 200 OK\r\nConnection: close\r\ncontent-length: 0\r\n\r\n",
            false,
        ),
        (
            b"HTTP/1.1 200 OK\r\nconnection: upgrade, Close\r\ncontent-length: 0\r\n\r\n",
            false,
        ),
        (b"HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n", false),
        (
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\ncontent-length: 0\r\n\r\n",
            true,
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
            false,
        ),
    ];
    for (answer, kept) in answers {
        let (_, keep) = read_whole(answer, false).await;
        assert_eq!(keep, kept, "{}", String::from_utf8_lossy(answer));
    }
}

#[tokio::test]
async fn retry_after_is_kept_with_the_date_beside_it() {
    let (got, _) = read_whole(
        b"HTTP/1.1 429 Too Many Requests\r\nDate: Mon, 30 Nov 2026 08:00:00 GMT\r\n\
          Retry-After: 3\r\ncontent-length: 0\r\n\r\n",
        false,
    )
    .await;
    assert_eq!(got.retry_after.unwrap(), "3");
    assert_eq!(got.date.unwrap(), "Mon, 30 Nov 2026 08:00:00 GMT");
    let (got, _) = read_whole(
        b"HTTP/1.1 200 OK\r\nDate: Mon, 30 Nov 2026 08:00:00 GMT\r\ncontent-length: 0\r\n\r\n",
        false,
    )
    .await;
    assert!(got.retry_after.is_none() && got.date.is_none());
}

#[tokio::test]
async fn a_body_past_the_limit_is_refused_before_it_is_read() {
    let too_large = WireError::TooLarge { limit: 4 };
    // The far end holds the connection open without the body: announced is enough.
    let announced = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n";
    assert_eq!(refused(announced, false, 4).await, too_large);
    let chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\n";
    assert_eq!(refused(chunked, false, 4).await, too_large);
    // A size that, added to what came before it, passes 2^64.
    let huge =
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\na\r\nffffffffffffffff\r\n";
    assert_eq!(refused(huge, false, 4).await, too_large);
    let unframed = b"HTTP/1.1 200 OK\r\n\r\nabcde";
    assert_eq!(refused(unframed, false, 4).await, too_large);
}

#[tokio::test]
async fn broken_framing_or_a_cut_answer_is_unreachable() {
    let answers: [(&[u8], bool); 10] = [
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nabc",
            false,
        ),
        (b"HTTP/1.1 200 OK\r\ncontent-length: two\r\n\r\nab", false),
        (b"HTTP/1.1 200 OK\r\ncontent-length: +2\r\n\r\nab", false),
        (
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n",
            false,
        ),
        (b"HTTP/1.1 2OO OK\r\ncontent-length: 0\r\n\r\n", false),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc", true),
        (b"HTTP/1.1 200 OK\r\ncontent-len", true),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            false,
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabX\r\n0\r\n\r\n",
            false,
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nab\r\n",
            true,
        ),
    ];
    for (answer, close) in answers {
        assert_eq!(
            refused(answer, close, 1024).await,
            WireError::Unreachable,
            "{}",
            String::from_utf8_lossy(answer)
        );
    }
    // A head that never ends within its bound, from an upstream holding it open.
    let long_header = [
        &b"HTTP/1.1 200 OK\r\nx-long: "[..],
        &vec![b'a'; MAX_HEAD],
        b"\r\n\r\n",
    ]
    .concat();
    let (got, _) = read_from(&long_header, 4096, false, 1024).await;
    assert_eq!(got.err(), Some(WireError::Unreachable));
}

/// A header map of `(name, value)` pairs.
fn header_map(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    pairs
        .iter()
        .map(|&(name, value)| {
            let name = http::HeaderName::from_static(name);
            (name, HeaderValue::from_static(value))
        })
        .collect()
}

#[test]
fn a_request_head_carries_the_target_host_and_headers() {
    let mut headers = header_map(&[("accept", "application/json")]);
    let common = CommonHeaders::new(headers.clone());
    let none = [];
    let head = request_head(("/api/v1/x?a=1", ""), "upstream:8080", &common, &none).unwrap();
    assert_eq!(
        String::from_utf8(head).unwrap(),
        "GET /api/v1/x?a=1 HTTP/1.1\r\nhost: upstream:8080\r\naccept: application/json\r\n\r\n"
    );
    headers.insert(http::header::HOST, HeaderValue::from_static("named"));
    let common = CommonHeaders::new(headers);
    let head = request_head(("/", ""), "upstream:8080", &common, &none).unwrap();
    let head = String::from_utf8(head).unwrap();
    assert_eq!(head.matches("host:").count(), 1, "{head}");
    assert!(head.contains("host: named\r\n"), "{head}");
    assert!(request_head(("/a b", ""), "upstream", &common, &none).is_none());
    assert!(request_head(("/a\r\nx: y", ""), "upstream", &common, &none).is_none());
    // A target in two parts (a base's path, then a target after it) is checked
    // and written whole.
    let head = request_head(("/api/v1", "/x?a=1"), "up", &common, &none).unwrap();
    assert!(
        String::from_utf8(head)
            .unwrap()
            .starts_with("GET /api/v1/x?a=1 HTTP/1.1\r\n")
    );
    assert!(request_head(("/api/v1", "/a b"), "up", &common, &none).is_none());
    assert!(request_head(("/a b", "/x"), "up", &common, &none).is_none());
}

#[test]
fn a_request_s_own_headers_follow_the_common_ones_and_replace_those_of_their_name() {
    let headers = header_map(&[("accept", "application/json"), ("user-agent", "mdproxy")]);
    let common = CommonHeaders::new(headers);
    let mut own: Vec<_> = header_map(&[("x-request-id", "r1")])
        .into_iter()
        .map(|(name, value)| (name.unwrap(), value))
        .collect();
    let head = request_head(("/", ""), "up", &common, &own).unwrap();
    assert_eq!(
        String::from_utf8(head).unwrap(),
        "GET / HTTP/1.1\r\nhost: up\r\naccept: application/json\r\nuser-agent: mdproxy\r\nx-request-id: r1\r\n\r\n"
    );
    own.push((http::header::ACCEPT, HeaderValue::from_static("text/plain")));
    own.push((http::header::HOST, HeaderValue::from_static("other")));
    let head = String::from_utf8(request_head(("/", ""), "up", &common, &own).unwrap()).unwrap();
    for (line, count) in [
        ("accept: text/plain\r\n", 1),
        ("accept: application/json", 0),
        ("host: other\r\n", 1),
        ("host: up", 0),
        ("user-agent: mdproxy\r\n", 1),
        ("x-request-id: r1\r\n", 1),
    ] {
        assert_eq!(head.matches(line).count(), count, "{line:?} in {head}");
    }
}

/// The reader fuzzed: any bytes an upstream sends, handed over in any sizes, end
/// in an answer or an error, never a panic or a wait past the connection's end;
/// and any body framed any of the three ways comes back as it was sent.
mod fuzz {
    use proptest::prelude::*;

    use super::*;

    /// How a generated answer frames its body.
    #[derive(Clone, Debug)]
    enum Framed {
        Length,
        /// Chunks cut at these sizes (a last one takes the rest).
        Chunked(Vec<usize>),
        Close,
    }

    fn framed() -> impl Strategy<Value = Framed> {
        prop_oneof![
            Just(Framed::Length),
            proptest::collection::vec(1usize..40, 0..6).prop_map(Framed::Chunked),
            Just(Framed::Close),
        ]
    }

    fn answer_of(body: &[u8], framed: &Framed, interim: bool) -> Vec<u8> {
        let mut answer = Vec::new();
        if interim {
            answer.extend_from_slice(b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n");
        }
        answer.extend_from_slice(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n");
        match framed {
            Framed::Length => {
                answer.extend_from_slice(
                    format!("content-length: {}\r\n\r\n", body.len()).as_bytes(),
                );
                answer.extend_from_slice(body);
            }
            Framed::Chunked(cuts) => {
                answer.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
                let mut rest = body;
                for &cut in cuts.iter().chain(std::iter::once(&usize::MAX)) {
                    let (chunk, after) = rest.split_at(cut.min(rest.len()));
                    if !chunk.is_empty() {
                        answer.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                        answer.extend_from_slice(chunk);
                        answer.extend_from_slice(b"\r\n");
                    }
                    rest = after;
                }
                answer.extend_from_slice(b"0\r\n\r\n");
            }
            Framed::Close => {
                answer.extend_from_slice(b"\r\n");
                answer.extend_from_slice(body);
            }
        }
        answer
    }

    fn run<T>(work: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(work)
    }

    proptest! {
        #[test]
        fn any_bytes_end_in_an_answer_or_an_error(
            bytes in proptest::collection::vec(any::<u8>(), 0..400),
            per_read in 1usize..64,
        ) {
            let mut answer = b"HTTP/1.1 200 OK\r\n".to_vec();
            answer.extend_from_slice(&bytes);
            let (got, _) = run(read_from(&answer, per_read, true, 100));
            if let Ok((received, _)) = got {
                prop_assert!(received.body.len() <= 100);
            }
        }

        #[test]
        fn a_framed_body_comes_back_as_sent(
            body in proptest::collection::vec(any::<u8>(), 0..200),
            framed in framed(),
            interim in any::<bool>(),
            per_read in 1usize..64,
        ) {
            let answer = answer_of(&body, &framed, interim);
            let close = matches!(framed, Framed::Close);
            let (got, buf) = run(read_from(&answer, per_read, close, 1024));
            let (received, keep) = got.map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(received.status, StatusCode::OK);
            prop_assert_eq!(&received.body[..], &body[..]);
            prop_assert_eq!(received.close_delimited, close);
            prop_assert_eq!(keep, !close);
            prop_assert!(buf.is_empty());
        }
    }
}
