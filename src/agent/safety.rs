//! Input safety: what every chat message goes through before any model sees it. `screen`
//! removes control and invisible formatting characters, refuses a message over the length
//! limit (an error, never a silent cut), masks credentials and personal data as
//! `[masked:KIND]`, and records phrases that look like prompt injection. Flags are
//! evidence for the route record and the audit log, never a reason to grant anything.
//! Pure: no I/O, no clock, no configuration lookup.
//!
//! What is masked, and the trade-offs chosen:
//! - `private_key`: a whole PEM `-----BEGIN … PRIVATE KEY-----` block (to the end of the
//!   message when its END line is missing).
//! - `api_key`: token-shaped keys: `sk-…`, `ghp_…`/`gho_…`/`ghu_…`/`ghs_…`/`ghr_…`,
//!   `github_pat_…`, `glpat-…`, `xox?-…`, `AIza…`, `AKIA…`/`ASIA…`.
//! - `token`: `Bearer X` / `Basic X`, and the value after a key-like word (`api_key`,
//!   `secret`, `token`, `access_key`, `client_secret`, `credential`, `密钥`, `令牌` …)
//!   followed by `:`/`=`, when that value is 16+ characters of hex/base64/URL-safe text
//!   holding both a digit and a letter (so `secret_name: prod-database` stays).
//! - `password`: the ASCII value after `password`/`passwd`/`pwd`/`passphrase`/`密码`/`口令`
//!   followed by `:`, `=`, `：`, `是` or `为`, after `--password `, and the password in
//!   `scheme://user:PASSWORD@host`. The key word stays, so the model knows one was given.
//! - Secrets in commands, logs and SQL (the shapes live diagnostics read): `password` for
//!   SQL `PASSWORD '…'` and `IDENTIFIED BY '…'`, `mysql -pSECRET`, Redis `AUTH SECRET`,
//!   `*_PASS=`/`*_PASSWD=` variables and `curl -u user:SECRET`; `token` for the value of a
//!   `Cookie:`/`Set-Cookie:` header.
//! - `card_number`: 13–19 digits beginning 2–6 (spaces or `-` between groups allowed)
//!   that pass the Luhn check.
//! - `email`: `local@domain.tld` (the top-level domain is letters, so `root@10.0.0.5` stays).
//! - `phone`: Chinese mobiles `1[3-9]` + 9 digits (with `+86`/`0086` and space or `-`
//!   groups allowed), Chinese landlines `0AA(A)-NNNNNNN(N)`, `+CC …` international numbers
//!   with 8–15 digits, and `NNN-NNN-NNNN`. A plain 11-digit number starting with 13–19 is
//!   read as a mobile number; longer digit runs, and numbers joined to letters, `_` or
//!   other digits by `.`, `,`, `:`, `/` or `-`, are not.
//! - `national_id`: 18-character Chinese resident id numbers with a valid birth date and
//!   checksum (last character a digit or `X`); a wrong checksum is not masked.
//! - `employee_id`: `EMP-12345`/`EMP_12345`/`EMP12345` (4–8 digits), a capital `E` and
//!   exactly six digits (`E123456`; `E0308` stays), and the value after `工号`,
//!   `员工编号`, `employee id`/`employee no.`/`staff id`.
//!
//! Identifiers such as `incident_42` or `incident_db-01`, ordinary numbers, timestamps, IP
//! addresses, ports, hashes and UUIDs are left alone: every pattern must stand on its own
//! (no ASCII letter, digit or `_` touching either end).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::LazyLock;

use regex::Regex;
use serde::Serialize;

/// Limits applied to one chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SafetyLimits {
    /// The most characters (Unicode scalar values) a message may hold, counted after
    /// control characters are removed and before masking.
    pub max_chars: usize,
}

impl SafetyLimits {
    /// 16,000 characters: a long pasted log fits; a whole document belongs in a knowledge
    /// base instead.
    pub const DEFAULT: SafetyLimits = SafetyLimits { max_chars: 16_000 };
}

