//! The faithfulness gate: whether a sentence of a knowledge answer is supported by the
//! passages it cites, decided in code. Both are compared as content terms the way the
//! search index reads them (`terms`); numbers, commands in backticks, paths and flags
//! must appear verbatim (after normalisation) in a cited passage. A sentence with too few
//! content terms to state a fact passes. Also whether a sentence tells more than the
//! question, whether a text names what the question names, and how well a passage line
//! matches a question for the extractive answer. Streamed answers are cut into whole
//! sentences first (`sentences`), so nothing is shown before it is checked. Pure
//! functions.

mod sentences;
mod terms;

pub use sentences::{with_markers, without_markers, Sentences};
use terms::{action_terms, asks_for_a_number, holds_a_number, holds_exact, is_cjk};
pub use terms::{content_terms, exact_terms, normalise};

use crate::retrieval::words;

/// Share of a sentence's content terms a passage must hold for the sentence to be
/// supported by it.
pub const SUPPORT_SHARE: f64 = 0.5;
/// Content terms below which a sentence states no fact of its own ("Here is how:").
const FACT_TERMS: usize = 3;
/// Words of a bare answer at most (a name, a package, a standard).
const BARE_WORDS: usize = 3;

/// The names a question asks about, lower-cased: proper nouns (a capitalised word inside a
/// sentence: "Argo", "Kafka"), mixed-case names ("MongoDB", "VirtualService"), acronyms of
/// three letters or more ("XFS", "TLS") and settings (`client_max_body_size`). A question
/// naming something its passages never mention is not answered by them. What a user pastes
/// about their own system (hosts, addresses, ids, numbers: words with digits, dots or
/// slashes) and two-letter abbreviations ("MB", "DB") are not names.
pub fn named_terms(question: &str) -> Vec<String> {
    names_in(question, true)
}

/// The technical names of a question: its acronyms, mixed-case names and settings (see
/// [`named_terms`]), not its plain proper nouns ("Falcot", "Corp": the organisation a
/// whole knowledge base is about, named in few of its passages).
pub fn technical_names(question: &str) -> Vec<String> {
    names_in(question, false)
}

/// The names of `question` (see [`named_terms`]); plain proper nouns only with
/// `proper_nouns`.
fn names_in(question: &str, proper_nouns: bool) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    // Chinese has no capitals of its own: a capitalised Latin word in it is a name.
    let cjk_question = question.chars().any(is_cjk);
    let mut sentence_start = true;
    for raw in question.split(|c: char| {
        c.is_whitespace() || "，、（）()[]{}\"“”`,;:!?！？。；：".contains(c) || is_cjk(c)
    }) {
        let starts_sentence = sentence_start;
        if !raw.is_empty() {
            sentence_start = raw.ends_with(['.', '?', '!']);
        }
        let word = raw
            .split('\'')
            .next()
            .unwrap_or_default()
            .trim_end_matches(['.', '?', '!']);
        if word.len() < 2 || !word.chars().all(|c| c.is_ascii_alphabetic() || c == '_') {
            continue;
        }
        let setting = word.contains('_') && word.chars().any(|c| c.is_ascii_alphabetic());
        let tail = &word[1..];
        let capitalised = word.starts_with(|c: char| c.is_ascii_uppercase());
        let mixed_case = capitalised
            && tail.chars().any(|c| c.is_ascii_uppercase())
            && tail.chars().any(|c| c.is_ascii_lowercase());
        let proper_noun = proper_nouns
            && capitalised
            && (cjk_question || !starts_sentence)
            && tail.chars().all(|c| c.is_ascii_lowercase());
        let acronym = word.len() >= 3 && word.chars().all(|c| c.is_ascii_uppercase());
        let name = word.to_ascii_lowercase();
        if (setting || mixed_case || proper_noun || acronym) && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// Whether `text` mentions every name `question` asks about (see [`named_terms`]).
pub fn holds_names(question: &str, text: &str) -> bool {
    let text = normalise(text);
    named_terms(question)
        .iter()
        .all(|name| text.contains(name.as_str()))
}

/// Whether `text` holds everything the question names for itself: its names (see
/// [`named_terms`]), its words that could name a tool (`sshd`, `copytruncate`: see
/// [`words::name_candidates`]), its qualifiers (see [`QUALIFIERS`]) and its exact terms
/// (`HTTP/2`, a port, a path). A line
/// quoted as the answer must: "web servers listen on port 80" does not answer which port
/// sshd listens on, however many of the question's other words it holds.
pub fn holds_what_is_named(question: &str, text: &str) -> bool {
    let normalised = normalise(text);
    on_subject(question, text)
        && holds_names(question, text)
        && words::name_candidates(question)
            .iter()
            .all(|word| normalised.contains(&word.to_ascii_lowercase()))
}

/// Words that make a question ask for one value among several: the default, the
/// largest, the latest. A text that never says which (a passage on grace periods that
/// does not say "default") does not answer "what is the default grace period".
const QUALIFIERS: &[&str] = &[
    "default", "maximum", "minimum", "latest", "newest", "oldest", "largest", "smallest",
    "highest", "lowest", "longest", "shortest", "默认", "缺省", "最大", "最小", "最长", "最短",
    "最多", "最少", "最新", "最早", "最高", "最低",
];

/// The qualifiers of [`QUALIFIERS`] a text says, English ones as words of it ("defaults"
/// says "default"; "default-lease-time" does too).
fn qualifiers(text: &str) -> Vec<&'static str> {
    let lowered = text.to_lowercase();
    let words: Vec<&str> = lowered
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| !w.is_empty())
        .collect();
    QUALIFIERS
        .iter()
        .copied()
        .filter(|q| {
            if q.is_ascii() {
                words
                    .iter()
                    .any(|w| w.starts_with(q) && w.len() <= q.len() + 2)
            } else {
                lowered.contains(q)
            }
        })
        .collect()
}

