//! The answer call's prompt: the instructions with their worked example (English and
//! Chinese), the numbered passage excerpts with the question, and the JSON schema the
//! model's reply is constrained to.

use serde_json::{json, Value};

use super::passages::excerpt;
use super::{localized, Language, Passage};
use crate::engine::{ChatMessage, Role};

/// Characters of a passage the model sees: the lines around its best match for the
/// question (a passage is a chunk of up to ~1,000 characters).
pub(super) const EXCERPT_CHARS: usize = 600;

/// Longest answer the model may write, in characters.
pub(super) const ANSWER_CHARS: usize = 600;

/// The instructions of an answer call, with one worked example (a fixed prefix: the
/// engine reuses its cache from call to call). A second example answering NOT_FOUND made
/// the default model abstain on answerable Chinese questions (false abstention 0.09 → 0.14).
pub(super) const INSTRUCTIONS: [&str; 2] = [
    "You are Warden, an assistant for operations engineers. Answer the question from the \
     numbered passages only. Reply with the specific fact that answers the question: the \
     exact command, setting, number, name or step the passages give, copied as written, in \
     one to three short sentences. Do not describe the passages or point to other \
     documents. End each sentence with the number of the passage it comes from, like [1]. \
     If the passages do not answer the question, the answer is just NOT_FOUND.\n\n\
     Example.\nPassages:\n[1] Port conflicts\nIf the service cannot bind, find the owner of \
     the port with `ss -ltnp | grep :8080` and stop it. The service retries every 5 s.\n\n\
     Question: How do I see which process holds port 8080?\n\
     Reply: {\"answer\":\"Run `ss -ltnp | grep :8080` to find the process that holds the port [1].\",\"citations\":[1]}",
    "你是 Warden，运维工程师的助手。只根据编号的资料回答问题。直接给出回答问题的具体内容：资料中的\
     命令、配置、数字、名称或步骤要照原文写出，用一到三句简短的中文。不要描述资料本身，也不要让人去看\
     别的文档。每句话末尾标出所依据资料的编号，如 [1]。如果资料没有回答这个问题，answer 只写 NOT_FOUND。\n\n\
     示例。\n资料：\n[1] 端口冲突\n服务无法绑定端口时，用 `ss -ltnp | grep :8080` 找到占用端口的进程并停止它。\
     服务每 5 秒重试一次。\n\n问题：怎么查看哪个进程占用了 8080 端口？\n\
     回复：{\"answer\":\"用 `ss -ltnp | grep :8080` 找到占用端口的进程 [1]。\",\"citations\":[1]}",
];

/// What an answer call's prompt is made of.
pub struct AnswerPrompt<'a> {
    pub language: Language,
    /// The masked question.
    pub question: &'a str,
    pub history: &'a [ChatMessage],
    /// Structured memory, framed as data.
    pub memory: Option<&'a str>,
    pub passages: &'a [Passage],
}

/// The messages of an answer call: the instructions (and memory), the earlier turns, then
/// the numbered passages (each an excerpt around its best match) and the question.
pub fn answer_messages(prompt: &AnswerPrompt<'_>) -> Vec<ChatMessage> {
    let mut system = localized(prompt.language, INSTRUCTIONS).to_owned();
    if let Some(memory) = prompt.memory {
        system.push_str("\n\n");
        system.push_str(memory);
    }
    let mut messages = vec![ChatMessage::new(Role::System, system)];
    messages.extend(prompt.history.iter().cloned());
    let mut text = String::from(match prompt.language {
        Language::English => "Passages:\n",
        Language::Chinese => "资料：\n",
    });
    for (i, passage) in prompt.passages.iter().enumerate() {
        let excerpt = excerpt(prompt.question, &passage.text, EXCERPT_CHARS);
        text.push_str(&format!("[{}] {}\n\n", i + 1, excerpt.trim()));
    }
    text.push_str(match prompt.language {
        Language::English => "Question: ",
        Language::Chinese => "问题：",
    });
    text.push_str(prompt.question);
    messages.push(ChatMessage::new(Role::User, text));
    messages
}

/// The JSON schema of an answer call with `passages` numbered passages.
pub fn answer_schema(passages: usize, can_search: bool) -> Value {
    let mut choices = vec![json!({
        "type": "object",
        "properties": {
            "answer": {"type": "string", "minLength": 1, "maxLength": ANSWER_CHARS},
            "citations": {
                "type": "array",
                "items": {"enum": (1..=passages.max(1)).collect::<Vec<usize>>()},
                "minItems": 1,
                "maxItems": 3
            }
        },
        "required": ["answer", "citations"],
        "additionalProperties": false
    })];
    if can_search {
        choices.push(json!({
            "type": "object",
            "properties": {"search": {"type": "string", "minLength": 1, "maxLength": 120}},
            "required": ["search"],
            "additionalProperties": false
        }));
    }
    json!({"anyOf": choices})
}