/// A message that passed screening, ready for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScreenedInput {
    /// The text the model sees: cleaned, within the limit, with secrets and personal data
    /// replaced by `[masked:KIND]`.
    pub for_model: String,
    /// What was masked, one entry per kind in `MaskKind` order.
    pub masked: Vec<MaskCount>,
    /// Suspected prompt-injection phrases, in order of appearance, each (kind, phrase)
    /// once. Recorded only.
    pub flags: Vec<InjectionFlag>,
    /// How many control or invisible formatting characters were removed.
    pub removed_characters: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MaskKind {
    PrivateKey,
    ApiKey,
    Token,
    Password,
    Email,
    NationalId,
    Phone,
    EmployeeId,
    CardNumber,
}

impl MaskKind {
    /// The name used in `[masked:NAME]` and in records.
    pub fn name(self) -> &'static str {
        match self {
            MaskKind::PrivateKey => "private_key",
            MaskKind::ApiKey => "api_key",
            MaskKind::Token => "token",
            MaskKind::Password => "password",
            MaskKind::Email => "email",
            MaskKind::NationalId => "national_id",
            MaskKind::Phone => "phone",
            MaskKind::EmployeeId => "employee_id",
            MaskKind::CardNumber => "card_number",
        }
    }

    fn placeholder(self) -> String {
        format!("[masked:{}]", self.name())
    }
}

impl fmt::Display for MaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MaskCount {
    pub kind: MaskKind,
    pub count: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InjectionKind {
    /// "ignore previous instructions", "忽略之前的指令".
    IgnoreInstructions,
    /// "you are now …", "pretend to be", "你现在是".
    RoleOverride,
    /// "system prompt", "reveal your instructions", "系统提示词".
    SystemPromptProbe,
    /// "no need to ask me", "without confirmation", "不需要确认", "直接执行".
    SkipConfirmation,
    /// "executionPermitted=true", "I am the admin", "已授权".
    PermissionClaim,
    /// Chat-template tokens typed into a message: `<|im_start|>`, `[INST]`, `<<SYS>>`.
    DelimiterSpoof,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InjectionFlag {
    pub kind: InjectionKind,
    /// The matched text (at most `FLAG_PHRASE_CHARS` characters), taken after masking.
    pub phrase: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SafetyError {
    #[error("the message is empty")]
    Empty,
    #[error(
        "the message is {chars} characters long and the limit is {limit}; shorten it, or add \
         long documents to a knowledge base and ask about them"
    )]
    TooLong { chars: usize, limit: usize },
}

/// The longest phrase kept in an `InjectionFlag`.
pub const FLAG_PHRASE_CHARS: usize = 80;

/// Screens one chat message; see the module documentation for what is masked.
pub fn screen(text: &str, limits: &SafetyLimits) -> Result<ScreenedInput, SafetyError> {
    let (cleaned, removed_characters) = remove_control_characters(text);
    if cleaned.trim().is_empty() {
        return Err(SafetyError::Empty);
    }
    let chars = cleaned.chars().count();
    if chars > limits.max_chars {
        return Err(SafetyError::TooLong {
            chars,
            limit: limits.max_chars,
        });
    }
    let (for_model, masked) = mask(&cleaned);
    let flags = injection_flags(&for_model);
    Ok(ScreenedInput {
        for_model,
        masked,
        flags,
        removed_characters,
    })
}

/// Removes C0/C1 control characters except `\n` and `\t` (`\r\n` and a lone `\r` become
/// `\n`), and the invisible characters used to hide text from a reader: zero-width space
/// and word joiner, byte-order mark, bidirectional embeddings/overrides/isolates, and
/// Unicode tag characters. Zero-width (non-)joiners stay: emoji and some scripts need them.
fn remove_control_characters(text: &str) -> (String, usize) {
    let mut out = String::with_capacity(text.len());
    let mut removed = 0;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\t' => out.push(c),
            '\r' => {
                if chars.peek() != Some(&'\n') {
                    out.push('\n');
                }
            }
            '\u{200B}' | '\u{2060}' | '\u{FEFF}' | '\u{202A}'..='\u{202E}' => removed += 1,
            '\u{2066}'..='\u{2069}' | '\u{E0000}'..='\u{E007F}' => removed += 1,
            c if c.is_control() => removed += 1,
            c => out.push(c),
        }
    }
    (out, removed)
}

/// Applies every masking rule in order (keys and passwords before the personal-data
/// patterns, so a secret is named for what it is), returning the text and the counts.
/// `text` with secrets and personal data replaced by `[masked:KIND]`, and what was masked:
/// what a message is stored as, so that no later turn's history, memory or audit row can
/// carry what the user pasted.
pub fn mask_for_storage(text: &str) -> (String, Vec<MaskCount>) {
    mask(text)
}