/// Whether `text` says every qualifier the question asks by (see [`QUALIFIERS`]).
fn holds_qualifiers(question: &str, text: &str) -> bool {
    let said = qualifiers(text);
    qualifiers(question).iter().all(|q| said.contains(q))
}

/// Whether a passage is on the question's subject: it holds the question's technical
/// names (see [`technical_names`]), its exact terms (`HTTP/2`, `/etc/fstab`, a port) and
/// its qualifiers ("default", "最长": see [`QUALIFIERS`]). A fact of the answer must rest
/// on such a passage: a true sentence about APT's periodic settings does not answer how
/// APT uses an HTTP proxy.
pub fn on_subject(question: &str, passage: &str) -> bool {
    let normalised = normalise(passage);
    holds_qualifiers(question, passage)
        && technical_names(question)
            .iter()
            .all(|name| normalised.contains(name.as_str()))
        && exact_terms(question)
            .iter()
            .all(|term| holds_exact(&normalised, term))
}

/// Whether an answer sentence tells more than the question it answers: a term, a command,
/// a number or a negation the question does not hold, and, for a question asking for a
/// quantity, a number (see [`gives_what_is_asked`]). A sentence that only restates the
/// question ("MySQL error 1205 rolls back by default") answers nothing — unless the
/// question asks yes or no, where restating it is the answer "yes".
pub fn adds_to(question: &str, sentence: &str) -> bool {
    if asks_yes_or_no(question) {
        return true;
    }
    let body = without_markers(sentence);
    if !gives_what_is_asked(question, &body) {
        return false;
    }
    let asked = content_terms(question);
    let asked_exact = normalise(question);
    let doing = action_terms();
    content_terms(&body)
        .iter()
        .any(|term| !asked.contains(term) && !doing.contains(term))
        || exact_terms(&body)
            .iter()
            .any(|term| !asked_exact.contains(term.as_str()))
        || negates(&body) && !negates(question)
}

/// Whether `text` can answer the kind of question asked: a question asking for a quantity
/// ("how many days", "几天", "多久") is answered only by a text that states one; "after the
/// grace period the soft limit becomes hard" tells more than "how many days is the default
/// grace period?", but not what it asks.
pub fn gives_what_is_asked(question: &str, text: &str) -> bool {
    !asks_for_a_number(question) || holds_a_number(text)
}

