//! The annotated function: checked against the rules of its kind and split into the parts the
//! generated code needs (its parameters by role, its output type, its body).

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{
    Attribute, Block, FnArg, GenericArgument, Ident, Item, ItemFn, Meta, Pat, PathArguments,
    ReturnType, Type, Visibility,
};

use crate::Kind;

/// The function under an attribute, checked.
pub(crate) struct Function {
    /// `///` comments, kept on the generated item.
    pub(crate) docs: Vec<Attribute>,
    /// Every other attribute, kept on the body.
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) ident: Ident,
    pub(crate) params: Vec<Param>,
    /// The declared return type.
    pub(crate) output: Box<Type>,
    /// The success type: `T` of `Result<T, E>`.
    pub(crate) ok: TokenStream,
    pub(crate) block: Box<Block>,
}

/// One parameter.
pub(crate) struct Param {
    /// Its attributes, without `#[resource]`.
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) pat: Box<Pat>,
    pub(crate) ty: Box<Type>,
    pub(crate) role: Role,
    /// The name the generated code gives the value: the parameter's own name when it is a
    /// plain identifier.
    pub(crate) binding: Ident,
}

/// Where a parameter's value comes from.
pub(crate) enum Role {
    /// The context the engine passes (`WorkflowContext` or `ActivityContext`).
    Context,
    /// A value provided on the world, read from the step's context.
    Resource(Resource),
    /// Part of the input, given by the caller.
    Input,
}

/// How a resource parameter holds its value.
pub(crate) enum Resource {
    /// `Arc<T>`: the parameter's type as written.
    Shared,
    /// `&T`: the referenced type.
    Borrowed(Box<Type>),
}

impl Function {
    pub(crate) fn parse(kind: Kind, tokens: TokenStream) -> syn::Result<Function> {
        let item = match syn::parse2::<Item>(tokens)? {
            Item::Fn(item) => item,
            other => {
                return Err(syn::Error::new_spanned(
                    item_head(&other),
                    format!(
                        "{} goes on an `async fn`, not on {}",
                        kind.attribute(),
                        item_kind(&other)
                    ),
                ))
            }
        };
        check_signature(kind, &item)?;
        let ItemFn {
            attrs,
            vis,
            sig,
            block,
        } = item;
        let (docs, attrs) = attrs.into_iter().partition(|a| a.path().is_ident("doc"));
        let output = match sig.output {
            ReturnType::Type(_, ty) => ty,
            ReturnType::Default => {
                return Err(not_a_result(
                    kind,
                    sig.paren_token.span.join(),
                    "add a return type",
                ));
            }
        };
        if !has_type_arguments(&output) {
            let problem = format!("`{}` is not a `Result`", pretty(&output));
            return Err(not_a_result(kind, output.span(), &problem));
        }
        let ok = ok_type(kind, &output);
        let params = sig
            .inputs
            .into_iter()
            .enumerate()
            .map(|(index, arg)| Param::parse(kind, index, arg))
            .collect::<syn::Result<Vec<_>>>()?;
        Ok(Function {
            docs,
            attrs,
            vis,
            ident: sig.ident,
            params,
            output,
            ok,
            block,
        })
    }

    /// The parameters the caller gives, in order.
    pub(crate) fn inputs(&self) -> impl Iterator<Item = &Param> {
        self.params
            .iter()
            .filter(|param| matches!(param.role, Role::Input))
    }

    /// The function's name as a string, without `r#`.
    pub(crate) fn plain_name(&self) -> String {
        self.ident.unraw().to_string()
    }
}

fn check_signature(kind: Kind, item: &ItemFn) -> syn::Result<()> {
    let sig = &item.sig;
    let attribute = kind.attribute();
    let refuse = |tokens: &dyn ToTokens, what: &str| {
        Err(syn::Error::new_spanned(
            tokens.to_token_stream(),
            format!("{attribute} function cannot be {what}"),
        ))
    };
    if let Some(token) = &sig.constness {
        return refuse(token, "`const`");
    }
    if let Some(token) = &sig.unsafety {
        return refuse(token, "`unsafe`");
    }
    if let Some(abi) = &sig.abi {
        return refuse(abi, "`extern`");
    }
    if let Some(variadic) = &sig.variadic {
        return refuse(variadic, "variadic");
    }
    if sig.asyncness.is_none() {
        return Err(syn::Error::new(
            sig.fn_token.span,
            format!(
                "{attribute} goes on an `async fn`: write `async fn {}`",
                sig.ident
            ),
        ));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        return Err(syn::Error::new_spanned(
            &sig.generics,
            format!(
                "{attribute} function cannot be generic: its name and its input and output \
                 types are fixed where it is defined"
            ),
        ));
    }
    Ok(())
}

