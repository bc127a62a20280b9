//! The generated code. Everything it names is an absolute path (`::worlds_engine::…`, `::std::…`),
//! and its own local names use mixed-site hygiene, so it cannot clash with the user's names.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::Ident;

use crate::options::Options;
use crate::signature::{Function, Param, Resource, Role};

/// A local variable of the generated code, invisible to the user's code.
fn local(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}

/// An item of the generated code. Items resolve at the call site even with mixed-site spans, and
/// the user's body is nested inside the generated blocks, so these names must not be ones the
/// body could mean.
fn item(name: &str) -> Ident {
    Ident::new(name, Span::call_site())
}

/// The definition's name: the one given, else the function's path.
fn name(options: &Options, function: &Function) -> TokenStream {
    match &options.name {
        Some(name) => quote!(#name),
        None => {
            let suffix = format!("::{}", function.plain_name());
            quote!(::core::concat!(::core::module_path!(), #suffix))
        }
    }
}

/// The user's function, renamed, with `#[resource]` taken off its parameters.
fn body(function: &Function, ident: &Ident) -> TokenStream {
    let attrs = &function.attrs;
    let output = &function.output;
    let block = &function.block;
    let params = function.params.iter().map(|param| {
        let (attrs, pat, ty) = (&param.attrs, &param.pat, &param.ty);
        quote!(#(#attrs)* #pat: #ty)
    });
    quote! {
        #(#attrs)*
        async fn #ident(#(#params),*) -> #output #block
    }
}

/// Reads the resource parameters from the step's context (`ctx`), failing the attempt if one
/// was not provided; returns the statements and, per parameter, the argument to pass.
fn arguments(function: &Function, ctx: &Ident) -> (TokenStream, Vec<TokenStream>) {
    let mut reads = TokenStream::new();
    let args = function
        .params
        .iter()
        .enumerate()
        .map(|(index, param)| match &param.role {
            Role::Context => quote!(#ctx),
            Role::Input => {
                let binding = &param.binding;
                quote!(#binding)
            }
            Role::Resource(resource) => {
                let value = format_ident!("resource{index}", span = Span::mixed_site());
                let (ty, arg) = match resource {
                    Resource::Shared => {
                        let ty = &param.ty;
                        (quote!(#ty), quote!(#value))
                    }
                    Resource::Borrowed(inner) => {
                        (quote!(::std::sync::Arc<#inner>), quote!(&*#value))
                    }
                };
                reads.extend(quote_spanned! {param.ty.span()=>
                    let #value: #ty = match ::worlds_engine::__private::resource(&#ctx) {
                        ::core::result::Result::Ok(value) => value,
                        ::core::result::Result::Err(error) => {
                            return ::core::result::Result::Err(error);
                        }
                    };
                });
                arg
            }
        })
        .collect();
    (reads, args)
}

/// The input type (`()`, the one parameter's type, or a tuple) and the statement that takes the
/// value `input` apart into the parameters' bindings.
fn input(function: &Function, input: &Ident) -> (TokenStream, TokenStream) {
    let inputs: Vec<&Param> = function.inputs().collect();
    match inputs.as_slice() {
        [] => (quote!(()), quote!(let () = #input;)),
        [one] => {
            let (ty, binding) = (&one.ty, &one.binding);
            (quote!(#ty), quote!(let #binding = #input;))
        }
        many => {
            let tys = many.iter().map(|param| &param.ty);
            let bindings = many.iter().map(|param| &param.binding);
            (quote!((#(#tys),*)), quote!(let (#(#bindings),*) = #input;))
        }
    }
}

/// The unit struct standing for a definition, with `Deref` to it and a conversion into
/// `Definition` for `world.register(&name)`. (Only from a reference: with a by-value conversion
/// too, clippy would call the `&` in `world.register(&name)` needless.)
fn definition_struct(
    function: &Function,
    target: TokenStream,
    make: TokenStream,
    usage: &str,
) -> TokenStream {
    let (docs, vis, ident) = (&function.docs, &function.vis, &function.ident);
    let separator = if docs.is_empty() {
        quote!()
    } else {
        quote!(#[doc = ""])
    };
    let definition = item("__WORLDS_DEFINITION");
    quote! {
        #(#docs)*
        #separator
        #[doc = #usage]
        #[allow(non_camel_case_types)]
        #[derive(Debug, Clone, Copy)]
        #vis struct #ident;

        impl ::core::ops::Deref for #ident {
            type Target = #target;

            fn deref(&self) -> &Self::Target {
                static #definition: ::std::sync::OnceLock<#target> = ::std::sync::OnceLock::new();
                #definition.get_or_init(|| #make)
            }
        }

        impl ::core::convert::From<&#ident> for ::worlds_engine::Definition {
            fn from(definition: &#ident) -> Self {
                ::core::convert::From::from(&**definition)
            }
        }
    }
}

/// The conversion of a step's result, spanned at the declared return type so a function that
/// does not return a `Result` is reported there.
fn step_finish(function: &Function) -> TokenStream {
    quote_spanned!(function.output.span()=> ::worlds_engine::__private::StepOutput::into_step)
}

pub(crate) fn workflow(options: &Options, function: &Function) -> TokenStream {
    let (ctx, value, run) = (local("ctx"), local("input"), item("__worlds_body"));
    let (input_type, unpack) = input(function, &value);
    let (_, args) = arguments(function, &ctx);
    let ok = &function.ok;
    let target = quote!(::worlds_engine::Workflow<#input_type, #ok>);
    let body = body(function, &run);
    let name = name(options, function);
    let workflow_options = options.workflow_options();
    let finish = quote_spanned!(function.output.span()=>
        ::worlds_engine::__private::WorkflowOutput::into_workflow
    );
    let make = quote! {{
        #body
        ::worlds_engine::workflow(
            #name,
            |#ctx: ::worlds_engine::WorkflowContext, #value: #input_type| async move {
                #unpack
                #finish(#run(#(#args),*).await)
            },
        )
        .with_options(#workflow_options)
    }};
    let usage = format!(
        "A workflow definition made by `#[workflow]` from `async fn {ident}`: register it with \
         `world.register(&{ident})`, start a run with `world.execute(&{ident}, input, options)`, \
         and use it as a `Workflow` through `Deref`.",
        ident = function.plain_name()
    );
    definition_struct(function, target, make, &usage)
}

pub(crate) fn activity(options: &Options, function: &Function) -> TokenStream {
    let (ctx, value, run) = (local("ctx"), local("input"), item("__worlds_body"));
    let (input_type, unpack) = input(function, &value);
    let (reads, args) = arguments(function, &ctx);
    let ok = &function.ok;
    let target = quote!(::worlds_engine::Activity<#input_type, #ok>);
    let body = body(function, &run);
    let name = name(options, function);
    let activity_options = options.activity_options();
    let finish = step_finish(function);
    let make = quote! {{
        #body
        ::worlds_engine::activity(
            #name,
            |#ctx: ::worlds_engine::ActivityContext, #value: #input_type| async move {
                #unpack
                #reads
                #finish(#run(#(#args),*).await)
            },
        )
        .with_options(#activity_options)
    }};
    let usage = format!(
        "An activity definition made by `#[activity]` from `async fn {ident}`: register it with \
         `world.register(&{ident})`, run it from a workflow with `ctx.run(&{ident}, input)`, \
         and use it as an `Activity` through `Deref`.",
        ident = function.plain_name()
    );
    definition_struct(function, target, make, &usage)
}

pub(crate) fn step(options: &Options, function: &Function) -> TokenStream {
    let (ctx, run) = (local("ctx"), item("__worlds_body"));
    let (reads, args) = arguments(function, &ctx);
    let (docs, vis, ident, ok) = (&function.docs, &function.vis, &function.ident, &function.ok);
    let params = function.inputs().map(|param| {
        let (binding, ty) = (&param.binding, &param.ty);
        quote!(#binding: #ty)
    });
    // Each attempt gets its own copy of the arguments; the check is spanned at the parameter's
    // type so a missing `Clone` is reported there.
    let copies = function.inputs().map(|param| {
        let binding = &param.binding;
        quote_spanned! {param.ty.span()=>
            let #binding = ::worlds_engine::__private::StepArgument::clone_argument(&#binding);
        }
    });
    let body = body(function, &run);
    let name = name(options, function);
    let step_options = options.activity_options();
    let finish = step_finish(function);
    let separator = if docs.is_empty() {
        quote!()
    } else {
        quote!(#[doc = ""])
    };
    let usage = format!(
        "A step made by `#[step]`: called in workflow code, `{ident}(..).await` runs the \
         function's body as a durable named step and returns its recorded result. Called \
         anywhere else it fails with `ContextError::OutsideWorkflow`.",
        ident = function.plain_name()
    );
    let start = quote_spanned!(function.output.span()=> ::worlds_engine::__private::step);
    quote! {
        #(#docs)*
        #separator
        #[doc = #usage]
        #vis fn #ident(#(#params),*) -> ::worlds_engine::current::Current<#ok> {
            #body
            #start(
                #name,
                #step_options,
                move |#ctx: ::worlds_engine::ActivityContext| {
                    #(#copies)*
                    async move {
                        #reads
                        #finish(#run(#(#args),*).await)
                    }
                },
            )
        }
    }
}
