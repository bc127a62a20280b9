//! The options written in an attribute (`#[step(retry = api, timeout = "30s")]`): parsed and
//! checked here, so a typo is a compile error at the option rather than a surprise at run time.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, ExprUnary, Ident, Lit, LitStr, UnOp};

use crate::Kind;

/// The retry patterns `retry = <name>` accepts, besides an expression.
const RETRY_PATTERNS: [&str; 4] = ["api", "database", "network", "none"];

/// The failure strategies `failure_strategy = <name>` accepts, with their enum variants.
const STRATEGIES: [(&str, &str); 5] = [
    ("compensate", "Compensate"),
    ("retry", "Retry"),
    ("cascade", "Cascade"),
    ("ignore", "Ignore"),
    ("quarantine", "Quarantine"),
];

/// How a step is retried.
pub(crate) enum Retry {
    /// One of [`RETRY_PATTERNS`].
    Pattern(Ident),
    /// Any expression of type `RetryConfig`.
    Expr(Box<Expr>),
}

/// Everything an attribute may set; which keys are allowed depends on the [`Kind`].
#[derive(Default)]
pub(crate) struct Options {
    pub(crate) name: Option<LitStr>,
    pub(crate) task_queue: Option<LitStr>,
    pub(crate) timeout: Option<u64>,
    // Workflows only.
    pub(crate) priority: Option<i32>,
    pub(crate) max_retries: Option<u32>,
    pub(crate) failure_strategy: Option<Ident>,
    // Steps and activities only.
    pub(crate) retry: Option<Retry>,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) heartbeat_timeout: Option<u64>,
}

impl Kind {
    fn option_keys(self) -> &'static [&'static str] {
        match self {
            Kind::Workflow => &[
                "name",
                "task_queue",
                "priority",
                "max_retries",
                "timeout",
                "failure_strategy",
            ],
            Kind::Activity | Kind::Step => &[
                "name",
                "retry",
                "max_attempts",
                "timeout",
                "heartbeat_timeout",
                "task_queue",
            ],
        }
    }
}

impl Options {
    /// Parses the tokens inside the attribute's parentheses.
    pub(crate) fn parse(kind: Kind, tokens: TokenStream) -> syn::Result<Options> {
        let mut options = Options::default();
        let parser = syn::meta::parser(|meta| options.parse_one(kind, meta));
        syn::parse::Parser::parse2(parser, tokens)?;
        if let (Some(Retry::Pattern(pattern)), Some(_)) = (&options.retry, options.max_attempts) {
            if pattern == "none" {
                return Err(syn::Error::new(
                    pattern.span(),
                    "`retry = none` allows a single attempt, so `max_attempts` contradicts it: \
                     remove one of them",
                ));
            }
        }
        Ok(options)
    }

