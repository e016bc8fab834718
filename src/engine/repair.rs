//! Checking what a plugin's `assemble` returned before the model sees it:
//! tool results whose `tool_use` is gone are dropped, and pinned messages the
//! plugin left out are put back. Each repair is reported, never silent.

use std::collections::HashSet;

use crate::protocol::{Block, Content, Message};

/// The repaired messages and one warning per repair.
pub fn repair_assembled(reply: Vec<Message>, original: &[Message]) -> (Vec<Message>, Vec<String>) {
    let mut warnings = Vec::new();
    let uses: HashSet<String> = reply
        .iter()
        .flat_map(blocks)
        .filter_map(|b| match b {
            Block::ToolUse(u) => Some(u.id.clone()),
            _ => None,
        })
        .collect();
    let mut out = Vec::with_capacity(reply.len());
    for mut m in reply {
        if let Content::Blocks(bs) = &mut m.content {
            let before = bs.len();
            bs.retain(|b| match b {
                Block::ToolResult(r) if !uses.contains(&r.tool_use_id) => {
                    warnings.push(format!(
                        "assemble reply: dropped the tool result for `{}`: its tool_use is not in the window",
                        r.tool_use_id
                    ));
                    false
                }
                _ => true,
            });
            if bs.is_empty() && before > 0 {
                continue;
            }
        }
        out.push(m);
    }
    // Put each missing pinned message back where it stood: right after the
    // last kept message that came before it in the original history (at the
    // front when none did).
    let mut restored = 0;
    for (i, m) in original.iter().enumerate() {
        if !m.pinned || out.iter().any(|o| same(o, m)) {
            continue;
        }
        let earlier = &original[..i];
        let at = out.iter().rposition(|o| earlier.iter().any(|e| same(o, e))).map_or(0, |p| p + 1);
        out.insert(at, m.clone());
        restored += 1;
    }
    if restored > 0 {
        warnings.push(format!("assemble reply: restored {restored} pinned message(s) the plugin left out"));
    }
    (out, warnings)
}

fn blocks(m: &Message) -> &[Block] {
    match &m.content {
        Content::Blocks(b) => b,
        Content::Text(_) => &[],
    }
}

/// Same message for the purpose of "was it kept": role and content.
fn same(a: &Message, b: &Message) -> bool {
    a.role == b.role && a.content == b.content
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn m(v: serde_json::Value) -> Message {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn orphan_results_go_and_pinned_messages_come_back() {
        let pinned = m(json!({"role":"user","content":"rules","pinned":true}));
        let original = vec![pinned.clone(), m(json!({"role":"user","content":"hi"}))];
        let reply = vec![
            m(
                json!({"role":"user","content":[{"type":"tool_result","tool_use_id":"gone","content":"x","is_error":false}]}),
            ),
            m(json!({"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"n","input":{}}]})),
            m(json!({"role":"user","content":[
                {"type":"tool_result","tool_use_id":"t1","content":"ok","is_error":false},
                {"type":"tool_result","tool_use_id":"gone2","content":"x","is_error":false}]})),
            m(json!({"role":"user","content":"hi"})),
        ];
        let (out, warnings) = repair_assembled(reply, &original);
        assert_eq!(out.len(), 4, "{out:?}");
        assert_eq!(out[0], pinned);
        let Content::Blocks(bs) = &out[2].content else { panic!() };
        assert_eq!(bs.len(), 1);
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert!(warnings[2].contains("restored 1 pinned"));
    }

    #[test]
    fn pinned_messages_go_back_where_they_stood() {
        let text = |t: &str| m(json!({"role":"user","content":t}));
        let mut pin = text("pinned middle");
        pin.pinned = true;
        let original = vec![text("a"), text("b"), pin.clone(), text("c"), text("d")];
        let (out, warnings) = repair_assembled(vec![text("b"), text("d")], &original);
        assert_eq!(out, vec![text("b"), pin, text("d")]);
        assert_eq!(warnings.len(), 1);
    }

    #[test]
    fn a_clean_reply_is_untouched() {
        let original = vec![m(json!({"role":"user","content":"hi"}))];
        let (out, warnings) = repair_assembled(original.clone(), &original);
        assert_eq!((out, warnings.len()), (original, 0));
    }
}
