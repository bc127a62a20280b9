//! What a workflow holds while it waits on a hook: [`Hook`] and [`Webhook`], each a token and
//! a command future for the payload. The rest of hooks (options, tokens, definitions) is in
//! [`crate::hooks`].

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::context::{CommandFuture, WorkflowContext};
use crate::hooks::{HookDefinition, HookOptions, HookTicket, WebhookRequest};

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
