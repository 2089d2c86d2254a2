//! The rate the upstream tolerates, found by additive increase and multiplicative
//! decrease between a floor and `limits.upstream_rps`: a throttling answer (429,
//! 503), a rising share of reported failures or timeouts among recent answers, or
//! latency well above its endpoint's recent normal halves the rate; quiet time
//! raises it step by step back to the ceiling. As TCP counts one loss per round
//! trip, only answers to requests sent after the last decrease can lower it again.
//! The budget takes its permits at this rate.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use governor::clock::Clock;

use crate::upstream::budget::RateClock;

/// How the rate adapts (`[limits] adaptive_*`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PaceSettings {
    /// Off: the rate stays at the ceiling.
    pub enabled: bool,
    /// `limits.upstream_rps` (0: no cap, and nothing to adapt).
    pub ceiling: f64,
    /// The lowest rate a decrease goes to.
    pub floor: f64,
    /// How long the way from the floor back to the ceiling takes without a signal.
    pub recovery: Duration,
}

/// What one upstream answer (or its absence) says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Signal {
    /// An answer, after this long.
    Answered(Duration),
    /// The upstream reported its own failure (`200` + `success: false`).
    Reported,
    /// No answer in time.
    Timeout,
    /// `429` or `503`: the upstream throttles us.
    Throttled,
}

/// The recent answers looked at for shares.
const WINDOW: usize = 20;
/// A share of reported failures or timeouts at or past this (with at least
/// [`MIN_SIGNALS`] of them) is a throttling signal. Few: a source that bans after
/// a burst of refusals must see us slow at its first ones.
const SHARE: f64 = 0.25;
const MIN_SIGNALS: usize = 3;
/// Latency this many times its endpoint's slow average (and at least
/// [`SLOW_FLOOR`]) is one, once the endpoint has [`MIN_SAMPLES`] answers.
const LATENCY_FACTOR: f64 = 3.0;
const SLOW_FLOOR: Duration = Duration::from_millis(500);
const MIN_SAMPLES: u32 = 5;
/// The additive increase is made in steps this long.
const STEP: Duration = Duration::from_secs(5);

/// Latency of one endpoint: a K-line's normal is not a quote's.
#[derive(Clone, Copy, Debug, Default)]
struct Latency {
    /// Exponential averages: fast (the last few) and slow (the normal), in ms.
    fast_ms: f64,
    slow_ms: f64,
    samples: u32,
}

#[derive(Debug)]
struct State {
    rate: f64,
    /// Rate-clock nanoseconds of the last decrease.
    last_decrease: Option<u64>,
    /// Rate-clock nanoseconds up to which increases have been applied.
    stepped_to: u64,
    reason: Option<String>,
    decreases: u64,
    /// Signals of requests sent since the last decrease (the last [`WINDOW`]).
    recent: VecDeque<Signal>,
    /// By endpoint id.
    latency: Vec<Latency>,
}

/// Where the pace stands, for `/status` and metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct PaceReport {
    pub rate: f64,
    pub ceiling: f64,
    pub floor: f64,
    /// Why the rate last went down.
    pub reason: Option<String>,
    pub decreases: u64,
    /// How long until the rate is back at the ceiling without another signal.
    pub full_in: Duration,
}

/// The adaptive rate of one upstream.
#[derive(Debug)]
pub struct Pace {
    settings: PaceSettings,
    clock: RateClock,
    state: Mutex<State>,
}

impl Pace {
    /// A pace at the ceiling.
    pub fn new(settings: PaceSettings, clock: RateClock) -> Pace {
        let now = clock.now().as_u64();
        Pace {
            settings,
            clock,
            state: Mutex::new(State {
                rate: settings.ceiling,
                last_decrease: None,
                stepped_to: now,
                reason: None,
                decreases: 0,
                recent: VecDeque::with_capacity(WINDOW),
                latency: Vec::new(),
            }),
        }
    }

