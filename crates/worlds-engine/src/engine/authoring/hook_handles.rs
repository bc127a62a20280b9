//! What a workflow holds while it waits on a hook: [`Hook`] and [`Webhook`], each a token and
//! a command future for the payload, and the context calls that create them. The rest of hooks
//! (options, tokens, definitions) is in [`crate::hooks`].

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::context::{CommandFuture, WorkflowContext};
use super::driver::{CommandDesc, Resolution};
use super::errors::ContextError;
use crate::hooks::{
    validator_of, HookDefinition, HookOptions, HookTicket, NewHook, WebhookRequest,
};

/// A hook created by a workflow: a token, and a payload to wait for.
///
/// Created with [`WorkflowContext::create_hook`](crate::WorkflowContext::create_hook) or a
/// [`crate::hooks::HookDefinition`].
#[derive(Debug)]
pub struct Hook<T> {
    pub(crate) id: String,
    pub(crate) token: String,
    pub(crate) run_id: String,
    pub(crate) position: u32,
    pub(crate) chosen: bool,
    pub(crate) wait: CommandFuture<T>,
}

impl<T: DeserializeOwned> Hook<T> {
    /// The hook id (`hook_…`), stable across replays.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The token that resumes the hook. Hand it to whoever should send the payload.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// A ticket for the hook that a step can turn back into its token
    /// ([`ActivityContext::hook_token`](crate::ActivityContext::hook_token)). Handing steps the
    /// ticket instead of the token keeps random tokens out of history.
    pub fn ticket(&self) -> HookTicket {
        HookTicket {
            run_id: self.run_id.clone(),
            position: self.position,
            hook_id: self.id.clone(),
            token: self.chosen.then(|| self.token.clone()),
        }
    }

    /// Waits for the payload. Fails if the hook expired first, if its token was taken by
    /// another live hook, or if the payload does not deserialize into `T`.
    pub fn wait(self) -> CommandFuture<T> {
        self.wait
    }
}

/// A webhook created by a workflow: a URL to call, and the request to wait for.
#[derive(Debug)]
pub struct Webhook {
    pub(crate) hook: Hook<WebhookRequest>,
    pub(crate) url: String,
}

impl Webhook {
    /// The URL that resumes the webhook: `webhook_base_url` followed by `/` and the token.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The token at the end of the URL.
    pub fn token(&self) -> &str {
        self.hook.token()
    }

    /// A ticket a step can turn back into the token (see [`Hook::ticket`]); the URL is
    /// `webhook_base_url/` followed by the token.
    pub fn ticket(&self) -> HookTicket {
        self.hook.ticket()
    }

    /// The hook id (`hook_…`).
    pub fn id(&self) -> &str {
        self.hook.id()
    }

    /// Waits for the request.
    pub fn wait(self) -> CommandFuture<WebhookRequest> {
        self.hook.wait()
    }
}

impl<T: Serialize + DeserializeOwned + 'static> HookDefinition<T> {
    /// Creates a hook of this type in a workflow.
    pub fn create(&self, ctx: &WorkflowContext, options: HookOptions) -> Hook<T> {
        ctx.create_hook_typed(
            options,
            Some(self.name().to_owned()),
            false,
            self.payload_check(),
        )
    }
}

/// Hooks and webhooks (see [`crate::hooks`]).
impl WorkflowContext {
    /// Creates a hook with a random token and no expiry; see [`crate::hooks`].
    pub fn create_hook<T: DeserializeOwned>(&self) -> Hook<T> {
        self.create_hook_with(HookOptions::new())
    }

    /// Creates a hook with options (a token of your own, an expiry); see [`crate::hooks`].
    pub fn create_hook_with<T: DeserializeOwned>(&self, options: HookOptions) -> Hook<T> {
        let kind = std::any::type_name::<T>().to_owned();
        self.create_hook_typed(options, Some(kind), false, validator_of::<T>)
    }

    /// Creates a webhook: a URL (`webhook_base_url/TOKEN`) that resumes the run with the HTTP
    /// request sent to it.
    pub fn create_webhook(&self) -> Webhook {
        self.create_webhook_with(HookOptions::new())
    }

    /// [`create_webhook`](Self::create_webhook) with options.
    pub fn create_webhook_with(&self, options: HookOptions) -> Webhook {
        let hook = self.create_hook_typed(options, None, true, validator_of::<WebhookRequest>);
        let base = self.core.hooks().webhook_base_url.trim_end_matches('/');
        let url = format!("{base}/{}", hook.token);
        Webhook { hook, url }
    }

