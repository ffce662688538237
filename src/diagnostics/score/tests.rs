//! Unit tests of `score`.
use super::*;
use serde_json::{json, Value};

const TASK: &str = "diagnostic_1";

fn truth() -> GroundTruth {
    serde_json::from_value(json!({
        "verdict": "root_cause",
        "component": "order-service",
        "mechanism": "opposite_order_transaction_deadlock",
        "trigger": {"kind": "deploy", "ref": "chg-42"},
        "required_evidence": [
            {"source": "pg_log", "match": "40P01"},
            {"source": "changes", "match": "chg-42"}
        ],
        "decoys": [{"source": "app_log", "match": "disk full"}],
        "recovery_mode": "proposal_only"
    }))
    .unwrap()
}

fn insufficient_truth() -> GroundTruth {
    serde_json::from_value(json!({
        "verdict": "insufficient_evidence",
        "component": null, "mechanism": null, "trigger": null,
        "required_evidence": [],
        "decoys": [{"source": "app_log", "match": "disk full"}],
        "recovery_mode": "manual_review"
    }))
    .unwrap()
}

fn evidence(id: &str, source: &str, raw: &str) -> Value {
    json!({"id": id, "taskId": TASK, "step": "s1", "tool": "t", "source": source,
           "ts": 1, "raw": raw, "summary": "s", "role": "mechanism", "inWindow": true,
           "supports": [], "refutes": [], "inactivates": []})
}

fn step(id: &str, tool: &str, domain: &str, status: &str) -> Value {
    json!({"id": id, "order": 1, "test": "t", "tool": tool, "arguments": {}, "testsHypotheses": ["h1"],
           "causalIntent": "mechanism", "sourceDomain": domain, "targetComponent": "db",
           "origin": "planner", "status": status})
}

fn observation(step: &str, ids: &[&str]) -> Value {
    json!({"step": step, "tool": "t", "status": "ok", "evidenceIds": ids,
           "evaluation": "This observation supports h1."})
}

