//! The approval demo: an expense waits for a person to approve it through a webhook, and tells
//! anyone watching how it is going through the run's stream.
//!
//! The workflow writes progress lines to its default stream, creates a webhook, asks a step to
//! tell the approver where to send the decision (the step gets a ticket and derives the URL
//! itself, so the token never enters history), then waits — holding no worker, surviving
//! restarts — for a request like `{"approved": true, "by": "ada"}`.

use serde::{Deserialize, Serialize};
use worlds_engine::hooks::HookTicket;
use worlds_engine::prelude::*;

/// What the workflow is asked to approve.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Expense {
    /// Who spent it.
    pub employee: String,
    /// Amount in cents.
    pub cents: u64,
    /// What for.
    pub reason: String,
}

/// The body the approver sends to the webhook.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Decision {
    /// Yes or no.
    pub approved: bool,
    /// Who decided.
    pub by: String,
}

/// The step that tells the approver where to answer. `announce` receives the webhook URL
/// (printing it, sending an email…).
pub fn notify_approver(
    announce: impl Fn(&str) + Send + Sync + 'static,
) -> Activity<(HookTicket, String), ()> {
    let announce = std::sync::Arc::new(announce);
    activity(
        "notify-approver",
        move |ctx: ActivityContext, (ticket, base): (HookTicket, String)| {
            let announce = announce.clone();
            async move {
                let token = ctx.hook_token(&ticket)?;
                announce(&format!("{}/{token}", base.trim_end_matches('/')));
                Ok::<_, StepError>(())
            }
        },
    )
}

/// The approval workflow. `webhook_base_url` must be the world's, so the step can build the URL.
pub fn approval(
    notify: &Activity<(HookTicket, String), ()>,
    webhook_base_url: String,
) -> Workflow<Expense, String> {
    let notify = notify.clone();
    workflow(
        "expense-approval",
        move |ctx: WorkflowContext, expense: Expense| {
            let notify = notify.clone();
            let base = webhook_base_url.clone();
            async move {
                let progress = ctx.get_writable();
                progress.write(format!(
                    "{} asks for {}.{:02} ({})",
                    expense.employee,
                    expense.cents / 100,
                    expense.cents % 100,
                    expense.reason
                ))?;
                // Only a body that reads as a `Decision` resumes it: anything else gets a 400
                // naming the field, and the webhook keeps waiting for a corrected request.
                let webhook =
                    ctx.create_json_webhook::<Decision>(HookOptions::new().expires_in("168h"));
                ctx.run(&notify, (webhook.ticket(), base)).await?;
                progress.write("waiting for the approver")?;
                let request = webhook.wait().await?;
                let decision: Decision = request.json()?;
                let outcome = if decision.approved {
                    format!("approved by {}", decision.by)
                } else {
                    format!("rejected by {}", decision.by)
                };
                progress.write(outcome.clone())?;
                progress.close();
                Ok::<_, WorkflowError>(outcome)
            }
        },
    )
}
