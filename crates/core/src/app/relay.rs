//! What this node hears from the fleet and hands on: purges made on any node drop
//! the same keys here, and the upstream's pauses and slow-downs other nodes were
//! told of hold this node back too. Two tasks, started with the app when
//! `[cluster]` is on, ended by the stop token.

use std::sync::Arc;

use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::cache::purge::Purge;
use crate::state::AppState;

/// Starts both relays on `state`'s tracker, until `stop`.
pub fn spawn(state: &AppState, stop: &CancellationToken) {
    let fleet = state.fleet();
    let (store, cache, halt) = (
        Arc::clone(fleet.store()),
        state.cache().clone(),
        stop.clone(),
    );
    let mut purged = store.invalidations();
    state.tracker().spawn(async move {
        loop {
            tokio::select! {
                message = purged.recv() => match message {
                    Ok(message) => {
                        if let Some(purge) = Purge::from_message(&message) {
                            cache.forget(&purge).await;
                        }
                        // In order: the fleet keeps its place in the purge log
                        // (across restarts) once what came before is applied,
                        // and for good on disk (a rule not saved is read again).
                        if cache.store().disk().is_none_or(|d| !d.rules_lost()) {
                            store.applied(&message).await;
                        }
                    }
                    Err(RecvError::Lagged(lost)) => {
                        // Purges went by unread (a catch-up of many, a burst):
                        // every catalogue key is dropped rather than one kept.
                        tracing::warn!(lost, "purges from the fleet came faster than they were applied: the cache is dropped");
                        cache.forget(&Purge::Prefix("/".to_owned())).await;
                    }
                    Err(RecvError::Closed) => return,
                },
                () = halt.cancelled() => return,
            }
        }
    });
    let (mut heard, upstream, halt) = (
        fleet.limits().announcements(),
        state.upstream().clone(),
        stop.clone(),
    );
    state.tracker().spawn(async move {
        loop {
            tokio::select! {
                announcement = heard.recv() => match announcement {
                    Ok(announcement) => upstream.hear(&announcement),
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return,
                },
                () = halt.cancelled() => return,
            }
        }
    });
}