    /// A webhook that accepts only requests whose body is JSON of type `T`: any other body is
    /// refused with 400 naming the field at fault (`field `approved`: invalid type…`), and the
    /// webhook keeps waiting for a corrected request. `request.json::<T>()` on what
    /// [`Webhook::wait`] returns then always succeeds.
    ///
    /// ```
    /// use worlds_engine::prelude::*;
    ///
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Decision { approved: bool, by: String }
    ///
    /// let flow = workflow("approve", |ctx: WorkflowContext, _: ()| async move {
    ///     let webhook = ctx.create_json_webhook::<Decision>(HookOptions::new());
    ///     // Hand out `webhook.url()`; `{"approved":"yes"}` gets a 400 and changes nothing.
    ///     let decision: Decision = webhook.wait().await?.json()?;
    ///     Ok::<_, WorkflowError>(decision.approved)
    /// });
    /// # let _ = flow;
    /// ```
    pub fn create_json_webhook<T: DeserializeOwned>(&self, options: HookOptions) -> Webhook {
        let kind = format!("json body: {}", std::any::type_name::<T>());
        let hook = self.create_hook_typed(
            options,
            Some(kind),
            true,
            crate::hooks::json_body_validator_of::<T>,
        );
        let base = self.core.hooks().webhook_base_url.trim_end_matches('/');
        let url = format!("{base}/{}", hook.token);
        Webhook { hook, url }
    }

    pub(crate) fn create_hook_typed<T>(
        &self,
        options: HookOptions,
        hook_type: Option<String>,
        webhook: bool,
        validator: fn() -> crate::hooks::HookValidator,
    ) -> Hook<T> {
        if let Some(kind) = &hook_type {
            // So that `resume_hook` can refuse a payload of the wrong shape with a 400.
            self.core.hooks().add_validator(kind, validator);
        }
        let methods = match (&options.methods, webhook) {
            (None, _) => Ok(Vec::new()),
            (Some(_), false) => Err(
                "HookOptions::methods applies to webhooks only; use ctx.create_webhook_with"
                    .to_owned(),
            ),
            (Some(methods), true) => crate::hooks::check_methods(methods).map(|methods| {
                // The default, recorded as nothing, keeps the event as it was.
                if methods == [crate::model::DEFAULT_WEBHOOK_METHOD] {
                    Vec::new()
                } else {
                    methods
                }
            }),
        };
        let signature = match (&options.signature, webhook) {
            (Some(_), false) => Err(
                "HookOptions::signature applies to webhooks only; use ctx.create_webhook_with"
                    .to_owned(),
            ),
            (Some(name), true) if name.trim().is_empty() => {
                Err("HookOptions::signature needs the name of a configured signature".to_owned())
            }
            (signature, _) => Ok(signature.clone()),
        };
        let invalid = match (&options.expires_in, &options.token, &methods, &signature) {
            (Some(Err(message)), _, _, _) => Some(message.clone()),
            (_, _, Err(message), _) | (_, _, _, Err(message)) => Some(message.clone()),
            (_, Some(token), _, _) => crate::hooks::check_token(token).err(),
            _ => None,
        };
        let signature = signature.unwrap_or_default();
        let methods = methods.unwrap_or_default();
        if let Some(message) = invalid {
            let position = self.core.issue_unrecorded(CommandDesc::Hook);
            let error = ContextError::InvalidArgument {
                call: "ctx.create_hook",
                message,
            };
            self.core.resolve_now(position, Resolution::Error(error));
            return Hook {
                id: String::new(),
                token: String::new(),
                run_id: self.core.info().run_id.clone(),
                position,
                chosen: false,
                wait: CommandFuture::new(self.core.clone(), position),
            };
        }
        let expires_in = options.expires_in.and_then(Result::ok);
        let chosen = options.token;
        let core = &self.core;
        let token_at = |position: u32| {
            chosen
                .clone()
                .unwrap_or_else(|| core.hooks().key.token(&core.info().run_id, position))
        };
        let (position, id) = core.issue_hook(
            Box::new(|| core.ids().hook_id()),
            Box::new(|position, id| NewHook {
                position,
                hook_id: id.to_owned(),
                token_digest: crate::hooks::token_digest(&token_at(position)),
                expires_at: expires_in.map(|d| {
                    core.clock()
                        .now_ms()
                        .saturating_add(crate::clock::duration_ms(d))
                }),
                webhook,
                methods: methods.clone(),
                hook_type,
                signature: signature.clone(),
                chosen: chosen.is_some(),
                metadata: None,
            }),
        );
        Hook {
            id,
            token: token_at(position),
            run_id: core.info().run_id.clone(),
            position,
            chosen: chosen.is_some(),
            wait: CommandFuture::new(self.core.clone(), position),
        }
    }
}