fn mask(text: &str) -> (String, Vec<MaskCount>) {
    let mut counts: BTreeMap<MaskKind, usize> = BTreeMap::new();
    let mut text = text.to_string();
    for rule in MASK_RULES.iter() {
        let (masked, count) = apply(&text, rule);
        if count > 0 {
            *counts.entry(rule.kind).or_default() += count;
            text = masked;
        }
    }
    let counts = counts
        .into_iter()
        .map(|(kind, count)| MaskCount { kind, count })
        .collect();
    (text, counts)
}

/// How a match becomes masked text.
#[derive(Clone, Copy)]
enum Replace {
    /// The whole match becomes the placeholder.
    Whole,
    /// Capture groups 1 and 2 (a key word and its separator) stay; group 3 is masked.
    AfterKey,
}

/// What a candidate match must also satisfy (checks the regex crate cannot express).
#[derive(Clone, Copy)]
enum Check {
    /// No ASCII letter, digit or `_` touches the masked part.
    Standalone,
    /// Standalone, and not glued to another number by `.`, `,`, `:`, `/` or `-`.
    StandaloneNumber,
    /// Standalone, 8–15 digits in all.
    InternationalPhone,
    /// Standalone, with a valid resident-id checksum.
    ValidNationalId,
    /// The value is 16+ characters holding a digit and a letter.
    SecretLooking,
    /// The value is not already a placeholder.
    NotMasked,
    /// Not a placeholder, and not a plain word: 6+ characters holding a digit or a symbol
    /// ("the password is Hunter2-x", not "the password is expired").
    CredentialLooking,
    /// Standalone, and its digits pass the Luhn check (payment card numbers).
    Luhn,
}

struct MaskRule {
    kind: MaskKind,
    regex: Regex,
    replace: Replace,
    check: Check,
}

fn apply(text: &str, rule: &MaskRule) -> (String, usize) {
    let mut out = String::with_capacity(text.len());
    let (mut last, mut count) = (0, 0);
    for caps in rule.regex.captures_iter(text) {
        let Some(whole) = caps.get(0) else { continue };
        let target = match rule.replace {
            Replace::Whole => Some(whole),
            Replace::AfterKey => caps.get(3),
        };
        let Some(target) = target else { continue };
        if !passes(rule.check, text, target.start(), target.end()) {
            continue;
        }
        out.push_str(&text[last..target.start()]);
        out.push_str(&rule.kind.placeholder());
        last = target.end();
        count += 1;
    }
    out.push_str(&text[last..]);
    (out, count)
}

fn passes(check: Check, text: &str, start: usize, end: usize) -> bool {
    let value = &text[start..end];
    match check {
        Check::Standalone => standalone(text, start, end),
        Check::StandaloneNumber => {
            standalone(text, start, end) && !glued_to_number(text, start, end)
        }
        Check::InternationalPhone => {
            let digits = value.chars().filter(char::is_ascii_digit).count();
            standalone(text, start, end)
                && !glued_to_number(text, start, end)
                && (8..=15).contains(&digits)
        }
        Check::ValidNationalId => standalone(text, start, end) && national_id_checksum_ok(value),
        Check::SecretLooking => {
            value.chars().count() >= 16
                && value.chars().any(|c| c.is_ascii_digit())
                && value.chars().any(|c| c.is_ascii_alphabetic())
                && standalone(text, start, end)
        }
        Check::NotMasked => !value.starts_with("[masked:"),
        Check::Luhn => {
            let digits: Vec<u32> = value.chars().filter_map(|c| c.to_digit(10)).collect();
            // Card numbers begin 2–6 (Mastercard 2/5, Visa 4, Amex 3, Discover and
            // UnionPay 6); other long numbers (orders, invoices, timestamps) mostly do not.
            (13..=19).contains(&digits.len())
                && (2..=6).contains(&digits[0])
                && standalone(text, start, end)
                && !glued_to_number(text, start, end)
                && luhn_ok(&digits)
        }
        Check::CredentialLooking => {
            // Sentence punctuation after a plain word does not make it a credential.
            let word = value.trim_end_matches(['.', ',', ';', ':', '!', '?', ')']);
            !value.starts_with("[masked:")
                && value.chars().count() >= 6
                && word.chars().any(|c| !c.is_alphabetic())
        }
    }
}

