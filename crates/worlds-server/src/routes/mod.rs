//! The routes, grouped by the scope they need (see [`router`](crate::router)).

pub(crate) mod health;
pub(crate) mod hooks;
pub(crate) mod keys;
pub(crate) mod metrics;
pub(crate) mod pauses;
pub(crate) mod recovery;
pub(crate) mod retention;
pub(crate) mod runs;
pub(crate) mod schedules;
pub(crate) mod streams;
pub(crate) mod workers;
