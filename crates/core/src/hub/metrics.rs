//! The hub's metrics: its open streams, the codes of its poll union, its upstream
//! polls and the subscribers it disconnected for stalling, read at scrape time.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use crate::hub::QuoteHub;
use crate::stats::expose;

/// Registers `hub`'s metrics in `registry`.
pub fn register(hub: &QuoteHub, registry: &mut Registry) {
    registry.register_collector(Box::new(HubMetrics(hub.clone())));
}

struct HubMetrics(QuoteHub);

impl fmt::Debug for HubMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HubMetrics")
    }
}

impl Collector for HubMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let hub = &self.0;
        let polls = "Upstream quote poll requests";
        expose::counter(&mut encoder, "hub_polls", polls, hub.polls())?;
        let stalled = "Subscribers disconnected for stalling (not reading)";
        expose::counter(&mut encoder, "hub_stalled", stalled, hub.stalled())?;
        let open = "Open quote streams";
        expose::gauge(
            &mut encoder,
            "hub_subscribers",
            open,
            hub.subscribers() as u64,
        )?;
        let codes = "Codes in the poll union";
        expose::gauge(&mut encoder, "hub_codes", codes, hub.codes() as u64)
    }
}
