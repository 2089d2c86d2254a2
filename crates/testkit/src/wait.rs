//! Bounded waits: a condition polled until it holds or its limit passes (every
//! loop in a test stops by itself).

use std::time::Duration;

/// Polls `check` every 20 ms for at most `limit`; true when it held.
pub async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check()
}

/// [`eventually`] for a check that must ask over the network: polled every 50 ms
/// until it holds or `limit` passes.
pub async fn eventually_async<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check().await
}

/// The first answer of `ask` in `coding` (its `Content-Encoding`, given first in
/// the pair): a request for a coding that the entry's fill did not make (no client
/// had asked for it) gets the identity body while it is made in the background, so
/// a test asks again, every 10 ms for at most 3 s.
pub async fn once_coded<T, F, Fut>(coding: &str, mut ask: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (String, T)>,
{
    let mut given = Vec::new();
    for _ in 0..300 {
        let (got, answer) = ask().await;
        if got == coding {
            return answer;
        }
        given.push(got);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never {coding}: given {given:?}");
}
