//! The tool results one reasoning step shows the model, kept to the step's token budget:
//! passages in order (the last that does not fit clipped), then the newest observations
//! that still fit, and a line saying how many were left out — never dropped silently.

/// The tool results that fit `budget` tokens: the passages in order (the last one that
/// does not fit is clipped, later ones left out), then the newest observations that still
/// fit; what is left out is said, never dropped silently.
pub fn within_budget(
    passages: &[String],
    observations: &[String],
    budget: usize,
    count: &dyn Fn(&str) -> usize,
) -> String {
    let mut out = String::new();
    let mut used = 0;
    let mut left_out = 0;
    for block in passages {
        let cost = count(block);
        if used + cost <= budget {
            out.push_str(block);
            used += cost;
            continue;
        }
        let room = budget.saturating_sub(used);
        if room >= 32 && left_out == 0 {
            // About three characters a token: clip to what is left, on a character boundary.
            let clipped: String = block.chars().take(room * 3).collect();
            let clipped: String = clipped
                .chars()
                .take(clipped.chars().count().saturating_sub(8))
                .collect();
            out.push_str(&clipped);
            out.push_str(" […]\n");
            used = budget;
        } else {
            left_out += 1;
        }
    }
    let mut kept = Vec::new();
    for observation in observations.iter().rev() {
        let cost = count(observation) + 1;
        if used + cost > budget {
            left_out += 1;
            continue;
        }
        used += cost;
        kept.push(observation.as_str());
    }
    for observation in kept.iter().rev() {
        out.push_str(observation);
        out.push('\n');
    }
    if left_out > 0 {
        out.push_str(&format!(
            "({left_out} more tool results left out: they do not fit the context window.)\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_results_keep_to_their_budget_and_say_what_was_left_out() {
        let count = |text: &str| text.chars().count().div_ceil(4);
        let passages = vec!["a".repeat(400), "b".repeat(400), "c".repeat(400)];
        let observations = vec!["old result".to_owned(), "new result".to_owned()];
        // Everything fits a large budget, in order.
        let all = within_budget(&passages, &observations, 10_000, &count);
        assert!(
            all.starts_with(&passages[0]) && all.ends_with("old result\nnew result\n"),
            "{all}"
        );
        // 150 tokens: the first passage whole, the second clipped, the rest said to be out.
        let some = within_budget(&passages, &observations, 150, &count);
        assert!(some.starts_with(&passages[0]), "{some}");
        assert!(some.contains("b […]"), "{some}");
        assert!(!some.contains("ccc"), "{some}");
        assert!(some.contains("3 more tool results left out"), "{some}");
        assert!(count(&some) <= 150 + 20, "{}", count(&some));
        // The newest observation goes before older ones when only one fits.
        let newest = within_budget(&[], &observations, 4, &count);
        assert!(
            newest.starts_with("new result\n") && !newest.contains("old"),
            "{newest}"
        );
        // No budget: nothing but the note.
        assert_eq!(
            within_budget(&passages, &[], 0, &count),
            "(3 more tool results left out: they do not fit the context window.)\n"
        );
    }
}