impl Param {
    fn parse(kind: Kind, index: usize, arg: FnArg) -> syn::Result<Param> {
        let arg = match arg {
            FnArg::Typed(arg) => arg,
            FnArg::Receiver(receiver) => {
                let hint = match kind {
                    Kind::Workflow => "keep workflow code free of shared state",
                    Kind::Activity | Kind::Step => {
                        "give it a #[resource] parameter to reach shared state"
                    }
                };
                return Err(syn::Error::new_spanned(
                    receiver,
                    format!("{} function cannot take `self`: {hint}", kind.attribute()),
                ));
            }
        };
        let mut resource = None;
        let mut attrs = Vec::new();
        for attr in arg.attrs {
            if attr.path().is_ident("resource") {
                if !matches!(attr.meta, Meta::Path(_)) {
                    return Err(syn::Error::new_spanned(
                        &attr,
                        "write `#[resource]`, with no arguments",
                    ));
                }
                resource = Some(attr);
            } else {
                attrs.push(attr);
            }
        }
        let role = match resource {
            Some(attr) => Role::Resource(resource_kind(kind, &attr, &arg.ty)?),
            None => context_role(kind, index, &arg.ty)?.unwrap_or(Role::Input),
        };
        if matches!(role, Role::Input) {
            check_input(kind, &arg.ty)?;
        }
        let binding = match &*arg.pat {
            Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => pat.ident.clone(),
            _ => Ident::new(&format!("arg{index}"), Span::mixed_site()),
        };
        Ok(Param {
            attrs,
            pat: arg.pat,
            ty: arg.ty,
            role,
            binding,
        })
    }
}

/// The last path segment's name of a plain path type (`a::b::Name<..>` gives `Name`).
fn type_name(ty: &Type) -> Option<&Ident> {
    match ty {
        Type::Path(path) if path.qself.is_none() => path.path.segments.last().map(|s| &s.ident),
        _ => None,
    }
}

/// `Some(Role::Context)` for the context parameter; an error for a context in the wrong place.
fn context_role(kind: Kind, index: usize, ty: &Type) -> syn::Result<Option<Role>> {
    let (own, other) = match kind {
        Kind::Workflow => ("WorkflowContext", "ActivityContext"),
        Kind::Activity | Kind::Step => ("ActivityContext", "WorkflowContext"),
    };
    let attribute = kind.attribute();
    if let Type::Reference(reference) = ty {
        if type_name(&reference.elem).is_some_and(|name| name == own || name == other) {
            return Err(syn::Error::new_spanned(
                ty,
                format!("take the context by value (`ctx: {own}`): it is a cheap handle"),
            ));
        }
    }
    match type_name(ty) {
        Some(name) if name == own && index == 0 => Ok(Some(Role::Context)),
        Some(name) if name == own => Err(syn::Error::new_spanned(
            ty,
            format!("the `{own}` parameter of a {attribute} function comes first"),
        )),
        Some(name) if name == other => Err(syn::Error::new_spanned(
            ty,
            format!("a {attribute} function gets an `{own}`, not a `{other}`"),
        )),
        _ => Ok(None),
    }
}

fn resource_kind(kind: Kind, attr: &Attribute, ty: &Type) -> syn::Result<Resource> {
    if kind == Kind::Workflow {
        return Err(syn::Error::new_spanned(
            attr,
            "a workflow cannot read resources: workflow code must replay the same way every \
             time, so reach resources from a step",
        ));
    }
    match ty {
        Type::Reference(reference) if reference.mutability.is_none() => {
            Ok(Resource::Borrowed(reference.elem.clone()))
        }
        _ if type_name(ty).is_some_and(|name| name == "Arc") => Ok(Resource::Shared),
        _ => Err(syn::Error::new_spanned(
            ty,
            "a #[resource] parameter is `&T` or `Arc<T>`, where `T` is the type of a value \
             given to `world.provide`",
        )),
    }
}

fn check_input(kind: Kind, ty: &Type) -> syn::Result<()> {
    let why = match kind {
        Kind::Workflow | Kind::Activity => "its input is stored and read back on replay",
        Kind::Step => "the step keeps its arguments to run again on a retry",
    };
    match ty {
        Type::Reference(_) => Err(syn::Error::new_spanned(
            ty,
            format!(
                "{} function takes owned arguments (e.g. `String`, not `&str`): {why}",
                kind.attribute()
            ),
        )),
        Type::ImplTrait(_) => Err(syn::Error::new_spanned(
            ty,
            format!(
                "`impl Trait` makes a {} function generic: name a concrete type",
                kind.attribute()
            ),
        )),
        _ => Ok(()),
    }
}