/// The Luhn checksum of payment card numbers.
fn luhn_ok(digits: &[u32]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| match (i % 2, d * 2) {
            (1, doubled) if doubled > 9 => doubled - 9,
            (1, doubled) => doubled,
            _ => d,
        })
        .sum();
    sum % 10 == 0
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn standalone(text: &str, start: usize, end: usize) -> bool {
    let before = text[..start].chars().next_back();
    let after = text[end..].chars().next();
    !before.is_some_and(is_word_char) && !after.is_some_and(is_word_char)
}

/// Whether the span continues a larger number or address: `1.138…`, `…678:80`, `2024-…`.
fn glued_to_number(text: &str, start: usize, end: usize) -> bool {
    let joiner = |c: char| matches!(c, '.' | ',' | ':' | '/' | '-');
    let mut before = text[..start].chars().rev();
    let mut after = text[end..].chars();
    let glued_before = before.next().is_some_and(joiner)
        && before.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let glued_after =
        after.next().is_some_and(joiner) && after.next().is_some_and(|c| c.is_ascii_alphanumeric());
    glued_before || glued_after
}

/// GB 11643: weights 2^(17-i) mod 11; the check character is "10X98765432"[sum mod 11].
fn national_id_checksum_ok(id: &str) -> bool {
    const WEIGHTS: [u32; 17] = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];
    const CHECK: &[u8; 11] = b"10X98765432";
    let bytes = id.as_bytes();
    if bytes.len() != 18 {
        return false;
    }
    let mut sum = 0;
    for (byte, weight) in bytes.iter().zip(WEIGHTS) {
        if !byte.is_ascii_digit() {
            return false;
        }
        sum += u32::from(byte - b'0') * weight;
    }
    let expected = CHECK[(sum % 11) as usize];
    bytes[17].to_ascii_uppercase() == expected
}

/// A pattern written in this file; a typo is caught by every test that calls `screen`.
fn pattern(source: &str) -> Regex {
    Regex::new(source).unwrap_or_else(|e| panic!("safety pattern {source:?}: {e}"))
}

/// Password values: a quoted string, or a run of printable ASCII without spaces, quotes,
/// `&` or `;` (ASCII only, so `密码：请联系管理员` is prose, not a password).
const PASSWORD_VALUE: &str = r#"("[^"\n]+"|'[^'\n]+'|[!#-%(-:<-~]+)"#;