/// Whether a question asks yes or no ("Does …?", "Is …?", "…吗？", "是否…").
fn asks_yes_or_no(question: &str) -> bool {
    const AUXILIARIES: &[&str] = &[
        "do", "does", "did", "is", "are", "was", "were", "can", "could", "should", "will", "would",
        "has", "have", "may", "must",
    ];
    let first = question
        .split(|c: char| !c.is_ascii_alphabetic())
        .find(|word| !word.is_empty())
        .unwrap_or_default()
        .to_ascii_lowercase();
    AUXILIARIES.contains(&first.as_str())
        || [
            "吗",
            "是否",
            "是不是",
            "能不能",
            "要不要",
            "会不会",
            "有没有",
        ]
        .iter()
        .any(|marker| question.contains(marker))
}

/// Whether a text says no/not (its content terms leave negation out as a stop word).
fn negates(text: &str) -> bool {
    const NEGATIONS: &[&str] = &["no", "not", "never", "none", "cannot"];
    let lowered = text.to_lowercase();
    lowered
        .split(|c: char| !c.is_alphanumeric() && c != '\'')
        .any(|word| NEGATIONS.contains(&word) || word.ends_with("n't"))
        || ["不", "没", "无", "非"].iter().any(|n| text.contains(n))
}

/// Whether a sentence talks about the passages ("the fields are listed in the passage")
/// instead of stating what they say: it is not an answer.
pub fn about_the_passages(sentence: &str) -> bool {
    let lowered = sentence.to_lowercase();
    lowered
        .split(|c: char| !c.is_ascii_alphabetic())
        .any(|word| word == "passage" || word == "passages")
        || sentence.contains("资料")
}

/// The share of `wanted`'s content terms that `holder` holds; `None` when `wanted` has none.
fn share_held(wanted: &str, holder: &str) -> Option<f64> {
    let wanted = content_terms(wanted);
    if wanted.is_empty() {
        return None;
    }
    let held = content_terms(holder);
    Some(wanted.iter().filter(|t| held.contains(*t)).count() as f64 / wanted.len() as f64)
}

/// The share of `sentence`'s content terms found in `passage` (1.0 when it has none), or 0
/// when the passage lacks one of its `exact` terms (see [`exact_terms`]).
pub fn support(sentence: &str, exact: &[String], passage: &str) -> f64 {
    let normalised = normalise(passage);
    if !exact.iter().all(|term| holds_exact(&normalised, term)) {
        return 0.0;
    }
    share_held(sentence, passage).unwrap_or(1.0)
}

/// Whether a sentence states a fact that must be checked.
pub fn states_a_fact(sentence: &str) -> bool {
    let body = without_markers(sentence);
    content_terms(&body).len() >= FACT_TERMS || !exact_terms(sentence).is_empty() || names(&body)
}

/// Whether a sentence is a bare answer ("dirvish.", "DNSSEC"): a few Latin-script words,
/// not a lead-in to what follows, with a term of its own. Every term of it must be in the
/// passage. A short Chinese sentence ("直接回滚。") is a verdict in the model's words,
/// not a name: it stays a sentence without a fact of its own.
fn names(body: &str) -> bool {
    let trimmed = body.trim();
    trimmed.split_whitespace().count() <= BARE_WORDS
        && !trimmed.chars().any(is_cjk)
        && !trimmed.ends_with([':', '：'])
        && content_terms(trimmed)
            .iter()
            .any(|term| term.chars().any(char::is_alphabetic))
}

/// The verdict on one sentence against the passages it may rest on.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// No fact to check (a lead-in, a list number).
    NoFact,
    /// Supported by these passages (1-based numbers), best first.
    Supported(Vec<usize>),
    /// Not supported by any passage offered.
    Unsupported,
}

/// Checks `sentence` against `passages` (text of passage n at index n-1), preferring the
/// passages it cites; a sentence supported only by a passage it does not cite is supported
/// by that one (its markers are then corrected by the caller).
pub fn check(sentence: &str, passages: &[&str]) -> Verdict {
    let body = without_markers(sentence);
    if !states_a_fact(&body) {
        return Verdict::NoFact;
    }
    let exact = exact_terms(&body);
    let mut supporting: Vec<(usize, f64)> = passages
        .iter()
        .enumerate()
        .filter_map(|(i, passage)| {
            let share = support(&body, &exact, passage);
            let needed = if names(&body) { 1.0 } else { SUPPORT_SHARE };
            (share >= needed).then_some((i + 1, share))
        })
        .collect();
    if supporting.is_empty() {
        return Verdict::Unsupported;
    }
    let cited = super::answer_stream::cited_numbers(sentence, passages.len());
    supporting.sort_by(|a, b| {
        let a_cited = cited.contains(&a.0);
        let b_cited = cited.contains(&b.0);
        b_cited.cmp(&a_cited).then(b.1.total_cmp(&a.1))
    });
    Verdict::Supported(supporting.into_iter().map(|(n, _)| n).collect())
}