    fn parse_one(&mut self, kind: Kind, meta: ParseNestedMeta<'_>) -> syn::Result<()> {
        let keys = kind.option_keys();
        let key = meta
            .path
            .get_ident()
            .map(Ident::to_string)
            .filter(|key| keys.contains(&key.as_str()))
            .ok_or_else(|| {
                let path = &meta.path;
                let written = quote!(#path).to_string().replace(' ', "");
                meta.error(format!(
                    "unknown {} option `{written}`; the options are: {}",
                    kind.attribute(),
                    keys.join(", ")
                ))
            })?;
        let span = meta.path.span();
        let twice = || syn::Error::new(span, format!("the option `{key}` is given twice"));
        let value: Expr = meta.value()?.parse()?;
        match key.as_str() {
            "name" => {
                let name = string(&value, "name")?;
                if name.value().trim().is_empty() {
                    return Err(syn::Error::new(name.span(), "the name must not be empty"));
                }
                set(&mut self.name, name, twice)
            }
            "task_queue" => set(&mut self.task_queue, string(&value, "task_queue")?, twice),
            "timeout" => set(&mut self.timeout, duration(&value, "timeout")?, twice),
            "heartbeat_timeout" => set(
                &mut self.heartbeat_timeout,
                duration(&value, "heartbeat_timeout")?,
                twice,
            ),
            "priority" => set(&mut self.priority, integer(&value, "priority")?, twice),
            "max_retries" => set(
                &mut self.max_retries,
                integer(&value, "max_retries")?,
                twice,
            ),
            "max_attempts" => {
                let attempts: u32 = integer(&value, "max_attempts")?;
                if attempts == 0 {
                    return Err(syn::Error::new(
                        value.span(),
                        "`max_attempts` counts the first try, so it is at least 1 \
                         (1 means no retries)",
                    ));
                }
                set(&mut self.max_attempts, attempts, twice)
            }
            "failure_strategy" => {
                let strategy = strategy(&value)?;
                set(&mut self.failure_strategy, strategy, twice)
            }
            "retry" => set(&mut self.retry, retry(value)?, twice),
            _ => unreachable!("every key in option_keys is handled"),
        }
    }

    /// `WorkflowOptions` built from these options.
    pub(crate) fn workflow_options(&self) -> TokenStream {
        let mut calls = Vec::new();
        if let Some(queue) = &self.task_queue {
            calls.push(quote!(.task_queue(#queue)));
        }
        if let Some(priority) = self.priority {
            calls.push(quote!(.priority(#priority)));
        }
        if let Some(retries) = self.max_retries {
            calls.push(quote!(.max_retries(#retries)));
        }
        if let Some(ms) = self.timeout {
            calls.push(quote!(.timeout(::std::time::Duration::from_millis(#ms))));
        }
        if let Some(strategy) = &self.failure_strategy {
            calls.push(quote!(.failure_strategy(::worlds_engine::FailureStrategy::#strategy)));
        }
        quote!(::worlds_engine::WorkflowOptions::new() #(#calls)*)
    }

    /// `ActivityOptions` built from these options.
    pub(crate) fn activity_options(&self) -> TokenStream {
        let mut calls = Vec::new();
        let policy = match &self.retry {
            Some(Retry::Pattern(name)) if name == "none" => {
                Some(quote!(::worlds_engine::retry::RetryConfig::none()))
            }
            Some(Retry::Pattern(name)) => {
                Some(quote!(::worlds_engine::retry::retry_patterns::#name()))
            }
            Some(Retry::Expr(expr)) => {
                // Spanned, so a value of the wrong type is reported at the expression.
                Some(quote_spanned!(expr.span()=> {
                    let policy: ::worlds_engine::retry::RetryConfig = #expr;
                    policy
                }))
            }
            None => None,
        };
        let policy = match (policy, self.max_attempts) {
            (Some(policy), Some(n)) => Some(quote!(#policy.max_attempts(#n))),
            (None, Some(n)) => {
                Some(quote!(::worlds_engine::retry::RetryConfig::new().max_attempts(#n)))
            }
            (policy, None) => policy,
        };
        if let Some(policy) = policy {
            calls.push(quote!(.retry(#policy)));
        }
        if let Some(ms) = self.timeout {
            calls.push(quote!(.timeout(::std::time::Duration::from_millis(#ms))));
        }
        if let Some(ms) = self.heartbeat_timeout {
            calls.push(quote!(.heartbeat_timeout(::std::time::Duration::from_millis(#ms))));
        }
        if let Some(queue) = &self.task_queue {
            calls.push(quote!(.task_queue(#queue)));
        }
        quote!(::worlds_engine::ActivityOptions::new() #(#calls)*)
    }
}

fn set<T>(slot: &mut Option<T>, value: T, twice: impl FnOnce() -> syn::Error) -> syn::Result<()> {
    if slot.is_some() {
        return Err(twice());
    }
    *slot = Some(value);
    Ok(())
}

fn string(value: &Expr, key: &str) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Ok(s.clone()),
        _ => Err(syn::Error::new(
            value.span(),
            format!("`{key}` takes a string literal, e.g. {key} = \"payments\""),
        )),
    }
}

/// A whole number, optionally negative, that fits `T`.
fn integer<T>(value: &Expr, key: &str) -> syn::Result<T>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    let (negative, lit) = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => (false, lit),
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            expr,
            ..
        }) => match &**expr {
            Expr::Lit(ExprLit {
                lit: Lit::Int(lit), ..
            }) => (true, lit),
            _ => return Err(not_integer(value, key)),
        },
        _ => return Err(not_integer(value, key)),
    };
    let digits = format!("{}{}", if negative { "-" } else { "" }, lit.base10_digits());
    digits.parse::<T>().map_err(|e| {
        syn::Error::new(
            value.span(),
            format!("`{key} = {digits}` is out of range: {e}"),
        )
    })
}

fn not_integer(value: &Expr, key: &str) -> syn::Error {
    syn::Error::new(
        value.span(),
        format!("`{key}` takes a whole number, e.g. {key} = 3"),
    )
}

/// A duration string checked now, as milliseconds.
fn duration(value: &Expr, key: &str) -> syn::Result<u64> {
    let text = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => s,
        Expr::Lit(ExprLit {
            lit: Lit::Int(n), ..
        }) => {
            return Err(syn::Error::new(
                n.span(),
                format!(
                    "`{key}` takes a duration with its unit, e.g. {key} = \"{}s\"",
                    n.base10_digits()
                ),
            ))
        }
        _ => {
            return Err(syn::Error::new(
                value.span(),
                format!("`{key}` takes a duration string, e.g. {key} = \"30s\""),
            ))
        }
    };
    parse_millis(&text.value()).ok_or_else(|| {
        syn::Error::new(
            text.span(),
            format!(
                "invalid duration {:?}: write a whole number followed by ms, s, m, h or d, \
                 e.g. \"250ms\", \"30s\", \"5m\", \"1h\", \"7d\"",
                text.value()
            ),
        )
    })
}

/// The engine's duration syntax (`^(\d+)(ms|s|m|h|d)$`), checked at compile time.
fn parse_millis(text: &str) -> Option<u64> {
    let digits_end = text
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(digits_end);
    let factor: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(factor)
}

fn strategy(value: &Expr) -> syn::Result<Ident> {
    let names: Vec<&str> = STRATEGIES.iter().map(|(name, _)| *name).collect();
    let error = || {
        syn::Error::new(
            value.span(),
            format!("`failure_strategy` is one of: {}", names.join(", ")),
        )
    };
    let ident = plain_ident(value).ok_or_else(error)?;
    let variant = STRATEGIES
        .iter()
        .find(|(name, _)| ident == name)
        .map(|(_, variant)| *variant)
        .ok_or_else(error)?;
    Ok(Ident::new(variant, ident.span()))
}

fn retry(value: Expr) -> syn::Result<Retry> {
    match plain_ident(&value) {
        Some(ident) if RETRY_PATTERNS.iter().any(|name| ident == name) => {
            Ok(Retry::Pattern(ident.clone()))
        }
        Some(ident) => Err(syn::Error::new(
            ident.span(),
            format!(
                "unknown retry pattern `{ident}`: use one of {}, or an expression that makes \
                 a RetryConfig, e.g. retry = RetryConfig::new().max_attempts(2)",
                RETRY_PATTERNS.join(", ")
            ),
        )),
        None => Ok(Retry::Expr(Box::new(value))),
    }
}

fn plain_ident(value: &Expr) -> Option<&Ident> {
    match value {
        Expr::Path(path) if path.qself.is_none() && path.attrs.is_empty() => path.path.get_ident(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_follow_the_engine_syntax() {
        assert_eq!(parse_millis("250ms"), Some(250));
        assert_eq!(parse_millis("30s"), Some(30_000));
        assert_eq!(parse_millis("2m"), Some(120_000));
        assert_eq!(parse_millis("1h"), Some(3_600_000));
        for bad in [
            "",
            "5",
            "ms",
            "1.5s",
            " 5s",
            "5 s",
            "5S",
            "-1s",
            "99999999999999999999h",
        ] {
            assert_eq!(parse_millis(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn options_are_checked_per_kind() {
        let parsed = Options::parse(
            Kind::Step,
            quote!(
                retry = api,
                max_attempts = 2,
                timeout = "30s",
                name = "charge"
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.max_attempts, Some(2));
        assert_eq!(parsed.timeout, Some(30_000));
        let error = |kind, tokens| match Options::parse(kind, tokens) {
            Ok(_) => panic!("accepted"),
            Err(e) => e.to_string(),
        };
        assert!(error(Kind::Step, quote!(priority = 1)).contains("unknown #[step] option"));
        assert!(error(Kind::Workflow, quote!(retry = api)).contains("the options are: name"));
        assert!(error(Kind::Step, quote!(timeout = "5")).contains("invalid duration"));
        assert!(error(Kind::Step, quote!(timeout = 5)).contains("\"5s\""));
        assert!(error(Kind::Step, quote!(retry = apis)).contains("unknown retry pattern"));
        assert!(error(Kind::Step, quote!(max_attempts = 0)).contains("at least 1"));
        assert!(error(Kind::Step, quote!(name = "a", name = "b")).contains("twice"));
        assert!(error(Kind::Step, quote!(retry = none, max_attempts = 3)).contains("contradicts"));
        assert!(error(Kind::Workflow, quote!(failure_strategy = Sometimes)).contains("one of"));
        let workflow = Options::parse(Kind::Workflow, quote!(priority = -3, max_retries = 1));
        assert_eq!(workflow.map(|o| o.priority).ok().flatten(), Some(-3));
    }
}
