//! Which agents have `after_turn` work still running, so an `ingest` can wait
//! (bounded) for what the same agent's previous turn taught the plugins.
//!
//! Owns counting and waiting only; it never runs engine work. A turn is
//! counted from the moment its request line is read (before any later line is
//! handled), and uncounted when its [`TurnGuard`] drops, on every path.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// Counts of unsettled `after_turn` calls per agent.
#[derive(Default)]
pub struct Turns {
    counts: Mutex<HashMap<String, usize>>,
    changed: Notify,
}

/// One counted `after_turn`; dropping it uncounts it.
pub struct TurnGuard {
    turns: Arc<Turns>,
    agent: String,
}

impl Turns {
    /// Counts an `after_turn` of `agent` until the guard drops.
    pub fn begin(self: &Arc<Self>, agent: &str) -> TurnGuard {
        *self.lock().entry(agent.to_owned()).or_default() += 1;
        TurnGuard { turns: self.clone(), agent: agent.to_owned() }
    }

    fn pending(&self, agent: &str) -> usize {
        self.lock().get(agent).copied().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until `agent` has no counted `after_turn`, or `bound` passes.
    /// Returns false when the bound ended the wait.
    pub async fn settled(&self, agent: &str, bound: Duration) -> bool {
        let wait = async {
            loop {
                let changed = self.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if self.pending(agent) == 0 {
                    return;
                }
                changed.await;
            }
        };
        tokio::time::timeout(bound, wait).await.is_ok()
    }
}

impl Drop for TurnGuard {
    fn drop(&mut self) {
        {
            let mut counts = self.turns.lock();
            if let Some(n) = counts.get_mut(&self.agent) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(&self.agent);
                }
            }
        }
        self.turns.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ingest_waits_for_its_own_agent_only() {
        let turns = Arc::new(Turns::default());
        let a = turns.begin("a");
        assert!(turns.settled("b", Duration::from_secs(60)).await, "another agent's turn does not hold b");
        assert!(!turns.settled("a", Duration::from_millis(1)).await, "a's turn is still counted");
        let waiter = {
            let turns = turns.clone();
            tokio::spawn(async move { turns.settled("a", Duration::from_secs(60)).await })
        };
        tokio::task::yield_now().await;
        drop(a);
        assert!(waiter.await.unwrap());
        assert_eq!(turns.pending("a"), 0);
    }

    #[tokio::test]
    async fn two_turns_of_one_agent_both_count() {
        let turns = Arc::new(Turns::default());
        let (x, y) = (turns.begin("a"), turns.begin("a"));
        drop(x);
        assert_eq!(turns.pending("a"), 1);
        drop(y);
        assert!(turns.settled("a", Duration::from_secs(60)).await);
    }
}
