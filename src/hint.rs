//! "Did you mean" hints: the nearest valid name to a misspelt one.
//!
//! Used wherever a user types a name from a closed set (hook names, manifest
//! keys, runtime tags), so every such error can end with a suggestion.

/// The candidate closest to `typo`: by edit distance when close enough to be
/// a plausible misspelling (at most a third of its length, minimum 1), else
/// one that the typo is a 4+ character prefix of (`hook_timeout`), else one
/// the typo ends or starts with as whole `_`/`-` separated words
/// (`tool_name` → `name`, `text_content` → `text`).
pub fn closest<'a>(typo: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let candidates: Vec<&str> = candidates.into_iter().collect();
    let limit = (typo.chars().count() / 3).max(1);
    let by_distance = candidates
        .iter()
        .map(|c| (edit_distance(typo, c), *c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c);
    let by_prefix = || candidates.iter().copied().find(|c| typo.len() >= 4 && c.starts_with(typo));
    let by_words = || {
        let seps: Vec<usize> = typo.match_indices(['_', '-']).map(|(i, _)| i).collect();
        // The longest whole-word tail or head first (`a_b_c`: `b_c`, `a_b`, `c`, `a`).
        let mut parts: Vec<&str> = seps.iter().flat_map(|&i| [&typo[i + 1..], &typo[..i]]).collect();
        parts.sort_by_key(|p| std::cmp::Reverse(p.len()));
        parts.into_iter().find_map(|part| candidates.iter().copied().find(|c| !part.is_empty() && *c == part))
    };
    by_distance.or_else(by_prefix).or_else(by_words)
}

/// `closest` formatted as a sentence suffix: `; did you mean `x`?` or empty.
pub fn did_you_mean<'a>(typo: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    closest(typo, candidates).map(|c| format!("; did you mean `{c}`?")).unwrap_or_default()
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_near_names_only() {
        let hooks = ["ingest", "after_turn", "assemble"];
        assert_eq!(closest("ingset", hooks), Some("ingest"));
        assert_eq!(closest("after-turn", hooks), Some("after_turn"));
        assert_eq!(closest("zzz", hooks), None);
        assert_eq!(closest("after", hooks), Some("after_turn"));
        assert_eq!(closest("aft", hooks), None);
        assert_eq!(did_you_mean("asemble", hooks), "; did you mean `assemble`?");
        assert_eq!(did_you_mean("qqqqqq", hooks), "");
        let fields = ["agent_id", "name", "args", "text"];
        assert_eq!(closest("tool_name", fields), Some("name"), "a tail word");
        assert_eq!(closest("text_content", fields), Some("text"), "a head word");
        assert_eq!(closest("tool_args_v2", fields), None, "words in the middle are not enough");
        assert_eq!(closest("agent", fields), Some("agent_id"));
    }
}
