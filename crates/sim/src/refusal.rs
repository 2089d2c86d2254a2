//! Why the simulated upstream refuses to answer with data (its 400 and 404), shared
//! by the documented routes' checks and the handlers.

/// Why the simulator refuses to answer with data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A required parameter is missing or a value is unusable: HTTP 400 with NestJS's
    /// default text.
    BadRequest,
    /// An identifier the universe does not hold: HTTP 404 with this message.
    NotFound(String),
}
