//! The `#[workflow]`, `#[step]` and `#[activity]` attributes of
//! [worlds-engine](https://docs.rs/worlds-engine). Use them through `worlds_engine` (or its
//! prelude), not from this crate: the code they generate names `::worlds_engine`.
//!
//! Each attribute goes on an `async fn` and turns it into something the engine runs. The
//! function's body is kept as written, moved into a private inner function; what changes is
//! what its name stands for.
//!
//! | attribute | the name becomes | used as |
//! | --- | --- | --- |
//! | `#[workflow]` | a unit struct that derefs to a `Workflow<I, O>` | `world.register(&checkout)`, `world.execute(&checkout, input, options)` |
//! | `#[activity]` | a unit struct that derefs to an `Activity<I, O>` | `world.register(&charge)`, `ctx.run(&charge, input)` |
//! | `#[step]` | a plain `fn` with the same arguments, returning a future | `charge(order).await?` in workflow code |
//!
//! # Names
//!
//! A definition's name is the function's path, `concat!(module_path!(), "::", fn_name)` (so
//! `shop::payments::charge`), unless the attribute gives one: `#[step(name = "charge")]`. The
//! name is what history records and what replay checks, so give an explicit name before moving
//! or renaming a function that has runs in flight.
//!
//! # Inputs and outputs
//!
//! A function returns `Result<T, E>`, where `E` converts into `WorkflowError` (workflows) or
//! `StepError` (steps, activities); `T` is what callers get. The parameters, in order:
//!
//! * a **context** first, optionally: `WorkflowContext` for a workflow, `ActivityContext` for a
//!   step or an activity (recognised by its type's name). Without it, code reaches the context
//!   through `worlds_engine::current`.
//! * **resources** (steps and activities), marked `#[resource]`, typed `&T` or `Arc<T>`: the
//!   value of type `T` given to `world.provide`, read from the step's context at each attempt.
//!   The caller does not pass them.
//! * the **input**: every other parameter. A workflow's or activity's input type `I` is `()`
//!   for none, the type itself for one, and a tuple for several (`ctx.run(&add, (a, b))`).
//!
//! # What `#[workflow]` and `#[activity]` generate
//!
//! ```text
//! #[workflow(timeout = "1h")]
//! pub async fn checkout(ctx: WorkflowContext, order: Order) -> Result<Receipt, WorkflowError> { BODY }
//! ```
//!
//! becomes, in outline:
//!
//! ```text
//! pub struct checkout;
//!
//! impl Deref for checkout {
//!     type Target = Workflow<Order, Receipt>;
//!     fn deref(&self) -> &Workflow<Order, Receipt> {
//!         static DEFINITION: OnceLock<Workflow<Order, Receipt>> = OnceLock::new();
//!         DEFINITION.get_or_init(|| {
//!             async fn run(ctx: WorkflowContext, order: Order) -> Result<Receipt, WorkflowError> { BODY }
//!             worlds_engine::workflow(concat!(module_path!(), "::checkout"), |ctx, input| async move {
//!                 run(ctx, input).await.map_err(Into::into)
//!             })
//!             .with_options(WorkflowOptions::new().timeout(Duration::from_millis(3_600_000)))
//!         })
//!     }
//! }
//!
//! impl From<&checkout> for Definition { .. }  // for world.register(&checkout)
//! ```
//!
//! The definition is built once, on first use. Because the struct derefs to the definition,
//! everything that takes a `&Workflow<I, O>` takes `&checkout`, and its methods (`name()`,
//! `options()`) are there too. `#[activity]` is the same with `Activity`, `ActivityContext` and
//! `ActivityOptions`.
//!
//! # What `#[step]` generates
//!
//! ```text
//! #[step(retry = api)]
//! async fn charge(#[resource] bank: &Bank, order: Order) -> Result<Receipt, StepError> { BODY }
//! ```
//!
//! becomes, in outline:
//!
//! ```text
//! fn charge(order: Order) -> Current<Receipt> {
//!     async fn run(bank: &Bank, order: Order) -> Result<Receipt, StepError> { BODY }
//!     // current::workflow_context(..)?.step_with(..), or OutsideWorkflow outside a workflow
//!     __private::step(concat!(module_path!(), "::charge"), ActivityOptions::new().retry(api()),
//!         move |ctx: ActivityContext| {
//!             let order = order.clone();           // each attempt gets its own copy
//!             async move {
//!                 let bank: Arc<Bank> = ctx.resource()?;
//!                 run(&*bank, order).await.map_err(Into::into)
//!             }
//!         })
//! }
//! ```
//!
//! So calling `charge(order)` in a workflow issues a named step (`ctx.step_with`) at once, in
//! program order, and awaiting it gives the recorded result; replay returns that result without
//! running the body. The step is not registered anywhere, and its arguments are captured rather
//! than serialized: they must be `Clone + Send + Sync + 'static`, and the compiler says so at
//! the argument that is not. Use `#[activity]` instead when the step must be runnable by a
//! process that did not issue it (another task queue's workers, or after a restart before the
//! workflow replays): an activity is registered by name and its input is recorded.
//!
//! # Options
//!
//! | option | `#[workflow]` | `#[step]`, `#[activity]` | value |
//! | --- | --- | --- | --- |
//! | `name` | ✓ | ✓ | a non-empty string |
//! | `task_queue` | ✓ | ✓ | a string |
//! | `timeout` | ✓ (the run's) | ✓ (each attempt's) | a duration string: `"250ms"`, `"30s"`, `"5m"`, `"1h"` |
//! | `priority` | ✓ | | an integer, higher first |
//! | `max_retries` | ✓ | | an integer |
//! | `failure_strategy` | ✓ | | `compensate`, `retry`, `cascade`, `ignore` or `quarantine` |
//! | `retry` | | ✓ | `api`, `database`, `network`, `none`, or an expression of type `RetryConfig` |
//! | `max_attempts` | | ✓ | an integer ≥ 1, counting the first try |
//! | `heartbeat_timeout` | | ✓ | a duration string |
//!
//! Durations are checked at compile time. Unknown options, repeated options and values of the
//! wrong shape are compile errors at the option.