    /// Its settings.
    pub fn settings(&self) -> PaceSettings {
        self.settings
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The increase per step: the whole way from floor to ceiling over `recovery`.
    fn increment(&self) -> f64 {
        let steps = (self.settings.recovery.as_secs_f64() / STEP.as_secs_f64()).max(1.0);
        (self.settings.ceiling - self.settings.floor).max(0.0) / steps
    }

    /// Applies the increases due since the last look.
    fn catch_up(&self, state: &mut State, now: u64) {
        let step = STEP.as_nanos() as u64;
        let steps = now.saturating_sub(state.stepped_to) / step;
        if steps > 0 {
            state.stepped_to += steps * step;
            state.rate = (state.rate + steps as f64 * self.increment()).min(self.settings.ceiling);
        }
    }

    /// The rate now (requests per second; the ceiling when off or uncapped).
    pub fn rate(&self) -> f64 {
        if !self.settings.enabled || self.settings.ceiling <= 0.0 {
            return self.settings.ceiling;
        }
        let now = self.clock.now().as_u64();
        let mut state = self.lock();
        self.catch_up(&mut state, now);
        state.rate
    }

    /// Takes in the signal of one answer of `endpoint` to a request sent at `sent`
    /// (rate-clock nanoseconds); `Some(rate)` when it lowered the rate.
    pub fn observe(&self, endpoint: usize, sent: u64, signal: Signal) -> Option<f64> {
        if !self.settings.enabled || self.settings.ceiling <= 0.0 {
            return None;
        }
        let now = self.clock.now().as_u64();
        let mut state = self.lock();
        self.catch_up(&mut state, now);
        let slow = match signal {
            Signal::Answered(took) => Self::latency(&mut state, endpoint, took),
            _ => None,
        };
        // Sent before the last decrease: it tells of the old rate, already lowered.
        if state.last_decrease.is_some_and(|last| sent <= last) {
            return None;
        }
        if state.recent.len() == WINDOW {
            state.recent.pop_front();
        }
        state.recent.push_back(signal);
        let reason = match signal {
            Signal::Throttled => Some("the upstream throttled us (429 or 503)".to_owned()),
            Signal::Answered(_) => slow,
            Signal::Reported | Signal::Timeout => {
                let count = state.recent.iter().filter(|s| **s == signal).count();
                let share = count as f64 / state.recent.len() as f64;
                (count >= MIN_SIGNALS && share >= SHARE).then(|| {
                    let what = if signal == Signal::Reported {
                        "reported failures"
                    } else {
                        "timeouts"
                    };
                    format!("{what}: {count} of the last {} answers", state.recent.len())
                })
            }
        }?;
        let rate = (state.rate / 2.0).max(self.settings.floor);
        Self::lower(&mut state, rate, now, reason);
        Some(state.rate)
    }

    /// Sets the rate to a lower `rate` at `now`, for `reason`.
    fn lower(state: &mut State, rate: f64, now: u64, reason: String) {
        state.rate = rate;
        state.last_decrease = Some(now);
        state.stepped_to = now;
        state.reason = Some(reason);
        state.decreases += 1;
        // The window starts again, and latency is judged afresh: the same answers
        // do not lower the rate twice.
        state.recent.clear();
        for l in &mut state.latency {
            l.fast_ms = l.slow_ms;
        }
    }

    /// Takes in one answer's latency for `endpoint`; why it is a signal, if it is.
    fn latency(state: &mut State, endpoint: usize, took: Duration) -> Option<String> {
        if state.latency.len() <= endpoint {
            state.latency.resize(endpoint + 1, Latency::default());
        }
        let l = &mut state.latency[endpoint];
        let ms = took.as_secs_f64() * 1000.0;
        if l.samples == 0 {
            (l.fast_ms, l.slow_ms) = (ms, ms);
        }
        l.samples = l.samples.saturating_add(1);
        l.fast_ms = 0.7 * l.fast_ms + 0.3 * ms;
        l.slow_ms = 0.98 * l.slow_ms + 0.02 * ms;
        (l.samples >= MIN_SAMPLES
            && l.fast_ms > LATENCY_FACTOR * l.slow_ms
            && l.fast_ms > SLOW_FLOOR.as_secs_f64() * 1000.0)
            .then(|| {
                format!(
                    "latency {:.0} ms, {:.1} times its normal {:.0} ms",
                    l.fast_ms,
                    l.fast_ms / l.slow_ms,
                    l.slow_ms
                )
            })
    }

    /// Takes in a lower rate another node of the fleet chose, so the fleet moves
    /// as one rate: the rate goes down to it (never up, never below the floor),
    /// and the way back up starts now, as on that node; answers to requests sent
    /// before now no longer lower it (they told of the old rate, as that node's
    /// did). Returns whether it lowered the rate.
    pub fn follow(&self, rate: f64, reason: &str) -> bool {
        if !self.settings.enabled || self.settings.ceiling <= 0.0 {
            return false;
        }
        let now = self.clock.now().as_u64();
        let mut state = self.lock();
        self.catch_up(&mut state, now);
        let rate = rate.max(self.settings.floor);
        if rate >= state.rate {
            return false;
        }
        Self::lower(&mut state, rate, now, format!("another node: {reason}"));
        true
    }

    /// Where it stands.
    pub fn report(&self) -> PaceReport {
        let rate = self.rate();
        let state = self.lock();
        let increment = self.increment();
        let missing = (self.settings.ceiling - rate).max(0.0);
        let full_in = if increment > 0.0 && self.settings.enabled {
            STEP.mul_f64((missing / increment).ceil())
        } else {
            Duration::ZERO
        };
        PaceReport {
            rate,
            ceiling: self.settings.ceiling,
            floor: self.settings.floor,
            reason: state.reason.clone(),
            decreases: state.decreases,
            full_in,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    fn pace() -> (Pace, FakeRelativeClock) {
        let fake = FakeRelativeClock::default();
        let settings = PaceSettings {
            enabled: true,
            ceiling: 20.0,
            floor: 1.0,
            recovery: Duration::from_secs(95),
        };
        (Pace::new(settings, RateClock::Fake(fake.clone())), fake)
    }

    fn at(clock: &FakeRelativeClock) -> u64 {
        clock.now().as_u64()
    }

    #[test]
    fn throttling_halves_once_per_round_trip_then_quiet_restores_it() {
        let (p, clock) = pace();
        let sent = at(&clock);
        clock.advance(Duration::from_millis(100));
        assert_eq!(p.observe(0, sent, Signal::Throttled), Some(10.0));
        assert_eq!(
            p.observe(0, sent, Signal::Throttled),
            None,
            "sent with the first: the same burst"
        );
        clock.advance(Duration::from_secs(5));
        let sent = at(&clock);
        clock.advance(Duration::from_millis(100));
        // One step (+1) came meanwhile, then the rate halves: 11 / 2.
        assert_eq!(p.observe(0, sent, Signal::Throttled), Some(5.5));
        // (20 - 1) / 19 steps of 5 s: 1 per step; 14.5 to go.
        assert_eq!(p.report().full_in, Duration::from_secs(75));
        clock.advance(Duration::from_secs(10));
        assert_eq!(p.rate(), 7.5);
        clock.advance(Duration::from_secs(600));
        assert_eq!(p.rate(), 20.0, "never past the ceiling");
        assert!(p.report().reason.unwrap().contains("429"));
    }

    #[test]
    fn a_share_of_reported_failures_is_a_signal_a_few_are_not() {
        let (p, clock) = pace();
        for _ in 0..8 {
            let ok = Signal::Answered(Duration::from_millis(50));
            assert_eq!(p.observe(0, at(&clock), ok), None);
        }
        for _ in 0..2 {
            assert_eq!(p.observe(0, at(&clock), Signal::Reported), None, "few");
        }
        assert_eq!(
            p.observe(0, at(&clock), Signal::Reported),
            Some(10.0),
            "3 of 11"
        );
        assert!(p.report().reason.unwrap().starts_with("reported failures"));
        // Answers to requests sent after the decrease count again, from nothing.
        clock.advance(Duration::from_millis(1));
        for _ in 0..2 {
            assert_eq!(p.observe(0, at(&clock), Signal::Reported), None);
        }
        assert_eq!(p.observe(0, at(&clock), Signal::Reported), Some(5.0));
    }

    #[test]
    fn latency_far_above_its_endpoints_normal_is_a_signal() {
        let (p, clock) = pace();
        for _ in 0..50 {
            let quick = Signal::Answered(Duration::from_millis(100));
            assert_eq!(p.observe(0, at(&clock), quick), None);
            // A K-line takes longer, and that is its normal.
            let kline = Signal::Answered(Duration::from_secs(3));
            assert_eq!(p.observe(1, at(&clock), kline), None);
        }
        clock.advance(Duration::from_secs(1));
        let mut lowered = None;
        for _ in 0..5 {
            let slow = Signal::Answered(Duration::from_secs(2));
            lowered = lowered.or(p.observe(0, at(&clock), slow));
        }
        assert_eq!(lowered, Some(10.0));
        assert!(p.report().reason.unwrap().starts_with("latency"));
    }

    /// Another node's lower rate is taken (never a higher one, never below the
    /// floor) and starts this node's round trip: the same burst does not halve the
    /// fleet's rate twice.
    #[test]
    fn a_lower_rate_of_another_node_is_followed() {
        let (p, clock) = pace();
        assert!(!p.follow(30.0, "x"), "never up");
        let sent = at(&clock);
        clock.advance(Duration::from_millis(10));
        assert!(p.follow(8.0, "the upstream throttled us (429 or 503)"));
        assert_eq!(p.rate(), 8.0);
        assert_eq!(
            p.observe(0, sent, Signal::Throttled),
            None,
            "sent before it followed: the same burst"
        );
        assert!(p.report().reason.unwrap().starts_with("another node"));
        assert!(p.follow(0.1, "x"));
        assert_eq!(p.rate(), 1.0, "the floor");
        clock.advance(Duration::from_secs(10));
        assert_eq!(
            p.rate(),
            3.0,
            "back up in steps from the moment it followed"
        );
    }

    #[test]
    fn never_below_the_floor_and_off_means_the_ceiling() {
        let (p, clock) = pace();
        for _ in 0..10 {
            let sent = at(&clock);
            clock.advance(Duration::from_millis(10));
            p.observe(0, sent, Signal::Throttled);
        }
        assert_eq!(p.rate(), 1.0);
        let off = Pace::new(
            PaceSettings {
                enabled: false,
                ..p.settings()
            },
            RateClock::Fake(FakeRelativeClock::default()),
        );
        assert_eq!(off.observe(0, 0, Signal::Throttled), None);
        assert_eq!(off.rate(), 20.0);
    }
}
