//! Unit tests of `grounded`.
use super::*;

fn passage(text: &str) -> Passage {
    Passage {
        chunk_id: 1,
        kb: "sample".into(),
        path: "en/disk-full.md".into(),
        title: Some("Disk full".into()),
        heading_path: vec!["Disk full".into(), "First checks".into()],
        location: None,
        text: text.into(),
        relevant: true,
    }
}

/// The gate over `texts`, each on the question's subject as the answer call decides.
fn check(
    question: &str,
    sentence: &str,
    texts: &[&str],
    facts: &mut Facts,
) -> Result<String, String> {
    let on_subject: Vec<bool> = texts
        .iter()
        .map(|text| faithfulness::on_subject(question, text))
        .collect();
    let cited = Cited {
        texts,
        on_subject: &on_subject,
    };
    gate(question, sentence, &cited, facts)
}

#[test]
fn a_fact_must_rest_on_a_passage_that_names_what_the_question_names() {
    let texts = ["APT::Periodic::AutocleanInterval sets how often APT cleans its package cache."];
    let mut facts = Facts::default();
    let sentence = "Set `APT::Periodic::AutocleanInterval` to 7 to clean the cache [1].";
    assert!(check(
        "How often does APT clean its package cache?",
        sentence,
        &texts,
        &mut facts
    )
    .is_ok());
    let shown = check(
        "How do I make APT download packages through an HTTP proxy?",
        sentence,
        &texts,
        &mut facts,
    );
    assert!(shown.is_err_and(|why| why.contains("do not name")));
}

#[test]
fn the_gate_shows_supported_sentences_and_corrects_their_markers() {
    let texts = [
        "Run `df -hT` to see usage per filesystem.",
        "Deadlocks abort one transaction.",
    ];
    let question = "How do I see disk usage per filesystem?";
    let mut facts = Facts::default();
    assert_eq!(
        check(
            question,
            "Run `df -hT` to see usage per filesystem [2]. ",
            &texts,
            &mut facts
        ),
        Ok("Run `df -hT` to see usage per filesystem [1]. ".into())
    );
    assert!(check(
        question,
        "Reboot the kubelet node immediately [1].",
        &texts,
        &mut facts
    )
    .is_err());
    assert_eq!(facts.stated, 1);
    assert!(facts.answer());
}

#[test]
fn restating_the_question_or_describing_the_passages_is_no_answer() {
    let texts = ["Deadlocks abort one transaction; the application retries it."];
    let mut facts = Facts::default();
    let shown = check(
        "What happens to one transaction in a deadlock?",
        "In a deadlock one transaction happens [1].",
        &texts,
        &mut facts,
    );
    assert!(shown.is_ok());
    assert_eq!(facts.stated, 1);
    assert!(!facts.answer());
    assert_eq!(facts.why_not("x"), "the answer only restated the question");
    let mut facts = Facts::default();
    assert!(check(
        "What do deadlocks abort?",
        "The passage describes what deadlocks abort [1].",
        &texts,
        &mut facts
    )
    .is_err());
}

#[test]
fn relevance_needs_the_questions_terms() {
    let disk =
        passage("When a disk is full, run df -hT first and look for deleted files held open.");
    assert!(is_relevant(
        "What should I check first when a disk is full?",
        &disk
    ));
    assert!(!is_relevant(
        "What is the default Redis maxmemory eviction policy?",
        &disk
    ));
}

#[test]
fn the_extractive_answer_quotes_the_best_lines() {
    let disk = passage("# Disk full\nDisks fill up over time.\nRun `lsof +L1` to find deleted files still held open.");
    let lines = best_lines("Which command finds deleted files held open?", &[disk]);
    assert_eq!(
        lines[0],
        (
            1,
            "Run `lsof +L1` to find deleted files still held open.".to_owned()
        )
    );
}

#[test]
fn a_quoted_line_holds_what_the_question_names() {
    let apache =
        passage("By default the web server listens on port 80.\nsshd reads /etc/ssh/sshd_config.");
    let lines = best_lines(
        "Which port does the web server sshd listen on by default?",
        &[apache],
    );
    assert!(lines.is_empty(), "{lines:?}");
}

#[test]
fn the_schema_offers_a_search_only_while_one_is_left() {
    assert_eq!(
        answer_schema(2, true)["anyOf"].as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(
        answer_schema(2, false)["anyOf"].as_array().map(Vec::len),
        Some(1)
    );
}

#[test]
fn an_answer_is_asked_again_of_the_passage_that_names_the_subject() {
    let question = "How do I purge the MySQL binlog when it fills the disk?";
    let passages = [
        passage("MySQL lock waits show in SHOW PROCESSLIST; the disk is not involved."),
        passage("When the MySQL binlog fills the disk, purge it with PURGE BINARY LOGS."),
        passage("Nginx returns 502 when the upstream is down."),
    ];
    assert_eq!(answering_alone(question, &passages), Some(1));
    // No passage names the binlog: nothing to narrow to.
    assert_eq!(
        answering_alone(question, &[passages[0].clone(), passages[2].clone()]),
        None
    );
}
