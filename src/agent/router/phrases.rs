//! The router's vocabulary: the phrase tables that rules and the evidence check read, English
//! and Chinese, and how a phrase is found in a message (word boundaries for English).

/// Phrases, lower-cased. English phrases are matched on word boundaries; Chinese ones
/// anywhere.
pub(super) const RECOVERY_PHRASES: &[&str] = &[
    "recover",
    "recovery",
    "remediate",
    "remediation",
    "apply the fix",
    "apply fix",
    "apply the remediation",
    "roll back",
    "rollback",
    "restart",
    "execute the fix",
    "run the fix",
    "mitigate",
    "failover",
    "fail over",
    "kill the",
    "revert",
    "恢复",
    "回滚",
    "重启",
    "执行修复",
    "修复一下",
    "止损",
    "切换",
];
pub(super) const DIAGNOSE_PHRASES: &[&str] = &[
    "diagnose",
    "diagnosis",
    "investigate",
    "root cause",
    "root-cause",
    "rca",
    "troubleshoot",
    "analyze",
    "analyse",
    "look into",
    "诊断",
    "排查",
    "根因",
    "分析",
];
pub(super) const STATUS_PHRASES: &[&str] = &[
    "status", "progress", "report", "result", "results", "finding", "findings", "outcome",
    "done yet", "finished", "show", "状态", "进度", "报告", "结果", "结论", "进展", "查看",
];
pub(super) const INCIDENT_LIST_PHRASES: &[&str] = &[
    "incidents",
    "incident list",
    "alerts",
    "firing",
    "open incident",
    "active incident",
    "current incident",
    "事故",
    "告警",
    "故障列表",
    "有哪些故障",
];
pub(super) const QUESTION_PHRASES: &[&str] = &[
    "how do",
    "how to",
    "how can",
    "how should",
    "what is",
    "what are",
    "what's",
    "what does",
    "what causes",
    "why",
    "when should",
    "which",
    "explain",
    "difference between",
    "best way",
    "steps to",
    "guide",
    "?",
    "？",
    "怎么",
    "如何",
    "为什么",
    "什么",
    "哪些",
    "是否",
    "吗",
    "呢",
    "步骤",
    "方法",
    "原因",
];
pub(super) const CHAT_PHRASES: &[&str] = &[
    "hello",
    "hi",
    "hey",
    "good morning",
    "good afternoon",
    "good evening",
    "thanks",
    "thank you",
    "who are you",
    "what can you do",
    "what time",
    "what day",
    "today's date",
    "tell me a joke",
    "joke",
    "how are you",
    "bye",
    "goodbye",
    "你好",
    "您好",
    "谢谢",
    "多谢",
    "你是谁",
    "你能做什么",
    "几点",
    "今天几号",
    "日期",
    "笑话",
    "再见",
    "早上好",
    "晚上好",
    "morning",
    "good night",
    "lol",
    "haha",
    "cheers",
    "辛苦",
    "下班",
    "晚安",
    "哈哈",
];

/// "check the diagnostic", "诊断怎么样了": asking after a task that exists, not starting one.
pub(super) const STATUS_CHECK_PHRASES: &[&str] = &[
    "check",
    "how is",
    "how's",
    "going",
    "update",
    "any news",
    "ready",
    "怎么样",
    "好了",
    "出来",
    "完成",
];
/// Words that start something new.
pub(super) const START_PHRASES: &[&str] = &[
    "run", "start", "kick off", "launch", "begin", "trigger", "new", "开始", "启动", "发起",
];

/// What a classified intent must have in the message to stand: a resource intent chosen for
/// a message that never mentions its domain ("df says / is full" as a diagnostic's status)
/// is a small model's guess, not a request.
pub(super) const INCIDENT_EVIDENCE: &[&str] = &[
    "incident", "alert", "outage", "firing", "paged", "pager", "事件", "事故", "告警", "故障",
    "报警",
];
pub(super) const DIAGNOSTIC_EVIDENCE: &[&str] = &[
    "diagnos",
    "report",
    "finding",
    "investigat",
    "analy",
    "root cause",
    "诊断",
    "报告",
    "排查",
    "根因",
    "分析",
];
pub(super) const RECOVERY_EVIDENCE: &[&str] = &[
    "fix", "repair", "undo", "resolve", "roll", "修复", "处理", "解决", "撤销", "还原",
];

pub(super) fn contains_phrase(text: &str, phrase: &str) -> bool {
    if !phrase.is_ascii() || !phrase.chars().any(|c| c.is_ascii_alphanumeric()) {
        return text.contains(phrase);
    }
    let mut from = 0;
    while let Some(offset) = text[from..].find(phrase) {
        let start = from + offset;
        let end = start + phrase.len();
        let before_ok = text[..start]
            .chars()
            .next_back()
            .is_none_or(|c| !c.is_ascii_alphanumeric());
        let after_ok = text[end..]
            .chars()
            .next()
            .is_none_or(|c| !c.is_ascii_alphanumeric());
        if before_ok && after_ok {
            return true;
        }
        from = start + 1;
        while !text.is_char_boundary(from) {
            from += 1;
        }
    }
    false
}

pub(super) fn any_phrase(text: &str, phrases: &[&str]) -> bool {
    phrases.iter().any(|p| contains_phrase(text, p))
}
