//! The intent router: six intents, decided by rules wherever rules can decide (explicit
//! `incident_…` / `diagnostic_…` ids, unambiguous verbs, English and Chinese), otherwise by
//! a classifier whose output is grammar-constrained to `{intent, confidence, incidentId,
//! diagnosticTaskId, needsClarification}` and re-validated here. The classifier can never
//! grant a capability by failing: a failure routes to `chat`. Permissions derive from the
//! validated route only.

mod phrases;

use serde::Serialize;
use serde_json::{json, Value};

use phrases::*;

/// What the user wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Intent {
    Chat,
    KnowledgeQuestion,
    IncidentQuery,
    DiagnosticStart,
    DiagnosticStatus,
    RecoveryRequest,
}

impl Intent {
    pub const ALL: [Intent; 6] = [
        Intent::Chat,
        Intent::KnowledgeQuestion,
        Intent::IncidentQuery,
        Intent::DiagnosticStart,
        Intent::DiagnosticStatus,
        Intent::RecoveryRequest,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Intent::Chat => "chat",
            Intent::KnowledgeQuestion => "knowledge_question",
            Intent::IncidentQuery => "incident_query",
            Intent::DiagnosticStart => "diagnostic_start",
            Intent::DiagnosticStatus => "diagnostic_status",
            Intent::RecoveryRequest => "recovery_request",
        }
    }

    pub fn parse(text: &str) -> Option<Intent> {
        Intent::ALL.into_iter().find(|i| i.as_str() == text)
    }
}

/// Who decided the route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteSource {
    Rule,
    Classifier,
    Fallback,
}

impl RouteSource {
    pub fn as_str(self) -> &'static str {
        match self {
            RouteSource::Rule => "rule",
            RouteSource::Classifier => "classifier",
            RouteSource::Fallback => "fallback",
        }
    }
}

/// A validated route: the only input permissions are derived from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Route {
    pub intent: Intent,
    pub confidence: f64,
    pub source: RouteSource,
    pub incident_id: Option<String>,
    pub diagnostic_task_id: Option<String>,
    pub needs_clarification: bool,
    pub blocked_reason: Option<String>,
    pub flags: Vec<String>,
    /// The user asks for the time or the date (see [`asks_for_time`]); set for every route,
    /// stored or new, from the message.
    pub asks_time: bool,
}

impl Route {
    fn new(intent: Intent, confidence: f64, source: RouteSource) -> Self {
        Self {
            intent,
            confidence,
            source,
            incident_id: None,
            diagnostic_task_id: None,
            needs_clarification: false,
            blocked_reason: None,
            flags: Vec::new(),
            asks_time: false,
        }
    }

    /// Marks the route as needing a clarification when its intent needs a target that is
    /// missing.
    fn require_targets(mut self) -> Self {
        let missing = match self.intent {
            Intent::DiagnosticStart => self.incident_id.is_none(),
            Intent::DiagnosticStatus | Intent::RecoveryRequest => self.diagnostic_task_id.is_none(),
            _ => false,
        };
        if missing {
            self.needs_clarification = true;
            self.blocked_reason = Some("missing_target".into());
        }
        self
    }
}

/// The resource ids a message names: `incident_<suffix>` and `diagnostic_<suffix>`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct NamedIds {
    pub incidents: Vec<String>,
    pub diagnostics: Vec<String>,
}

/// Longest id suffix accepted.
pub const MAX_ID_SUFFIX: usize = 64;

/// Whether `id` is `<prefix>_<suffix>` with a well-formed suffix.
pub fn is_valid_id(id: &str, prefix: &str) -> bool {
    let Some(suffix) = id
        .strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('_'))
    else {
        return false;
    };
    let mut chars = suffix.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && suffix.len() <= MAX_ID_SUFFIX
        && suffix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// Finds every well-formed id in `text`, in order, without duplicates.
pub fn named_ids(text: &str) -> NamedIds {
    NamedIds {
        incidents: ids_with_prefix(text, "incident_"),
        diagnostics: ids_with_prefix(text, "diagnostic_"),
    }
}