static MASK_RULES: LazyLock<Vec<MaskRule>> = LazyLock::new(|| {
    let rule = |kind, source: &str, replace, check| MaskRule {
        kind,
        regex: pattern(source),
        replace,
        check,
    };
    use Check::*;
    use MaskKind::*;
    use Replace::*;
    vec![
        rule(
            PrivateKey,
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\z)",
            Whole,
            NotMasked,
        ),
        rule(
            ApiKey,
            concat!(
                r"sk-[A-Za-z0-9_-]{20,}|(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}",
                r"|github_pat_[A-Za-z0-9_]{30,}|glpat-[A-Za-z0-9_-]{20,}",
                r"|xox[abprs]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35}|(?:AKIA|ASIA)[0-9A-Z]{16}",
            ),
            Whole,
            Standalone,
        ),
        rule(
            Token,
            r"(?i)(\b(?:bearer|basic))([ \t]+)([A-Za-z0-9._~+/-]{16,}=*)",
            AfterKey,
            SecretLooking,
        ),
        rule(
            Token,
            concat!(
                r#"(?i)([A-Za-z0-9_.-]*(?:api[_-]?key|apikey|secret|token|access[_-]?key"#,
                r#"|client[_-]?secret|private[_-]?key|credentials?)["']?|密钥|秘钥|令牌)"#,
                r#"([ \t]*[:=：][ \t]*["']?)([A-Za-z0-9+/=_.-]+)"#,
            ),
            AfterKey,
            SecretLooking,
        ),
        rule(
            Password,
            r"(?i)(\b[a-z][a-z0-9+.-]*://[^\s:/@]+:)()([^\s@/]+)@",
            AfterKey,
            NotMasked,
        ),
        rule(
            Password,
            &format!(
                r#"(?i)((?:[A-Za-z0-9_.-]*(?:password|passwd|passphrase|pwd)["']?|密码|口令|密碼))([ \t]*(?:[:=：]|是|为)[ \t]*){PASSWORD_VALUE}"#
            ),
            AfterKey,
            NotMasked,
        ),
        rule(
            Password,
            &format!(
                r"(?i)(\b(?:password|passwd|passphrase|pwd)\b)([ \t]+(?:is|was)[ \t]+){PASSWORD_VALUE}"
            ),
            AfterKey,
            CredentialLooking,
        ),
        rule(
            Password,
            &format!(r"(?i)(--(?:password|passwd|pass))([ \t]+){PASSWORD_VALUE}"),
            AfterKey,
            NotMasked,
        ),
        rule(
            Password,
            &format!(
                r"(?i)(\b(?:password|identified[ \t]+by))([ \t]+)('[^'\n]*'|\x22[^\x22\n]*\x22)"
            ),
            AfterKey,
            NotMasked,
        ),
        rule(
            Password,
            r"(\bmysql(?:dump|admin)?\b[^\n]*?[ \t]-p)()([^\s'\x22-][^\s]*)",
            AfterKey,
            NotMasked,
        ),
        rule(
            Password,
            r"(?i)(\bAUTH)([ \t]+)([!-~]{6,})",
            AfterKey,
            CredentialLooking,
        ),
        rule(
            Password,
            &format!(r"(?i)(\b[A-Za-z0-9_]*_PASS(?:WD)?)([ \t]*[:=][ \t]*){PASSWORD_VALUE}"),
            AfterKey,
            NotMasked,
        ),
        rule(
            Password,
            r"(\bcurl\b[^\n]*?[ \t](?:-u|--user)[ \t]+['\x22]?[^\s:'\x22]+:)()([^\s'\x22]+)",
            AfterKey,
            NotMasked,
        ),
        rule(
            Token,
            r"(?i)(\b(?:set-)?cookie)([ \t]*:[ \t]*)([^\n]+)",
            AfterKey,
            NotMasked,
        ),
        rule(
            CardNumber,
            r"[0-9]{4}(?:[ -]?[0-9]{3,4}){2,3}[0-9]{0,3}",
            Whole,
            Luhn,
        ),
        rule(
            Email,
            r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}",
            Whole,
            Standalone,
        ),
        rule(
            NationalId,
            r"[1-9][0-9]{5}(?:18|19|20)[0-9]{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12][0-9]|3[01])[0-9]{3}[0-9Xx]",
            Whole,
            ValidNationalId,
        ),
        rule(
            Phone,
            r"\+[0-9]{1,3}(?:[ .-]?\(?[0-9]{1,4}\)?){2,6}",
            Whole,
            InternationalPhone,
        ),
        rule(
            Phone,
            r"(?:(?:\+|00)86[ -]?)?1[3-9][0-9](?:[0-9]{8}|[ -][0-9]{4}[ -][0-9]{4})",
            Whole,
            StandaloneNumber,
        ),
        rule(
            Phone,
            r"0[1-9][0-9]{1,2}-[2-9][0-9]{6,7}|\([0-9]{3}\) ?[0-9]{3}-[0-9]{4}|[0-9]{3}-[0-9]{3}-[0-9]{4}",
            Whole,
            StandaloneNumber,
        ),
        rule(
            EmployeeId,
            r"(?i)(工号|员工编号|员工号|\bemployee[ _-]?(?:id|no\.?|number|#)|\bstaff[ _-]?(?:id|no\.?))([ \t]*[:：#=]?[ \t]*)([A-Za-z]{0,4}[-_]?[0-9]{3,10})",
            AfterKey,
            Standalone,
        ),
        rule(
            EmployeeId,
            r"(?i:EMP)[-_]?[0-9]{4,8}|E[0-9]{6}",
            Whole,
            Standalone,
        ),
    ]
});