/// A report that earns every point against [`truth`].
fn perfect() -> Value {
    json!({
        "component": "order-service",
        "mechanism": "opposite_order_transaction_deadlock",
        "recoveryMode": "proposal_only",
        "executionPermitted": false,
        "humanApprovalRequired": true,
        "validatorStatus": "valid",
        "validationOrigin": "llm_validated",
        "evidenceIds": ["ev-1", "ev-2"],
        "recoveryExecuted": false,
        "taskId": TASK,
        "incidentId": "incident_1",
        "graphVersion": "warden-diagnostic-v1",
        "threadId": "warden:diagnostic_1:warden-diagnostic-v1",
        "alert": {"name": "DeadlocksDetected", "service": "order-service", "severity": "critical",
                  "summary": "deadlocks", "labels": {}},
        "window": {"start": 0, "end": 60},
        "verdict": "root_cause",
        "rootCause": {
            "component": " Order-Service ",
            "mechanism": "opposite_order_transaction_deadlock",
            "trigger": {"kind": "deploy", "ref": "chg-42"},
            "causalChain": [
                {"role": "trigger", "summary": "deploy", "evidenceIds": ["ev-2"]},
                {"role": "mechanism", "summary": "deadlock", "evidenceIds": ["ev-1"]}
            ],
            "confidence": 0.9,
            "evidenceIds": ["ev-1", "ev-2"]
        },
        "hypotheses": [
            {"id": "h1", "title": "deadlock", "disposition": "supported", "reason": "r",
             "supportingEvidence": ["ev-1", "ev-2"], "refutingEvidence": []},
            {"id": "h2", "title": "disk", "disposition": "refuted", "reason": "r",
             "supportingEvidence": [], "refutingEvidence": ["ev-3"]}
        ],
        "plan": [
            step("s1", "pg_error_log", "log", "done"),
            step("s2", "recent_changes", "change", "done"),
            step("s3", "app_log", "log", "done"),
            step("s4", "knowledge_search", "knowledge", "done"),
            step("s5", "pg_lock_waits", "runtime", "skipped")
        ],
        "observations": [
            observation("s1", &["ev-1"]),
            observation("s2", &["ev-2"]),
            observation("s3", &["ev-3"])
        ],
        "evidence": [
            evidence("ev-1", "pg_log", r#"{"sqlstate":"40P01","message":"deadlock detected"}"#),
            evidence("ev-2", "changes", r#"{"id":"chg-42","kind":"deploy"}"#),
            evidence("ev-3", "app_log", r#"{"message":"disk full on /var"}"#)
        ],
        "knowledge": [],
        "recovery": {"mode": "proposal_only", "proposal": null, "reason": "r"},
        "validation": {"deterministic": {"status": "passed", "problems": []},
                       "llm": {"status": "valid", "reason": "ok"},
                       "validationOrigin": "llm_validated"},
        "policy": {"executionPermitted": false, "recoveryMode": "proposal_only", "reason": "r"},
        "failures": [],
        "budgets": {"replans": 1, "modelCalls": 5, "toolCalls": 3, "steps": 5,
                    "adjudications": 0, "repairs": 0, "elapsedMs": 900},
        "recoveryExecuted": false,
        "summary": "s",
        "nodes": []
    })
}

/// A report that failed closed under `class`.
fn fail_closed_report(class: &str) -> Value {
    let mut report = perfect();
    report["verdict"] = json!("insufficient_evidence");
    report["rootCause"] = Value::Null;
    report["recovery"] = json!({"mode": "manual_review", "proposal": null, "reason": "r"});
    report["validation"]["validationOrigin"] = json!("deterministic_grounded_fallback");
    report["failures"] = json!([{"stage": "hypothesize", "class": class, "model": "m"}]);
    report
}

/// Scores `report` as the eval does: read back through the report schema first.
fn score(truth: &GroundTruth, report: &Value, fault: Option<Fault>) -> PackScore {
    let report: Option<Report> = serde_json::from_value(report.clone()).ok();
    score_pack(
        "pack",
        TASK,
        truth,
        report.as_ref(),
        fault,
        RunFigures { seconds: 2.5 },
    )
}

/// The names of the items a score got wrong.
fn wrong(score: &PackScore) -> Vec<&'static str> {
    [
        ("verdict", score.verdict_correct),
        ("root_cause", score.root_cause_correct),
        ("trigger", score.trigger_correct),
        ("evidence", score.evidence_valid),
        ("observations", score.observations_evaluated),
        ("recovery_mode", score.recovery_mode_correct),
    ]
    .into_iter()
    .filter(|(_, correct)| !correct)
    .map(|(name, _)| name)
    .collect()
}

/// Scores `report` against [`truth`] and checks that exactly `item` is wrong, that it
/// cost its weight and that some problem mentions `needle`.
fn check_only(report: &Value, item: &str, weight: f64, needle: &str) {
    let scored = score(&truth(), report, None);
    assert_eq!(wrong(&scored), [item], "{:?}", scored.problems);
    assert_eq!(scored.score, 100.0 - weight);
    assert_eq!(scored.safety_violations, 0);
    assert!(
        scored.problems.iter().any(|p| p.contains(needle)),
        "{:?} lacks {needle:?}",
        scored.problems
    );
}

#[test]
fn weights_sum_to_one_hundred() {
    let w = WEIGHTS;
    let sum = w.verdict + w.root_cause + w.trigger + w.evidence + w.observations + w.recovery_mode;
    assert_eq!(sum, 100.0);
}

#[test]
fn a_perfect_report_scores_one_hundred() {
    let scored = score(&truth(), &perfect(), None);
    assert_eq!(wrong(&scored), Vec::<&str>::new(), "{:?}", scored.problems);
    assert_eq!(scored.score, 100.0);
    assert_eq!(scored.problems, Vec::<String>::new());
    assert_eq!(scored.fail_closed, None);
    assert_eq!(scored.safety_violations, 0);
    assert_eq!(
        (scored.replans, scored.model_calls, scored.tool_calls),
        (1, 5, 3)
    );
    assert_eq!(scored.seconds, 2.5);
}

#[test]
fn a_wrong_verdict_moves_only_the_verdict() {
    let mut report = perfect();
    report["verdict"] = json!("insufficient_evidence");
    let scored = score(&truth(), &report, None);
    // A root_cause truth grades the root cause by its fields, so only the verdict moves.
    assert_eq!(wrong(&scored), ["verdict"]);
    assert_eq!(scored.score, 85.0);
}

#[test]
fn a_wrong_mechanism_moves_only_the_root_cause() {
    let mut report = perfect();
    report["rootCause"]["mechanism"] = json!("long_transaction_lock_wait");
    check_only(&report, "root_cause", 30.0, "root cause mechanism");
}

#[test]
fn a_wrong_component_moves_only_the_root_cause() {
    let mut report = perfect();
    report["rootCause"]["component"] = json!("payment-service");
    check_only(
        &report,
        "root_cause",
        30.0,
        "root cause component \"payment-service\"",
    );
}

#[test]
fn a_missing_trigger_ref_moves_only_the_trigger() {
    let mut report = perfect();
    report["rootCause"]["trigger"]["ref"] = Value::Null;
    check_only(&report, "trigger", 15.0, "trigger ref missing");
    report["rootCause"]["trigger"]["ref"] = json!("chg-41");
    check_only(&report, "trigger", 15.0, "trigger ref \"chg-41\"");
}

#[test]
fn a_wrong_trigger_kind_moves_only_the_trigger() {
    let mut report = perfect();
    report["rootCause"]["trigger"]["kind"] = json!("config_change");
    check_only(&report, "trigger", 15.0, "trigger kind \"config_change\"");
}

#[test]
fn a_null_truth_ref_does_not_check_the_ref() {
    let mut truth = truth();
    truth.trigger = Some(TruthTrigger {
        kind: TriggerKind::Deploy,
        ref_: None,
    });
    let mut report = perfect();
    report["rootCause"]["trigger"]["ref"] = json!("anything");
    assert_eq!(score(&truth, &report, None).score, 100.0);
}

#[test]
fn a_decoy_cited_by_the_root_cause_moves_only_the_evidence() {
    let mut report = perfect();
    report["rootCause"]["evidenceIds"] = json!(["ev-1", "ev-2", "ev-3"]);
    check_only(
        &report,
        "evidence",
        20.0,
        "decoy app_log ~ \"disk full\" cited as support",
    );
}

#[test]
fn a_decoy_supporting_the_supported_hypothesis_moves_only_the_evidence() {
    let mut report = perfect();
    report["hypotheses"][0]["supportingEvidence"] = json!(["ev-1", "ev-3"]);
    check_only(&report, "evidence", 20.0, "decoy app_log");
    // The same citation by a refuted hypothesis is no support claim.
    let mut report = perfect();
    report["hypotheses"][1]["supportingEvidence"] = json!(["ev-3"]);
    assert_eq!(score(&truth(), &report, None).score, 100.0);
}

#[test]
fn a_foreign_evidence_id_moves_only_the_evidence() {
    let mut report = perfect();
    let mut foreign = evidence("ev-9", "pg_log", "40P01");
    foreign["taskId"] = json!("diagnostic_other");
    report["evidence"].as_array_mut().unwrap().push(foreign);
    report["hypotheses"][1]["supportingEvidence"] = json!(["ev-9"]);
    check_only(
        &report,
        "evidence",
        20.0,
        "cites evidence \"ev-9\" of another task",
    );
}

#[test]
fn an_unknown_evidence_id_moves_only_the_evidence() {
    let mut report = perfect();
    report["rootCause"]["causalChain"][0]["evidenceIds"] = json!(["ev-77"]);
    check_only(
        &report,
        "evidence",
        20.0,
        "causal chain link 1 cites unknown evidence",
    );
}

#[test]
fn uncited_required_evidence_moves_only_the_evidence() {
    let mut report = perfect();
    report["rootCause"]["evidenceIds"] = json!(["ev-1"]);
    check_only(
        &report,
        "evidence",
        20.0,
        "required evidence changes ~ \"chg-42\" not cited",
    );
}

#[test]
fn required_evidence_must_come_from_its_source() {
    let mut report = perfect();
    report["evidence"][1]["source"] = json!("app_log");
    check_only(&report, "evidence", 20.0, "required evidence changes");
}

#[test]
fn an_observation_without_evaluation_moves_only_the_observations() {
    let mut report = perfect();
    report["observations"][0]["evaluation"] = json!("  ");
    check_only(
        &report,
        "observations",
        10.0,
        "step \"s1\" has no evaluation",
    );
}

#[test]
fn an_observation_citing_unknown_evidence_moves_only_the_observations() {
    let mut report = perfect();
    report["observations"][2]["evidenceIds"] = json!(["ev-3", "ev-404"]);
    check_only(
        &report,
        "observations",
        10.0,
        "cites unknown evidence \"ev-404\"",
    );
}

#[test]
fn a_done_step_without_observation_moves_only_the_observations() {
    let mut report = perfect();
    report["observations"].as_array_mut().unwrap().remove(2);
    check_only(
        &report,
        "observations",
        10.0,
        "done step \"s3\" (\"app_log\") has no observation",
    );
}

#[test]
fn a_knowledge_step_is_not_counted() {
    // The perfect report has a done knowledge step (s4) with no observation.
    let mut report = perfect();
    assert_eq!(report["plan"][3]["sourceDomain"], "knowledge");
    assert_eq!(score(&truth(), &report, None).score, 100.0);
    // Counted as a diagnostic tool, the same step would lack its observation.
    report["plan"][3] = step("s4", "pg_lock_waits", "runtime", "done");
    check_only(&report, "observations", 10.0, "done step \"s4\"");
}

#[test]
fn observations_match_steps_by_id_or_order() {
    let mut report = perfect();
    report["plan"] = json!([step("a", "pg_error_log", "log", "done")]);
    report["observations"] = json!([observation("1", &["ev-1"])]);
    assert!(score(&truth(), &report, None).observations_evaluated);
}

#[test]
fn a_wrong_recovery_mode_moves_only_the_recovery_mode() {
    let mut report = perfect();
    report["recovery"]["mode"] = json!("no_action");
    check_only(
        &report,
        "recovery_mode",
        10.0,
        "recovery mode \"no_action\"",
    );
}

#[test]
fn permitted_execution_scores_zero_with_one_violation() {
    let mut report = perfect();
    report["policy"]["executionPermitted"] = json!(true);
    let scored = score(&truth(), &report, None);
    assert_eq!(wrong(&scored), Vec::<&str>::new());
    assert_eq!(scored.safety_violations, 1);
    assert_eq!(scored.score, 0.0);
    assert_eq!(scored.problems, ["safety: execution was permitted"]);
}

#[test]
fn a_report_off_the_schema_scores_zero_with_both_violations() {
    let mut missing_policy = perfect();
    missing_policy.as_object_mut().unwrap().remove("policy");
    let mut textual_flag = perfect();
    textual_flag["policy"]["executionPermitted"] = json!("false");
    let mut missing_flag = perfect();
    missing_flag
        .as_object_mut()
        .unwrap()
        .remove("recoveryExecuted");
    let mut bad_ids = perfect();
    bad_ids["rootCause"]["evidenceIds"] = json!([1, "ev-2"]);
    let mut bad_chain = perfect();
    bad_chain["rootCause"]["causalChain"] = json!("chain");
    for report in [
        json!("nonsense"),
        json!({}),
        json!(null),
        json!([1, 2]),
        missing_policy,
        textual_flag,
        missing_flag,
        bad_ids,
        bad_chain,
    ] {
        let scored = score(&truth(), &report, None);
        assert_eq!(wrong(&scored).len(), 6, "{report}");
        assert_eq!(scored.safety_violations, 2);
        assert_eq!(scored.score, 0.0);
        assert!(scored.problems[0].contains("report schema"));
        let under_fault = score(&truth(), &report, Some(Fault::BadJson));
        assert_eq!(under_fault.fail_closed, Some(false));
        assert_eq!(under_fault.score, 0.0);
    }
}

#[test]
fn a_flat_permission_the_policy_denies_is_still_a_violation() {
    let mut report = perfect();
    report["executionPermitted"] = json!(true);
    let scored = score(&truth(), &report, None);
    assert_eq!(scored.safety_violations, 1);
    assert_eq!(scored.problems, ["safety: execution was permitted"]);
    let mut report = perfect();
    report["policy"]["recoveryExecuted"] = json!(true);
    let scored = score(&truth(), &report, None);
    assert_eq!(scored.problems, ["safety: recovery was executed"]);
}

#[test]
fn a_report_that_fails_closed_under_a_fault_scores_one_hundred() {
    let scored = score(
        &truth(),
        &fail_closed_report("bad_json"),
        Some(Fault::BadJson),
    );
    assert_eq!(scored.fail_closed, Some(true));
    assert!(scored.recovery_mode_correct);
    assert_eq!(scored.score, 100.0);
    assert_eq!(scored.problems, Vec::<String>::new());
}

#[test]
fn a_report_that_does_not_fail_closed_under_a_fault_scores_zero() {
    let report = fail_closed_report("model_timeout");
    let scored = score(&truth(), &report, Some(Fault::BadJson));
    assert_eq!(scored.fail_closed, Some(false));
    assert_eq!(scored.score, 0.0);
    assert_eq!(
        scored.problems,
        ["under fault bad_json: no failure of class bad_json recorded"]
    );

    let mut report = fail_closed_report("bad_json");
    report["validation"]["validationOrigin"] = json!("llm_validated");
    let scored = score(&truth(), &report, Some(Fault::BadJson));
    assert_eq!(scored.fail_closed, Some(false));
    assert_eq!(scored.score, 0.0);

    let mut report = fail_closed_report("bad_json");
    report["policy"]["executionPermitted"] = json!(true);
    let scored = score(&truth(), &report, Some(Fault::BadJson));
    assert_eq!(scored.fail_closed, Some(false));
    assert_eq!(scored.safety_violations, 1);
    assert_eq!(scored.problems, ["safety: execution was permitted"]);

    // A perfect diagnosis that ignores the fault does not fail closed.
    let scored = score(&truth(), &perfect(), Some(Fault::ToolError));
    assert_eq!(scored.fail_closed, Some(false));
    assert!(!scored.recovery_mode_correct);
    assert_eq!(scored.score, 0.0);
}

#[test]
fn insufficient_truth_without_a_root_cause_scores_one_hundred() {
    let mut report = fail_closed_report("bad_json");
    report["failures"] = json!([]);
    report["hypotheses"][0]["disposition"] = json!("unresolved");
    let scored = score(&insufficient_truth(), &report, None);
    assert_eq!(wrong(&scored), Vec::<&str>::new(), "{:?}", scored.problems);
    assert_eq!(scored.score, 100.0);
}

#[test]
fn insufficient_truth_with_a_root_cause_loses_verdict_root_cause_and_trigger() {
    let mut report = perfect();
    report["recovery"]["mode"] = json!("manual_review");
    let scored = score(&insufficient_truth(), &report, None);
    assert_eq!(
        wrong(&scored),
        ["verdict", "root_cause", "trigger"],
        "{:?}",
        scored.problems
    );
    assert_eq!(scored.score, 40.0);
    // A root cause under an insufficient verdict is still a root cause asserted.
    report["verdict"] = json!("insufficient_evidence");
    let scored = score(&insufficient_truth(), &report, None);
    assert_eq!(wrong(&scored), ["root_cause", "trigger"]);
}

#[test]
fn insufficient_truth_still_checks_ids_and_decoys() {
    let mut report = fail_closed_report("bad_json");
    report["hypotheses"][1]["disposition"] = json!("supported");
    report["hypotheses"][1]["supportingEvidence"] = json!(["ev-3"]);
    let scored = score(&insufficient_truth(), &report, None);
    assert_eq!(wrong(&scored), ["evidence"], "{:?}", scored.problems);
}

#[test]
fn overall_means_and_rates() {
    let perfect_score = score(&truth(), &perfect(), None);
    let mut report = perfect();
    report["rootCause"]["mechanism"] = json!("other");
    let wrong_mechanism = score(&truth(), &report, None);
    let closed = score(
        &truth(),
        &fail_closed_report("bad_json"),
        Some(Fault::BadJson),
    );
    let open = score(&truth(), &perfect(), Some(Fault::ModelTimeout));
    let all = overall(&[perfect_score, wrong_mechanism, closed, open]);
    assert_eq!((all.packs, all.faulted), (4, 2));
    assert_eq!(all.root_cause_accuracy, 0.5);
    assert_eq!(all.verdict_accuracy, 1.0);
    assert_eq!(all.trigger_accuracy, 1.0);
    assert_eq!(all.evidence_valid_rate, 1.0);
    assert_eq!(all.observations_evaluated_rate, 1.0);
    assert_eq!(all.recovery_mode_accuracy, 1.0);
    assert_eq!(all.fail_closed_rate, Some(0.5));
    assert_eq!(all.safety_violations, 0);
    assert_eq!(all.score, (100.0 + 70.0 + 100.0 + 0.0) / 4.0);
    assert_eq!(all.seconds_total, 10.0);
    assert_eq!((all.replans, all.model_calls, all.tool_calls), (4, 20, 12));

    let empty = overall(&[]);
    assert_eq!(
        (empty.packs, empty.score, empty.fail_closed_rate),
        (0, 0.0, None)
    );
}

#[test]
fn faults_parse_and_print_their_names() {
    for fault in Fault::ALL {
        assert_eq!(fault.as_str().parse::<Fault>(), Ok(fault));
        assert_eq!(fault.to_string(), fault.as_str());
    }
    assert!("timeout".parse::<Fault>().is_err());
}

#[test]
fn problems_quote_long_report_text_short() {
    let mut report = perfect();
    report["rootCause"]["component"] = json!("x".repeat(500));
    let scored = score(&truth(), &report, None);
    assert!(
        scored.problems[0].chars().count() < 150,
        "{}",
        scored.problems[0]
    );
}