mod expand;
mod options;
mod signature;

use proc_macro::TokenStream;
use quote::ToTokens;

use options::Options;
use signature::Function;

/// Which attribute is being expanded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Workflow,
    Activity,
    Step,
}

impl Kind {
    fn attribute(self) -> &'static str {
        match self {
            Kind::Workflow => "#[workflow]",
            Kind::Activity => "#[activity]",
            Kind::Step => "#[step]",
        }
    }
}

/// Makes an `async fn` a workflow definition: its name becomes a unit struct that derefs to a
/// `Workflow<I, O>`, ready for `world.register(&name)` and `world.execute(&name, ..)`.
///
/// Options: `name`, `task_queue`, `priority`, `max_retries`, `timeout`, `failure_strategy`;
/// [the macros crate](https://docs.rs/worlds-engine-macros) explains the expansion.
///
/// ```
/// use worlds_engine::prelude::*;
///
/// #[step]
/// async fn double(n: u64) -> Result<u64, StepError> {
///     Ok(n * 2)
/// }
///
/// #[workflow(name = "quadruple", timeout = "1m")]
/// async fn quadruple(n: u64) -> Result<u64, WorkflowError> {
///     let twice = double(n).await?;
///     Ok(double(twice).await?)
/// }
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let world = World::new(WorldConfig::memory())?;
/// world.register(&quadruple)?;
/// world.start().await?;
/// let run = world.execute(&quadruple, 5, WorkflowOptions::default()).await?;
/// assert_eq!(run.result().await?, 20);
/// # world.shutdown().await?;
/// # Ok::<(), WorldError>(())
/// # }).unwrap();
/// ```
#[proc_macro_attribute]
pub fn workflow(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(Kind::Workflow, attr, item)
}