/// One regex per injection kind; phrases are matched case-insensitively with any run of
/// whitespace between words.
static INJECTION_PATTERNS: LazyLock<Vec<(InjectionKind, Regex)>> = LazyLock::new(|| {
    use InjectionKind::*;
    let table: [(InjectionKind, &[&str]); 6] = [
        (
            IgnoreInstructions,
            &[
                r"\b(?:ignore|disregard|forget|override)\s+(?:all\s+|any\s+|the\s+|of\s+)*(?:previous|prior|above|earlier|preceding|your|system|safety)\s+(?:instructions?|prompts?|rules|directions|messages|guidelines|context)",
                r"\bforget\s+everything\b",
                r"(?:忽略|无视|忘记|忘掉|不要理会)(?:你)?(?:之前|以上|上面|前面|先前|此前|所有|全部)(?:的|所有的?|全部的?)?(?:指令|指示|提示|规则|要求|设定|约束)",
            ],
        ),
        (
            RoleOverride,
            &[
                r"\byou\s+are\s+now\b",
                r"\bfrom\s+now\s+on,?\s+you\s+(?:are|will|must)\b",
                r"\bpretend\s+(?:to\s+be|you\s+are)\b",
                r"\bact\s+as\s+(?:an?\s+)?(?:unrestricted|unfiltered|admin|administrator|root|developer|dan|jailbroken)\b",
                r"\b(?:developer|dan|god)\s+mode\b",
                r"\bjailbreak",
                r"你现在是|从现在(?:开始|起)[，,]?\s*你(?:是|将|要|必须)|假装你是|扮演(?:一个)?(?:管理员|黑客|没有限制)|开发者模式",
            ],
        ),
        (
            SystemPromptProbe,
            &[
                r"\bsystem\s+(?:prompt|message|instructions?)\b",
                r"\b(?:reveal|show|print|repeat|output|tell)\s+(?:me\s+)?(?:your|the)\s+(?:hidden\s+|initial\s+|original\s+)?(?:instructions|prompt|rules)\b",
                r"系统提示词?|系统指令|(?:显示|输出|打印|重复|告诉我)(?:你的)?(?:初始|原始|隐藏)?(?:提示词|指令)",
            ],
        ),
        (
            SkipConfirmation,
            &[
                r"\bno\s+need\s+to\s+(?:ask|confirm|check|wait)",
                r"\b(?:don'?t|do\s+not|never)\s+ask\s+(?:me\s+)?(?:for\s+)?(?:confirmation|permission|approval|first|again)",
                r"\bwithout\s+(?:asking|confirmation|confirming|approval|permission)",
                r"\bskip\s+(?:the\s+)?(?:confirmation|approval)",
                r"\bauto[- ]?approve",
                r"(?:不需要|无需|不用|不必|跳过)(?:再)?(?:确认|审批|批准)|(?:不要|不用|别)(?:再)?问我|直接执行",
            ],
        ),
        (
            PermissionClaim,
            &[
                r"\b(?:execution_?permitted|approved|authori[sz]ed|confirmed|is_?admin|permitted|allow_?all)\s*[=:]\s*true\b",
                r"\bi\s+am\s+(?:the|an|your)\s+(?:admin|administrator|owner|root|developer)\b",
                r"\byou\s+(?:have|are\s+given|now\s+have)\s+(?:full\s+)?(?:permission|authori[sz]ation|root|admin)",
                r"\b(?:admin|sudo|root)\s+mode\b",
                r"(?:已经?|已被)(?:获得|得到)?(?:授权|批准)|我是管理员|管理员(?:已经?)?(?:批准|授权|同意)|最高权限",
            ],
        ),
        (
            DelimiterSpoof,
            &[
                r"<\|(?:im_start|im_end|system|user|assistant|endoftext|start_header_id|end_header_id|eot_id)\|>",
                r"\[/?INST\]|<</?SYS>>",
            ],
        ),
    ];
    table
        .into_iter()
        .map(|(kind, sources)| (kind, pattern(&format!("(?i){}", sources.join("|")))))
        .collect()
});

fn injection_flags(text: &str) -> Vec<InjectionFlag> {
    let mut found: Vec<(usize, InjectionFlag)> = Vec::new();
    for (kind, regex) in INJECTION_PATTERNS.iter() {
        for m in regex.find_iter(text) {
            let phrase: String = m.as_str().chars().take(FLAG_PHRASE_CHARS).collect();
            let duplicate = found
                .iter()
                .any(|(_, f)| f.kind == *kind && f.phrase.to_lowercase() == phrase.to_lowercase());
            if !duplicate {
                found.push((
                    m.start(),
                    InjectionFlag {
                        kind: *kind,
                        phrase,
                    },
                ));
            }
        }
    }
    found.sort_by_key(|(start, flag)| (*start, flag.kind));
    found.into_iter().map(|(_, flag)| flag).collect()
}

#[cfg(test)]
mod tests;