/// `T` when the output is spelled `Result<T, E>`, else the output trait's `Ok` type.
fn ok_type(kind: Kind, output: &Type) -> TokenStream {
    let spelled = match output {
        Type::Path(path) if path.qself.is_none() => {
            path.path.segments.last().and_then(|last| {
                match (&last.arguments, last.ident == "Result") {
                    (PathArguments::AngleBracketed(args), true) => {
                        args.args.iter().find_map(|arg| match arg {
                            GenericArgument::Type(ty) => Some(ty),
                            _ => None,
                        })
                    }
                    _ => None,
                }
            })
        }
        _ => None,
    };
    match (spelled, kind) {
        (Some(ty), _) => ty.to_token_stream(),
        (None, Kind::Workflow) => {
            quote_spanned!(output.span()=> <#output as ::worlds_engine::__private::WorkflowOutput>::Ok)
        }
        (None, Kind::Activity | Kind::Step) => {
            quote_spanned!(output.span()=> <#output as ::worlds_engine::__private::StepOutput>::Ok)
        }
    }
}

/// True for a path type whose last segment has type arguments: `Result<T, E>`, `io::Result<T>`,
/// an alias such as `StepResult<T>`. Anything else cannot be a `Result` worth the name.
fn has_type_arguments(ty: &Type) -> bool {
    match ty {
        Type::Path(path) => path.path.segments.last().is_some_and(|last| {
            matches!(&last.arguments, PathArguments::AngleBracketed(args)
                if args.args.iter().any(|arg| matches!(arg, GenericArgument::Type(_))))
        }),
        _ => false,
    }
}

/// A type as a person writes it (tokens print with spaces around every punctuation mark).
fn pretty(ty: &Type) -> String {
    let mut text = ty.to_token_stream().to_string();
    for (spaced, tight) in [
        (" :: ", "::"),
        (":: ", "::"),
        (" ,", ","),
        (" ;", ";"),
        ("< ", "<"),
        (" <", "<"),
        (" >", ">"),
        ("( ", "("),
        (" )", ")"),
        ("[ ", "["),
        (" ]", "]"),
        ("& ", "&"),
    ] {
        text = text.replace(spaced, tight);
    }
    text
}

fn not_a_result(kind: Kind, span: Span, problem: &str) -> syn::Error {
    let error = match kind {
        Kind::Workflow => "WorkflowError",
        Kind::Activity | Kind::Step => "StepError",
    };
    syn::Error::new(
        span,
        format!(
            "{} function returns `Result<T, E>`, where `E` converts into `{error}` \
             (e.g. `-> Result<u64, {error}>`): {problem}",
            kind.attribute()
        ),
    )
}

/// The tokens an error about a whole item points at: its keyword and name.
fn item_head(item: &Item) -> TokenStream {
    match item {
        Item::Struct(s) => {
            let (token, ident) = (&s.struct_token, &s.ident);
            quote!(#token #ident)
        }
        Item::Enum(e) => {
            let (token, ident) = (&e.enum_token, &e.ident);
            quote!(#token #ident)
        }
        Item::Const(c) => {
            let (token, ident) = (&c.const_token, &c.ident);
            quote!(#token #ident)
        }
        Item::Static(s) => {
            let (token, ident) = (&s.static_token, &s.ident);
            quote!(#token #ident)
        }
        Item::Mod(m) => {
            let (token, ident) = (&m.mod_token, &m.ident);
            quote!(#token #ident)
        }
        Item::Trait(t) => {
            let (token, ident) = (&t.trait_token, &t.ident);
            quote!(#token #ident)
        }
        Item::Impl(i) => i.impl_token.to_token_stream(),
        other => other.to_token_stream(),
    }
}

fn item_kind(item: &Item) -> &'static str {
    match item {
        Item::Struct(_) => "a struct",
        Item::Enum(_) => "an enum",
        Item::Const(_) => "a const",
        Item::Static(_) => "a static",
        Item::Mod(_) => "a module",
        Item::Trait(_) => "a trait",
        Item::Impl(_) => "an impl block",
        Item::Type(_) => "a type alias",
        Item::Use(_) => "a use declaration",
        _ => "this item",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(kind: Kind, tokens: TokenStream) -> Function {
        Function::parse(kind, tokens).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn parameters_are_sorted_by_role() {
        let function = parse(
            Kind::Step,
            quote! {
                async fn ship(ctx: ActivityContext, #[resource] db: &Db, (a, b): (u8, u8), n: u32)
                    -> Result<Vec<u8>, StepError> { todo!() }
            },
        );
        let roles: Vec<&str> = function
            .params
            .iter()
            .map(|p| match p.role {
                Role::Context => "context",
                Role::Resource(Resource::Borrowed(_)) => "borrowed",
                Role::Resource(Resource::Shared) => "shared",
                Role::Input => "input",
            })
            .collect();
        assert_eq!(roles, ["context", "borrowed", "input", "input"]);
        let bindings: Vec<String> = function.inputs().map(|p| p.binding.to_string()).collect();
        assert_eq!(bindings, ["arg2", "n"]);
        assert_eq!(function.ok.to_string(), "Vec < u8 >");
        assert_eq!(function.plain_name(), "ship");
    }

    #[test]
    fn an_aliased_result_uses_the_output_trait() {
        let function = parse(
            Kind::Workflow,
            quote!(
                async fn r#flow() -> Outcome<u8> {
                    todo!()
                }
            ),
        );
        assert!(function.ok.to_string().contains("WorkflowOutput"));
        assert_eq!(function.plain_name(), "flow");
    }

    #[test]
    fn types_print_as_written() {
        let ty: Type = syn::parse_quote!(std::collections::HashMap<&'static str, (u8, [u8; 2])>);
        assert_eq!(
            pretty(&ty),
            "std::collections::HashMap<&'static str, (u8, [u8; 2])>"
        );
    }
}
