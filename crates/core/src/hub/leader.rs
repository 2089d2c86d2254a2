//! The hub's share of the fleet (its `Leadership`, a cluster's when `[cluster]` is
//! on), and the only file of the hub that calls it: every node registers the codes its subscribers want; one node, the
//! leader (a renewed lease with a term), polls the union through the source and
//! publishes the rows; the others take the leader's boards. Alone (no cluster, or
//! Redis away) a node polls the source itself.

use std::time::Duration;

use crate::hub::port::Code;
use crate::hub::source::{Polled, QuoteSource};
use crate::state::AppState;

/// This node's quotes for `codes`, and whether it follows another node. `spacing`
/// is how far apart this node's polls are: the lease outlives two of them.
pub(super) async fn poll(
    state: &AppState,
    source: &dyn QuoteSource,
    codes: &[Code],
    spacing: Duration,
) -> (Polled, bool) {
    let mine: Vec<&str> = codes.iter().map(|c| &**c).collect();
    let cluster = state.fleet().leadership();
    if !cluster.is_up() {
        return (source.poll(&mine).await, false);
    }
    // Two spacings of silence hand the lead to another node; the lease also covers
    // one poll's longest wait (budget and upstream timeout), so a slow poll does not
    // lose it.
    let snap = state.snapshot();
    let longest_poll =
        Duration::from_millis(snap.config.upstream.timeout_ms + snap.config.limits.client_wait_ms);
    let lease = spacing * 2 + longest_poll + Duration::from_millis(500);
    let owned: Vec<String> = mine.iter().map(|c| (*c).to_owned()).collect();
    cluster.register_codes(&owned, lease * 2).await;
    match cluster.lead_hub(lease).await {
        Ok(Some(term)) => {
            let union = cluster.all_codes().await.unwrap_or(owned);
            let union: Vec<&str> = union.iter().map(String::as_str).collect();
            let polled = source.poll(&union).await;
            cluster.publish_board(term, &polled.rows).await;
            (polled, false)
        }
        Ok(None) => {
            let board = cluster.latest_board();
            let rows = mine
                .iter()
                .filter_map(|c| Some(((*c).to_owned(), board.get(*c)?.clone())))
                .collect();
            let polled = Polled {
                rows,
                ..Polled::default()
            };
            (polled, true)
        }
        Err(_) => (source.poll(&mine).await, false),
    }
}

/// Gives the fleet's lead back when this node's polls stop (shutdown, or no
/// subscriber left), so another node takes it at once.
pub(super) async fn step_down(state: &AppState) {
    let cluster = state.fleet().leadership();
    if cluster.is_up() {
        cluster.step_down().await;
    }
}

/// Resolves when the leader's next board arrives; never unless `following`.
pub(super) async fn board_arrived(state: &AppState, following: bool) {
    if following {
        state.fleet().leadership().board_arrived().await;
    } else {
        std::future::pending().await
    }
}
