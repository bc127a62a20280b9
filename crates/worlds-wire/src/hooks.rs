//! Resuming a hook by its token.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use worlds_engine::hooks::HookResumed;

/// `POST /v1/hooks/resume`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Resume {
    /// The hook's token.
    pub token: String,
    /// What the waiting workflow receives. A payload that does not have the hook's type is
    /// refused (400) and the hook keeps waiting.
    #[serde(default)]
    pub payload: Value,
}

/// Where a resumed hook belongs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Resumed {
    /// The run the hook belongs to.
    pub run_id: String,
    /// The hook's id (`hook_…`).
    pub hook_id: String,
}

impl From<HookResumed> for Resumed {
    fn from(resumed: HookResumed) -> Self {
        Resumed {
            run_id: resumed.run_id,
            hook_id: resumed.hook_id,
        }
    }
}

impl From<Resumed> for HookResumed {
    fn from(resumed: Resumed) -> Self {
        HookResumed {
            run_id: resumed.run_id,
            hook_id: resumed.hook_id,
        }
    }
}
