//! The named schemas of the engine records the bodies carry (with the `openapi` feature).
//!
//! The engine's records are not described field by field: each is an object whose description
//! says which engine type it serializes, whose fields the engine's rustdoc documents. The
//! server declares the schemas of the records it answers alone with the same
//! [`engine_record!`](crate::engine_record).

/// Declares `$vis struct $name`, the schema of one of the engine's records: an object named
/// `$name`, described by `$description`, without field-by-field detail.
///
/// ```
/// worlds_wire::engine_record!(pub Run, "A run (`worlds_engine::WorkflowState`).");
/// ```
#[macro_export]
macro_rules! engine_record {
    ($vis:vis $name:ident, $description:literal) => {
        #[doc = $description]
        $vis struct $name;

        impl $crate::openapi::__private::utoipa::PartialSchema for $name {
            fn schema() -> $crate::openapi::__private::utoipa::openapi::RefOr<
                $crate::openapi::__private::utoipa::openapi::schema::Schema,
            > {
                $crate::openapi::__private::utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type($crate::openapi::__private::utoipa::openapi::schema::Type::Object)
                    .description(Some($description))
                    .into()
            }
        }

        impl $crate::openapi::__private::utoipa::ToSchema for $name {
            fn name() -> ::std::borrow::Cow<'static, str> {
                ::std::borrow::Cow::Borrowed(stringify!($name))
            }
        }
    };
}

/// What [`engine_record!`](crate::engine_record) expands to names; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use utoipa;
}

crate::engine_record!(
    pub StartOptions,
    "Options of a start: `workflow_id`, `idempotency_key`, `on_conflict` (`fail` or `use_existing`), `priority`, `task_queue`, `timeout_ms`… (`worlds_engine::WorkflowOptions`)."
);
crate::engine_record!(
    pub RunError,
    "How a run failed: `name`, `message`, `code`, `step`… (`worlds_engine::StructuredError`)."
);
crate::engine_record!(
    pub ApiKey,
    "An API key's record: id, name, scope, creation, expiry, revocation; never the secret (`worlds_engine::model::ApiKeyRecord`)."
);