/// How well a line answers a question: the share of the question's content terms the line
/// holds (lines of a passage are scored for the extractive answer).
pub fn line_score(question: &str, line: &str) -> f64 {
    share_held(question, line).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DISK: &str = "When a disk is full, run `df -hT` to see usage per filesystem and \
                        `df -i` for inodes. Then find large files with `du -xh / | sort -h`.";

    #[test]
    fn a_paraphrase_of_the_passage_is_supported() {
        let verdict = check(
            "Run `df -hT` to see the usage of each filesystem [1].",
            &[DISK],
        );
        assert_eq!(verdict, Verdict::Supported(vec![1]));
    }

    #[test]
    fn invented_facts_and_commands_are_unsupported() {
        assert_eq!(
            check(
                "Restart the kubelet and clear the docker image cache [1].",
                &[DISK]
            ),
            Verdict::Unsupported
        );
        // The words match but the command is not in the passage.
        assert_eq!(
            check(
                "Run `rm -rf /var/lib` to see usage per filesystem.",
                &[DISK]
            ),
            Verdict::Unsupported
        );
        assert_eq!(
            check("Usage per filesystem above 95% is shown by df.", &[DISK]),
            Verdict::Unsupported
        );
    }

    #[test]
    fn a_quantity_must_appear_with_its_unit() {
        let steps = "Classify the error. Read-only until step 5. Set lock_timeout per session.";
        assert_eq!(
            check("The default lock_timeout is 5 seconds [1].", &[steps]),
            Verdict::Unsupported
        );
        let timeouts = "Set lock_timeout to 5 seconds for migrations.";
        assert_eq!(
            check("Set lock_timeout to 5 seconds [1].", &[timeouts]),
            Verdict::Supported(vec![1])
        );
    }

    #[test]
    fn a_question_asking_for_a_quantity_is_answered_by_a_number() {
        let question = "磁盘配额软限制的默认宽限期是几天？";
        assert!(!adds_to(
            question,
            "宽限期之后，软限制将作为硬限制处理 [1]。"
        ));
        assert!(adds_to(question, "默认宽限期是七天 [1]。"));
        assert!(adds_to(question, "默认宽限期是 7 天 [1]。"));
        let question = "How many days is the default grace period?";
        assert!(!adds_to(
            question,
            "After the grace period the soft limit becomes hard [1]."
        ));
        assert!(adds_to(question, "The grace period is seven days [1]."));
        assert!(gives_what_is_asked(
            "How long may a transaction run before the alert fires?",
            "Alert when the oldest transaction is older than a few minutes [1]."
        ));
        // Not questions of quantity: 几乎 is "almost", 哪几 is "which".
        assert!(gives_what_is_asked(
            "Next-Key 锁由哪几部分组成？",
            "记录锁和前面的间隙"
        ));
        assert!(gives_what_is_asked(
            "为什么几乎所有请求都超时？",
            "上游服务挂了"
        ));
        assert!(gives_what_is_asked(
            "Which port does sshd use?",
            "the one in sshd_config"
        ));
        // A quantity inside a question asking for a way or a name.
        assert!(gives_what_is_asked(
            "How can I see how much disk the systemd journal is using?",
            "Run journalctl --disk-usage"
        ));
        assert!(gives_what_is_asked(
            "怎么查看 systemd 日志占用了多少磁盘？",
            "用 journalctl --disk-usage 查看"
        ));
        assert!(!gives_what_is_asked(
            "最老事务的持续时间超过多久应该告警？",
            "应该告警"
        ));
    }

    #[test]
    fn an_answer_must_tell_more_than_the_question() {
        let question = "After MySQL error 1205, what is rolled back by default?";
        assert!(!adds_to(
            question,
            "MySQL error 1205 rolls back by default [3]."
        ));
        assert!(adds_to(
            question,
            "Only the current statement is rolled back [3]."
        ));
        assert!(adds_to(
            "Does a feature behind a flag need a redeploy?",
            "A feature behind a flag does not need a redeploy [1]."
        ));
        // Restating a yes-or-no question is the answer "yes".
        assert!(adds_to(
            "Does a deadlock abort one transaction?",
            "A deadlock aborts one transaction [1]."
        ));
        assert!(adds_to(
            "Which port does sshd listen on?",
            "sshd listens on port 22 [1]."
        ));
        assert!(adds_to(
            "功能由开关控制，需要重新发布哪个服务？",
            "功能由开关控制，不需要重新发布 [2]。"
        ));
        assert!(!adds_to(
            "Nginx 返回 504 时，默认多长时间后返回？",
            "Nginx 返回 504 时，默认多长时间后返回 [2]。"
        ));
        // A verb of doing is not an answer of its own.
        assert!(!adds_to(
            "How do I write a systemd timer unit that replaces a daily cron job?",
            "Create a systemd timer unit that replaces the daily cron job [1]."
        ));
        assert!(adds_to(
            "How do I write a systemd timer unit that replaces a daily cron job?",
            "Create a unit with OnCalendar=daily [1]."
        ));
    }

    #[test]
    fn a_sentence_about_the_passages_is_not_an_answer() {
        assert!(about_the_passages(
            "The fields of /etc/anacrontab are listed in the passage [1]."
        ));
        assert!(about_the_passages("资料 [1] 中列出了这些字段。"));
        assert!(!about_the_passages(
            "Run `df -i` to see inode use per filesystem [1]."
        ));
    }

    #[test]
    fn names_are_what_a_question_asks_about() {
        assert_eq!(
            named_terms("How do I enable the slow query profiler in MongoDB?"),
            ["mongodb"]
        );
        assert_eq!(
            named_terms("What is Nginx's default client_max_body_size?"),
            ["nginx", "client_max_body_size"]
        );
        assert_eq!(named_terms("用 Argo CD 管理的应用要怎么回滚？"), ["argo"]);
        assert_eq!(named_terms("How are quotas managed on XFS?"), ["xfs"]);
        // Sentence capitals, two-letter abbreviations and what a user pastes about their own
        // system are not.
        assert!(named_terms(
            "Disk on db-7.example.com is 95% full. What does the DB or MB have to do with it?"
        )
        .is_empty());
        assert!(holds_what_is_named(
            "Which port does sshd listen on by default?",
            "By default sshd listens on port 22."
        ));
        assert!(!holds_what_is_named(
            "sshd 默认监听哪个端口？",
            "通过其默认设置，web 服务器监听端口 80。"
        ));
        assert!(!holds_what_is_named(
            "Apache 上怎么启用 HTTP/2？",
            "Apache 2 的默认配置启用基于名称的虚拟主机。"
        ));
        assert!(!holds_what_is_named(
            "What is PostgreSQL's default lock_timeout?",
            "innodb_lock_wait_timeout defaults to 50 seconds in MySQL."
        ));
        assert!(!holds_what_is_named(
            "What is the default grace period for soft quota limits?",
            "With edquota -t you can define the grace period within which a soft limit may be exceeded."
        ));
        assert!(holds_what_is_named(
            "After MySQL error 1205, what is rolled back by default?",
            "After MySQL error 1205 only the statement is rolled back by default."
        ));
        assert!(!on_subject(
            "磁盘配额软限制的默认宽限期是几天？",
            "使用命令 edquota -t，可以设定超过软限制的宽限期时长。"
        ));
        assert!(on_subject(
            "What lease time is used when default-lease-time is not set?",
            "default-lease-time 600; max-lease-time 7200;"
        ));
        assert!(on_subject(
            "In Falcot Corp's setup, how long are daily backups kept?",
            "Daily backups are kept for 15 days."
        ));
        assert!(!on_subject(
            "How do I make APT download through an HTTP proxy?",
            "APT::Periodic::AutocleanInterval sets how often APT cleans its cache."
        ));
        assert!(!on_subject(
            "Which /etc/fstab option delays a mount?",
            "The noexec option forbids running programs from a mount."
        ));
        assert!(holds_names(
            "Which Docker command shows disk use?",
            "Run `docker system df` to see what images take."
        ));
        assert!(!holds_names(
            "How do I roll back an app in Argo CD?",
            "Roll back with kubectl rollout undo."
        ));
    }

    #[test]
    fn a_sentence_is_credited_to_the_passage_that_supports_it() {
        let other = "Deadlocks are resolved by the database aborting one transaction.";
        let verdict = check("Use `df -i` for inodes [1].", &[other, DISK]);
        assert_eq!(verdict, Verdict::Supported(vec![2]));
        assert_eq!(
            with_markers("Use `df -i` for inodes [1].", &[2]),
            "Use `df -i` for inodes [2]."
        );
    }

    #[test]
    fn lead_ins_state_no_fact() {
        assert_eq!(check("Here is what to do:", &[DISK]), Verdict::NoFact);
        assert_eq!(check("1.", &[DISK]), Verdict::NoFact);
    }

    #[test]
    fn a_chinese_quantity_must_appear_in_the_passage() {
        let passage = "软限制超出后，用户有一段宽限期，可以用 edquota -t 设置。用户名由字母组成。";
        assert_eq!(
            check("软限制的默认宽限期是 7 天 [1]。", &[passage]),
            Verdict::Unsupported
        );
        let passage = "软限制超出后，默认宽限期为7天，可以用 edquota -t 修改。";
        assert_eq!(
            check("软限制的默认宽限期是 7 天 [1]。", &[passage]),
            Verdict::Supported(vec![1])
        );
    }

    #[test]
    fn a_code_span_is_compared_without_a_trailing_escape() {
        let passage = "Run `SHOW ENGINE INNODB STATUS` and read LATEST DETECTED DEADLOCK.";
        assert_eq!(
            check(
                "用 `SHOW ENGINE INNODB STATUS\\` 查看最近的死锁 [1]。",
                &[passage]
            ),
            Verdict::Supported(vec![1])
        );
    }

    #[test]
    fn a_bare_answer_is_a_fact_the_passage_must_hold() {
        let passage = "Backups are organised by dirvish into vaults of hard links.";
        assert_eq!(
            check("dirvish [1].", &[passage]),
            Verdict::Supported(vec![1])
        );
        assert_eq!(check("restic [1].", &[passage]), Verdict::Unsupported);
        assert_eq!(
            check("dirvish vaults restic.", &[passage]),
            Verdict::Unsupported
        );
        assert_eq!(check("直接回滚。", &[passage]), Verdict::NoFact);
    }

    #[test]
    fn chinese_is_compared_by_character_bigrams() {
        let passage = "磁盘满了时，先用 df -h 查看各文件系统的使用率，再用 du 找出大文件。";
        assert!(matches!(
            check("先用 df -h 查看文件系统使用率 [1]。", &[passage]),
            Verdict::Supported(_)
        ));
        assert_eq!(
            check("应该立即重启数据库服务器并扩容内存 [1]。", &[passage]),
            Verdict::Unsupported
        );
    }

    #[test]
    fn sentences_are_released_whole_with_their_markers() {
        let mut split = Sentences::default();
        assert!(split.push("Run df -h").is_empty());
        assert!(split.push(" first.").is_empty());
        assert!(split.push(" [1").is_empty());
        assert_eq!(
            split.push("] Then du."),
            vec!["Run df -h first. [1] ".to_owned()]
        );
        assert_eq!(
            split.push(" 3.5 GB free。next"),
            vec!["Then du. ".to_owned(), "3.5 GB free。".to_owned()]
        );
        assert_eq!(split.rest(), "next");
    }

    #[test]
    fn markers_are_replaced_before_the_closing_punctuation() {
        assert_eq!(
            with_markers("Check inodes.", &[1, 2]),
            "Check inodes [1][2]."
        );
        assert_eq!(with_markers("检查 inode。[3]", &[1]), "检查 inode [1]。");
        assert_eq!(without_markers("a [1] b [x] c[2]"), "a  b [x] c");
    }

    #[test]
    fn the_line_that_answers_scores_highest() {
        let q = "Which command shows inode usage?";
        assert!(line_score(q, "Run df -i for inode usage.") > line_score(q, "Disks fill up."));
    }
}
