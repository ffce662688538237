//! Answer quality on the real default chat model: a representative slice of
//! `warden eval answers` over the sample knowledge base, English and Chinese (every 5th
//! case of tests/data/answers/ops-*.jsonl: 25 each, a fifth of them unanswerable). The
//! full sets and the public-corpus sets are the benchmark.

use serde_json::Value;

use crate::util::{stderr, stdout, warden_on_default_model};

fn eval_answers(questions: &str) -> Value {
    let output = warden_on_default_model()
        .args([
            "eval", "answers", "kb", questions, "--stride", "5", "--json",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("cannot run the warden binary");
    let text = stdout(&output);
    assert!(output.status.success(), "eval failed: {}", stderr(&output));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("eval printed no JSON ({e}): {text}\n{}", stderr(&output)))
}

fn share(report: &Value, key: &str) -> f64 {
    report[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing: {report}"))
}

/// The gates below sit under the targets for whole sets (0.75 / 0.60 answer accuracy, 0.85
/// citation, 0.80 abstention, false abstention at most 0.10) by the margin a 25-case slice
/// needs (one case of 19 is 0.05; one of 6 unanswerable is 0.17); what is shown as the
/// model's answer is always supported.
fn check(report: &Value, answer_accuracy: f64) {
    assert!(report["cases"].as_u64().unwrap_or(0) >= 20, "{report}");
    assert!(
        share(report, "answer_accuracy") >= answer_accuracy,
        "{report}"
    );
    assert!(share(report, "citation_accuracy") >= 0.7, "{report}");
    assert!(share(report, "abstention_accuracy") >= 0.66, "{report}");
    assert!(share(report, "false_abstention_rate") <= 0.2, "{report}");
    assert_eq!(share(report, "unsupported_rate"), 0.0, "{report}");
    assert!(
        report["latency"]["first_token_p50_ms"].as_f64().is_some(),
        "{report}"
    );
}

#[test]
fn english_runbook_questions_are_answered_from_the_sample_kb() {
    check(&eval_answers("tests/data/answers/ops-en.jsonl"), 0.55);
}

#[test]
fn chinese_runbook_questions_are_answered_from_the_sample_kb() {
    check(&eval_answers("tests/data/answers/ops-zh.jsonl"), 0.5);
}