/// Makes an `async fn` a durable step: calling it from workflow code runs its body as a named
/// step, recorded and retried, and returns the step's result. Arguments must be
/// `Clone + Send + Sync + 'static`; `#[resource]` parameters are filled from the world.
///
/// Options: `name`, `retry`, `max_attempts`, `timeout`, `heartbeat_timeout`, `task_queue`;
/// [the macros crate](https://docs.rs/worlds-engine-macros) explains the expansion.
///
/// ```
/// use worlds_engine::prelude::*;
///
/// struct Rates { euro_cents_per_dollar: u64 }
///
/// #[step(retry = api, timeout = "10s")]
/// async fn to_euro_cents(#[resource] rates: &Rates, dollar_cents: u64) -> Result<u64, StepError> {
///     Ok(dollar_cents * rates.euro_cents_per_dollar / 100)
/// }
///
/// #[workflow]
/// async fn price(dollar_cents: u64) -> Result<u64, WorkflowError> {
///     Ok(to_euro_cents(dollar_cents).await?)
/// }
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let world = World::new(WorldConfig::memory())?;
/// world.provide(Rates { euro_cents_per_dollar: 92 });
/// world.register(&price)?;
/// world.start().await?;
/// let run = world.execute(&price, 1_000, WorkflowOptions::default()).await?;
/// assert_eq!(run.result().await?, 920);
/// # world.shutdown().await?;
/// # Ok::<(), WorldError>(())
/// # }).unwrap();
/// ```
#[proc_macro_attribute]
pub fn step(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(Kind::Step, attr, item)
}

/// Makes an `async fn` an activity definition: its name becomes a unit struct that derefs to
/// an `Activity<I, O>`, registered by name and run with `ctx.run(&name, input)`.
///
/// Options: `name`, `retry`, `max_attempts`, `timeout`, `heartbeat_timeout`, `task_queue`;
/// [the macros crate](https://docs.rs/worlds-engine-macros) explains the expansion.
///
/// ```
/// use worlds_engine::prelude::*;
///
/// #[activity(name = "add", retry = none)]
/// async fn add(a: u64, b: u64) -> Result<u64, StepError> {
///     Ok(a + b)
/// }
///
/// #[workflow]
/// async fn sum(ctx: WorkflowContext, values: Vec<u64>) -> Result<u64, WorkflowError> {
///     let mut total = 0;
///     for value in values {
///         total = ctx.run(&add, (total, value)).await?;
///     }
///     Ok(total)
/// }
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let world = World::new(WorldConfig::memory())?;
/// world.register(&add)?.register(&sum)?;
/// world.start().await?;
/// let run = world.execute(&sum, vec![1, 2, 3], WorkflowOptions::default()).await?;
/// assert_eq!(run.result().await?, 6);
/// assert_eq!(add.name(), "add");
/// # world.shutdown().await?;
/// # Ok::<(), WorldError>(())
/// # }).unwrap();
/// ```
#[proc_macro_attribute]
pub fn activity(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(Kind::Activity, attr, item)
}

fn expand(kind: Kind, attr: TokenStream, item: TokenStream) -> TokenStream {
    let options = Options::parse(kind, attr.into());
    let function = Function::parse(kind, item.clone().into());
    let generate = |options: &Options, function: &Function| match kind {
        Kind::Workflow => expand::workflow(options, function),
        Kind::Activity => expand::activity(options, function),
        Kind::Step => expand::step(options, function),
    };
    let tokens = match (options, function) {
        (Ok(options), Ok(function)) => generate(&options, &function),
        // A bad option alone: the function is still generated (with default options), so
        // the code that uses it reports nothing more.
        (Err(error), Ok(function)) => {
            let mut tokens = error.to_compile_error();
            tokens.extend(generate(&Options::default(), &function));
            tokens
        }
        // A bad function is kept as written (minus `#[resource]`, which means nothing without
        // the attribute), so it does not also become an unknown name.
        (options, Err(error)) => {
            let mut tokens = options
                .err()
                .map(|e| e.to_compile_error())
                .unwrap_or_default();
            tokens.extend(error.to_compile_error());
            tokens.extend(unchanged(item.into()));
            tokens
        }
    };
    tokens.into()
}

fn unchanged(item: proc_macro2::TokenStream) -> proc_macro2::TokenStream {
    match syn::parse2::<syn::ItemFn>(item.clone()) {
        Ok(mut function) => {
            for arg in &mut function.sig.inputs {
                if let syn::FnArg::Typed(arg) = arg {
                    arg.attrs.retain(|attr| !attr.path().is_ident("resource"));
                }
            }
            function.into_token_stream()
        }
        Err(_) => item,
    }
}
