//! Mapping database errors to the engine's errors, and small conversions.

use worlds_engine::WorldError;

/// The engine error for a failed database call while doing `what`.
pub(crate) fn error(server: &str, what: &str, e: sqlx::Error) -> WorldError {
    let e = Described(&e);
    match e.0 {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::Io(_)
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => WorldError::Unavailable(format!(
            "PostgreSQL at {server} did not answer while {what}: {e}; check that the server is running and reachable"
        )),
        // Connection exceptions (class 08) and the server shutting sessions down (57P01
        // admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now).
        sqlx::Error::Database(db)
            if db
                .code()
                .is_some_and(|c| c.starts_with("08") || c.starts_with("57P0")) =>
        {
            WorldError::Unavailable(format!(
                "PostgreSQL at {server} closed the session while {what}: {e}; the next call reconnects"
            ))
        }
        sqlx::Error::Database(db) if db.code().as_deref() == Some("57014") => {
            WorldError::Unavailable(format!(
                "PostgreSQL at {server} cancelled a statement while {what} (statement timeout): {e}"
            ))
        }
        // Text PostgreSQL cannot keep (NUL): the engine refuses it in what it writes, so only
        // a caller of the store itself gets here.
        sqlx::Error::Database(db) if db.code().as_deref() == Some("22021") => {
            WorldError::InvalidInput {
                field: "text".into(),
                message: format!(
                    "PostgreSQL cannot store it while {what}: {e}; identifiers and names may not hold NUL (U+0000)"
                ),
            }
        }
        _ => WorldError::Internal(format!("PostgreSQL error while {what}: {e}")),
    }
}

/// A database error in words for callers: the server's message and its SQLSTATE code, never
/// where in the server's own source the error was raised (sqlx's `Display` adds that line).
struct Described<'a>(&'a sqlx::Error);

impl std::fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            sqlx::Error::Database(db) => match db.code() {
                Some(code) => write!(f, "{} (SQLSTATE {code})", db.message()),
                None => f.write_str(db.message()),
            },
            other => write!(f, "{other}"),
        }
    }
}

/// The name of the constraint a unique violation broke, if `e` is one.
pub(crate) fn unique_violation(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Database(db) if db.code().as_deref() == Some("23505") => {
            Some(db.constraint().unwrap_or_default().to_owned())
        }
        _ => None,
    }
}

/// True if `id` can be a `text` parameter: PostgreSQL text cannot hold NUL. Ids kept as
/// `text` (run, step, hook and correlation ids) never hold it (the engine refuses NUL in
/// them), so a lookup by one that does finds nothing, as on every other store.
pub(crate) fn storable(id: &str) -> bool {
    !id.contains('\0')
}

/// A `u64` from the engine as a `bigint` (saturating).
pub(crate) fn big(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A `bigint` from the database as a `u64` (negative reads as 0).
pub(crate) fn unsigned(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// The JSON text of a value the engine hands over.
pub(crate) fn to_json<T: serde::Serialize>(what: &str, value: &T) -> Result<String, WorldError> {
    serde_json::to_string(value).map_err(|source| WorldError::Serialization {
        what: what.to_owned(),
        source,
    })
}

/// A value from JSON text the store wrote.
pub(crate) fn from_json<T: serde::de::DeserializeOwned>(
    what: &str,
    text: &str,
) -> Result<T, WorldError> {
    serde_json::from_str(text)
        .map_err(|e| WorldError::Internal(format!("the stored {what} does not parse: {e}")))
}
