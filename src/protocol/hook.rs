//! Hook names: the lifecycle points an embedder calls and a manifest names.

use std::fmt;
use std::str::FromStr;

/// One lifecycle point. The wire spelling (`as_str`) is also the manifest key
/// under `[hooks]` and the `type` of the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HookName {
    Bootstrap,
    Ingest,
    Assemble,
    Compact,
    AfterTurn,
    TransformToolResult,
    PrepareSubagent,
    MergeSubagent,
    /// LibreFang's generic event hook; its request is passed through as given.
    OnEvent,
}

impl HookName {
    /// Every hook, in lifecycle order.
    pub const ALL: [HookName; 9] = [
        HookName::Bootstrap,
        HookName::Ingest,
        HookName::Assemble,
        HookName::Compact,
        HookName::AfterTurn,
        HookName::TransformToolResult,
        HookName::PrepareSubagent,
        HookName::MergeSubagent,
        HookName::OnEvent,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HookName::Bootstrap => "bootstrap",
            HookName::Ingest => "ingest",
            HookName::Assemble => "assemble",
            HookName::Compact => "compact",
            HookName::AfterTurn => "after_turn",
            HookName::TransformToolResult => "transform_tool_result",
            HookName::PrepareSubagent => "prepare_subagent",
            HookName::MergeSubagent => "merge_subagent",
            HookName::OnEvent => "on_event",
        }
    }

    /// The timeout multiplier of spec section 5.5: bootstrap gets twice the time.
    pub fn timeout_factor(self) -> u32 {
        if self == HookName::Bootstrap { 2 } else { 1 }
    }
}

impl fmt::Display for HookName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A hook name that is not one of [`HookName::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown hook `{name}` (valid hooks: {})", valid_list())]
pub struct UnknownHook {
    pub name: String,
}

fn valid_list() -> String {
    HookName::ALL.iter().map(|h| h.as_str()).collect::<Vec<_>>().join(", ")
}

impl FromStr for HookName {
    type Err = UnknownHook;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HookName::ALL.into_iter().find(|h| h.as_str() == s).ok_or_else(|| UnknownHook { name: s.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for hook in HookName::ALL {
            assert_eq!(hook.as_str().parse::<HookName>(), Ok(hook));
        }
    }

    #[test]
    fn unknown_hook_lists_valid_ones() {
        let err = "ingestt".parse::<HookName>().unwrap_err();
        assert!(err.to_string().starts_with("unknown hook `ingestt` (valid hooks: bootstrap, ingest,"));
    }
}