fn ids_with_prefix(text: &str, prefix: &str) -> Vec<String> {
    let lower = text.to_ascii_lowercase();
    let mut found: Vec<String> = Vec::new();
    let mut from = 0;
    while let Some(offset) = lower[from..].find(prefix) {
        let start = from + offset;
        from = start + prefix.len();
        let before = lower[..start].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let suffix: String = text[from..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .take(MAX_ID_SUFFIX + 1)
            .collect();
        let suffix = suffix.trim_end_matches('-');
        let id = format!("{prefix}{suffix}");
        if is_valid_id(&id, prefix.trim_end_matches('_')) && !found.contains(&id) {
            found.push(id);
        }
    }
    found
}

/// The text with ids removed (so `diagnostic_5` does not read as the verb "diagnose"),
/// lower-cased.
fn without_ids(text: &str, ids: &NamedIds) -> String {
    let mut lower = text.to_lowercase();
    for id in ids.incidents.iter().chain(&ids.diagnostics) {
        lower = lower.replace(&id.to_lowercase(), " ");
    }
    lower
}

/// The rules' verdict, or `None` when only a classifier can tell.
pub fn route_by_rules(text: &str) -> Option<Route> {
    let ids = named_ids(text);
    let words = without_ids(text, &ids);
    let recovery = any_phrase(&words, RECOVERY_PHRASES) || rolls_back(&words);
    let diagnose = any_phrase(&words, DIAGNOSE_PHRASES);
    let question = any_phrase(&words, QUESTION_PHRASES);
    let incident = ids.incidents.first().cloned();
    let diagnostic = ids.diagnostics.first().cloned();
    let with_ids = |intent: Intent| {
        let mut route = Route::new(intent, 1.0, RouteSource::Rule);
        route.incident_id = incident.clone();
        route.diagnostic_task_id = diagnostic.clone();
        route.require_targets()
    };
    if diagnostic.is_some() {
        if recovery {
            return Some(with_ids(Intent::RecoveryRequest));
        }
        if diagnose && incident.is_some() && !any_phrase(&words, STATUS_PHRASES) {
            return Some(with_ids(Intent::DiagnosticStart));
        }
        return Some(with_ids(Intent::DiagnosticStatus));
    }
    // "diagnostic"/"diagnosis" as a noun next to an incident id asks for one to run.
    let diagnostic_noun = any_phrase(&words, &["diagnostic", "diagnostics", "diagnosis", "诊断"]);
    if incident.is_some() {
        let asks_how = any_phrase(&words, &["how do", "how to", "how can", "怎么做", "如何"]);
        let status_of_diagnosis = diagnostic_noun && any_phrase(&words, STATUS_PHRASES);
        if (diagnose || diagnostic_noun) && !asks_how && !status_of_diagnosis {
            return Some(with_ids(Intent::DiagnosticStart));
        }
        if recovery && !question {
            return Some(with_ids(Intent::RecoveryRequest));
        }
        return Some(with_ids(Intent::IncidentQuery));
    }
    // No ids: imperatives that need a target become clarifications; questions about how to
    // do something are knowledge questions.
    let mentions_diagnostic_task = diagnostic_noun;
    let asks_after = any_phrase(&words, STATUS_PHRASES)
        || (any_phrase(&words, STATUS_CHECK_PHRASES) && !any_phrase(&words, START_PHRASES));
    if mentions_diagnostic_task && asks_after && !question_about_method(&words) && !recovery {
        return Some(with_ids(Intent::DiagnosticStatus));
    }
    if recovery && !question_about_method(&words) && !asks_which_or_whether(&words) {
        return Some(with_ids(Intent::RecoveryRequest));
    }
    if diagnose && !question_about_method(&words) && refers_to_current_problem(&words) {
        return Some(with_ids(Intent::DiagnosticStart));
    }
    if any_phrase(&words, INCIDENT_LIST_PHRASES) && !question_about_method(&words) {
        return Some(Route::new(Intent::IncidentQuery, 0.9, RouteSource::Rule));
    }
    if is_small_talk(&words) {
        return Some(Route::new(Intent::Chat, 0.9, RouteSource::Rule));
    }
    if question || looks_technical(&words) {
        return Some(Route::new(
            Intent::KnowledgeQuestion,
            0.85,
            RouteSource::Rule,
        ));
    }
    None
}

/// "roll it back", "roll the deploy back": "roll" and "back" at most two words apart.
fn rolls_back(words: &str) -> bool {
    let tokens: Vec<&str> = words
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
        .collect();
    tokens.iter().enumerate().any(|(i, t)| {
        *t == "roll"
            && tokens
                .iter()
                .skip(i + 1)
                .take(3)
                .any(|next| *next == "back")
    })
}

/// Whether the message mentions what `intent` acts on, by id or by word. Chat and
/// knowledge questions need no evidence.
fn has_evidence(intent: Intent, words: &str, named: &NamedIds) -> bool {
    let diagnostic = !named.diagnostics.is_empty()
        || any_phrase(words, DIAGNOSE_PHRASES)
        || DIAGNOSTIC_EVIDENCE.iter().any(|w| words.contains(w));
    match intent {
        Intent::Chat | Intent::KnowledgeQuestion => true,
        Intent::IncidentQuery => {
            !named.incidents.is_empty()
                || any_phrase(words, INCIDENT_LIST_PHRASES)
                || INCIDENT_EVIDENCE.iter().any(|w| words.contains(w))
        }
        Intent::DiagnosticStart => diagnostic || !named.incidents.is_empty(),
        Intent::DiagnosticStatus => diagnostic,
        Intent::RecoveryRequest => {
            any_phrase(words, RECOVERY_PHRASES)
                || rolls_back(words)
                || RECOVERY_EVIDENCE.iter().any(|w| contains_phrase(words, w))
        }
    }
}

/// Whether the user asks for the time or the date: the `current_time` tool then runs in
/// code before the model answers, as retrieval does for knowledge questions.
pub fn asks_for_time(text: &str) -> bool {
    const TIME: &[&str] = &[
        "what time",
        "what day",
        "what date",
        "today's date",
        "the date today",
        "current time",
        "time is it",
        "几点",
        "几号",
        "星期几",
        "日期",
        "现在时间",
        "什么时间",
    ];
    any_phrase(&text.to_lowercase(), TIME)
}

/// "How do I roll back …", "如何排查…": asking for a method, not for an action.
fn question_about_method(words: &str) -> bool {
    const METHOD: &[&str] = &[
        "how do",
        "how to",
        "how can",
        "how should",
        "what is",
        "what are",
        "what's",
        "why",
        "when should",
        "explain",
        "steps to",
        "best way",
        "guide",
        "what does",
        "what causes",
        "how long",
        "how many",
        "how soon",
        "threshold",
        "should i",
        "should we",
        "at what",
        "is it safe",
        "怎么",
        "如何",
        "为什么",
        "什么是",
        "步骤",
        "方法",
        "原理",
        "多久",
        "多长时间",
        "阈值",
        "应该",
        "要不要",
        "该不该",
    ];
    // "怎么样" asks how something is going, not how to do it.
    any_phrase(&words.replace("怎么样", " "), METHOD)
}

/// "回滚到什么范围？", "能不能重启数据库来加快？", "which setting needs a restart?": a
/// question about an action (what, which, whether), not a request for it.
fn asks_which_or_whether(words: &str) -> bool {
    const ASKS: &[&str] = &[
        "what",
        "which",
        "whether",
        "什么",
        "哪个",
        "哪种",
        "怎样",
        "能不能",
        "可不可以",
        "是否",
    ];
    any_phrase(words, ASKS)
}

/// "diagnose it", "诊断一下": an action on the problem at hand, not a topic.
fn refers_to_current_problem(words: &str) -> bool {
    const POINTERS: &[&str] = &[
        "it",
        "this",
        "that",
        "now",
        "the incident",
        "this incident",
        "the outage",
        "the alert",
        "please",
        "一下",
        "这个",
        "那个",
        "现在",
        "马上",
        "立即",
        "当前",
    ];
    any_phrase(words, POINTERS) || word_count(words) <= 3
}

/// Words in a message, a Chinese word counted as two characters (Chinese has no spaces:
/// "mysql 慢日志一般用哪个工具汇总分析" is eight words, not two).
fn word_count(words: &str) -> usize {
    words
        .split_whitespace()
        .map(|token| {
            let cjk = token
                .chars()
                .filter(|c| ('\u{4e00}'..='\u{9fff}').contains(c))
                .count();
            let rest = token.chars().count() - cjk;
            usize::from(rest > 0) + cjk.div_ceil(2)
        })
        .sum()
}

fn is_small_talk(words: &str) -> bool {
    any_phrase(words, CHAT_PHRASES) && !looks_technical(words)
}

/// Operations vocabulary: such a message is a question for the knowledge bases.
fn looks_technical(words: &str) -> bool {
    const TERMS: &[&str] = &[
        "deadlock",
        "lock",
        "nginx",
        "502",
        "504",
        "timeout",
        "disk",
        "inode",
        "database",
        "postgres",
        "mysql",
        "sql",
        "query",
        "index",
        "connection pool",
        "pool",
        "deploy",
        "latency",
        "cpu",
        "memory",
        "oom",
        "redis",
        "kafka",
        "dns",
        "certificate",
        "tls",
        "upstream",
        "gateway",
        "replica",
        "vacuum",
        "log",
        "kubernetes",
        "pod",
        "error",
        "死锁",
        "锁",
        "超时",
        "磁盘",
        "数据库",
        "连接池",
        "慢查询",
        "发布",
        "部署",
        "网关",
        "内存",
        "日志",
        "证书",
        "索引",
        "报错",
        "错误",
    ];
    any_phrase(words, TERMS)
}

/// The classifier's output schema: nothing else can come out of it.
pub fn classifier_schema() -> Value {
    let intents: Vec<&str> = Intent::ALL.iter().map(|i| i.as_str()).collect();
    json!({
        "type": "object",
        "properties": {
            "intent": {"type": "string", "enum": intents},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "incidentId": {"anyOf": [{"type": "null"}, {"type": "string", "pattern": "^incident_[A-Za-z0-9][A-Za-z0-9-]{0,63}$"}]},
            "diagnosticTaskId": {"anyOf": [{"type": "null"}, {"type": "string", "pattern": "^diagnostic_[A-Za-z0-9][A-Za-z0-9-]{0,63}$"}]},
            "needsClarification": {"type": "boolean"}
        },
        "required": ["intent", "confidence", "incidentId", "diagnosticTaskId", "needsClarification"],
        "additionalProperties": false
    })
}

/// The classifier's instructions.
pub fn classifier_prompt() -> String {
    "Classify the operations engineer's message. Intents: chat (small talk), \
     knowledge_question (how/what/why about operations topics), incident_query (look up \
     incidents), diagnostic_start (start diagnosing an incident), diagnostic_status (state \
     or report of a diagnostic task), recovery_request (carry out a recovery). Copy ids \
     only if the message contains them. Answer with JSON only."
        .to_owned()
}

/// Re-validates the classifier's output in code: enum, range, id format, ids the message
/// really names, required targets, and the confidence threshold. Anything malformed is
/// `None` (the caller falls back to chat).
pub fn validate_classification(output: &Value, text: &str, threshold: f64) -> Option<Route> {
    let chosen = Intent::parse(output.get("intent")?.as_str()?)?;
    let confidence = output.get("confidence")?.as_f64()?;
    if !(0.0..=1.0).contains(&confidence) {
        return None;
    }
    let named = named_ids(text);
    let words = without_ids(text, &named);
    let evidenced = has_evidence(chosen, &words, &named);
    // Without evidence the resource intent falls back to what needs none: small talk is
    // chat, anything else a question for the knowledge bases.
    let intent = match (evidenced, is_small_talk(&words)) {
        (true, _) => chosen,
        (false, true) => Intent::Chat,
        (false, false) => Intent::KnowledgeQuestion,
    };
    let id_field = |field: &str, prefix: &str, named: &[String]| -> Option<Option<String>> {
        match output.get(field)? {
            Value::Null => Some(None),
            Value::String(id) if is_valid_id(id, prefix) => {
                // The model may only copy ids the user wrote, never invent a target.
                Some(named.contains(id).then(|| id.clone()))
            }
            _ => None,
        }
    };
    let mut route = Route::new(intent, confidence, RouteSource::Classifier);
    if !evidenced {
        route
            .flags
            .push(format!("unsupported_intent:{}", chosen.as_str()));
    }
    route.incident_id = id_field("incidentId", "incident", &named.incidents)?
        .or_else(|| named.incidents.first().cloned());
    route.diagnostic_task_id = id_field("diagnosticTaskId", "diagnostic", &named.diagnostics)?
        .or_else(|| named.diagnostics.first().cloned());
    let asked = output.get("needsClarification")?.as_bool()?;
    let mut route = route.require_targets();
    if asked {
        route.needs_clarification = true;
        route
            .blocked_reason
            .get_or_insert_with(|| "classifier_unsure".into());
    }
    if confidence < threshold {
        route.needs_clarification = true;
        route
            .blocked_reason
            .get_or_insert_with(|| "low_confidence".into());
    }
    Some(route)
}

/// The route when the classifier failed: plain chat, never a capability.
pub fn fallback_route(reason: &str) -> Route {
    let mut route = Route::new(Intent::Chat, 0.0, RouteSource::Fallback);
    route.blocked_reason = Some(reason.to_owned());
    route
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(
        text: &str,
        intent: Intent,
        incident: Option<&str>,
        diagnostic: Option<&str>,
        clarify: bool,
    ) {
        let route = route_by_rules(text).unwrap_or_else(|| panic!("no rule for {text:?}"));
        assert_eq!(route.intent, intent, "{text:?}");
        assert_eq!(route.incident_id.as_deref(), incident, "{text:?}");
        assert_eq!(route.diagnostic_task_id.as_deref(), diagnostic, "{text:?}");
        assert_eq!(route.needs_clarification, clarify, "{text:?}");
    }

    #[test]
    fn explicit_ids_and_verbs_route_by_rules() {
        use Intent::*;
        check(
            "show incident_42",
            IncidentQuery,
            Some("incident_42"),
            None,
            false,
        );
        check(
            "diagnose incident_7",
            DiagnosticStart,
            Some("incident_7"),
            None,
            false,
        );
        check(
            "recover per diagnostic_5",
            RecoveryRequest,
            None,
            Some("diagnostic_5"),
            false,
        );
        check(
            "what's the status of diagnostic_a1b2?",
            DiagnosticStatus,
            None,
            Some("diagnostic_a1b2"),
            false,
        );
        check(
            "diagnostic_5",
            DiagnosticStatus,
            None,
            Some("diagnostic_5"),
            false,
        );
        check(
            "帮我看下incident_42的状态",
            IncidentQuery,
            Some("incident_42"),
            None,
            false,
        );
        check(
            "诊断一下 incident_db-7",
            DiagnosticStart,
            Some("incident_db-7"),
            None,
            false,
        );
        check(
            "根据 diagnostic_5 执行恢复",
            RecoveryRequest,
            None,
            Some("diagnostic_5"),
            false,
        );
        check(
            "restart the pods for incident_9",
            RecoveryRequest,
            Some("incident_9"),
            None,
            true,
        );
        check(
            "can you run a diagnostic on incident_12? want to know why",
            DiagnosticStart,
            Some("incident_12"),
            None,
            false,
        );
        check("诊断结果出来了吗？", DiagnosticStatus, None, None, true);
    }

    #[test]
    fn missing_targets_need_clarification() {
        use Intent::*;
        check("diagnose it", DiagnosticStart, None, None, true);
        check("recover now", RecoveryRequest, None, None, true);
        check(
            "check the diagnostic report",
            DiagnosticStatus,
            None,
            None,
            true,
        );
        check("马上执行恢复", RecoveryRequest, None, None, true);
        check("check the diagnostic", DiagnosticStatus, None, None, true);
        check(
            "how's the diagnosis going",
            DiagnosticStatus,
            None,
            None,
            true,
        );
        check("诊断怎么样了", DiagnosticStatus, None, None, true);
        check(
            "please roll the release back, the diagnosis blamed it",
            RecoveryRequest,
            None,
            None,
            true,
        );
        check("revert the last deploy", RecoveryRequest, None, None, true);
    }

    #[test]
    fn small_talk_routes_to_chat() {
        use Intent::*;
        check("morning all, slept badly lol", Chat, None, None, false);
        check("辛苦了，我先下班了", Chat, None, None, false);
        assert!(asks_for_time("what time is it in UTC?"));
        assert!(asks_for_time("今天星期几"));
        assert!(!asks_for_time("how long does a vacuum take?"));
    }

    #[test]
    fn a_classified_intent_needs_evidence_in_the_message() {
        let status = json!({"intent": "diagnostic_status", "confidence": 0.9,
            "incidentId": null, "diagnosticTaskId": null, "needsClarification": false});
        let route =
            validate_classification(&status, "the disk on db1 filled up overnight", 0.6).unwrap();
        assert_eq!(route.intent, Intent::KnowledgeQuestion);
        assert!(!route.needs_clarification);
        assert_eq!(route.flags, ["unsupported_intent:diagnostic_status"]);
        let incidents = json!({"intent": "incident_query", "confidence": 0.9,
            "incidentId": null, "diagnosticTaskId": null, "needsClarification": false});
        let route = validate_classification(&incidents, "hey, long week lol", 0.6).unwrap();
        assert_eq!(route.intent, Intent::Chat);
        // With evidence the classifier's choice stands.
        let route =
            validate_classification(&incidents, "anything paging tonight? outages?", 0.6).unwrap();
        assert_eq!(route.intent, Intent::IncidentQuery);
        assert!(route.flags.is_empty());
    }

    #[test]
    fn questions_about_methods_are_knowledge_questions() {
        use Intent::*;
        check(
            "How do I roll back a bad deploy?",
            KnowledgeQuestion,
            None,
            None,
            false,
        );
        check("what is a deadlock?", KnowledgeQuestion, None, None, false);
        check("如何排查数据库死锁？", KnowledgeQuestion, None, None, false);
        check(
            "nginx 502 after deploy",
            KnowledgeQuestion,
            None,
            None,
            false,
        );
        check(
            "which incidents are firing",
            IncidentQuery,
            None,
            None,
            false,
        );
        check("hello!", Chat, None, None, false);
        check("谢谢", Chat, None, None, false);
        // Asking for advice about an action is not asking for the action.
        check(
            "The migration cannot be undone. Should I roll back?",
            KnowledgeQuestion,
            None,
            None,
            false,
        );
        check(
            "At what usage should the disk alerts fire?",
            KnowledgeQuestion,
            None,
            None,
            false,
        );
        check(
            "发布后错误率升高，要不要回滚？",
            KnowledgeQuestion,
            None,
            None,
            false,
        );
        check("roll back the deploy", RecoveryRequest, None, None, true);
        // Asking what, which or whether about an action is a question about it.
        for question in [
            "MySQL 报 1205 锁等待超时后，默认回滚到什么范围？",
            "终止会话后大事务回滚很慢，能不能重启数据库来加快？",
            "用 Helm 怎样把 order-api 回滚到 27 号版本？",
            "Which setting needs a restart of the database?",
        ] {
            check(question, KnowledgeQuestion, None, None, false);
        }
        check("帮我重启数据库", RecoveryRequest, None, None, true);
        // A Chinese question about a topic is not a request to diagnose the problem at hand.
        check(
            "MySQL 慢日志一般用哪个工具汇总分析？",
            KnowledgeQuestion,
            None,
            None,
            false,
        );
        check("排查故障", DiagnosticStart, None, None, true);
    }

    #[test]
    fn ids_need_a_clean_boundary_and_a_valid_suffix() {
        let ids =
            named_ids("xincident_1 incident_ incident_-a incident_ok-, DIAGNOSTIC_9 diagnostic_9");
        assert_eq!(ids.incidents, ["incident_ok"]);
        assert_eq!(ids.diagnostics, ["diagnostic_9"]);
        assert!(!is_valid_id(
            &format!("incident_{}", "a".repeat(65)),
            "incident"
        ));
    }

    #[test]
    fn the_classifier_cannot_invent_targets_or_skip_validation() {
        let out = json!({"intent": "recovery_request", "confidence": 0.99,
            "incidentId": null, "diagnosticTaskId": "diagnostic_77", "needsClarification": false});
        let route = validate_classification(&out, "please fix things", 0.6).unwrap();
        assert_eq!(route.diagnostic_task_id, None);
        assert!(route.needs_clarification);
        let low = json!({"intent": "knowledge_question", "confidence": 0.2,
            "incidentId": null, "diagnosticTaskId": null, "needsClarification": false});
        assert!(
            validate_classification(&low, "hmm", 0.6)
                .unwrap()
                .needs_clarification
        );
        let bad = json!({"intent": "admin_mode", "confidence": 1.0,
            "incidentId": null, "diagnosticTaskId": null, "needsClarification": false});
        assert!(validate_classification(&bad, "x", 0.6).is_none());
        assert_eq!(fallback_route("classifier_failed").intent, Intent::Chat);
    }
}
