//! A parser of nginx's error-log line format:
//! `YYYY/MM/DD HH:MM:SS [level] pid#tid: *cid message, client: …, server: …, request: "…",
//! upstream: "…", host: "…"`. The `*cid` connection number and the context fields after
//! the message are optional. nginx writes local time without a zone; Warden reads it as
//! UTC. One line is one record (no continuation lines); a line that does not parse is an
//! error, and `parse_log` names its line number.

use serde_json::{Map, Value};

use crate::timefmt::{format_rfc3339, utc_seconds};

/// The severities nginx writes, least to most severe.
pub const LEVELS: [&str; 8] = [
    "debug", "info", "notice", "warn", "error", "crit", "alert", "emerg",
];

/// Context fields nginx appends after the message (`, name: value`), in the order it
/// writes them. `request`, `subrequest`, `upstream`, `host`, `referrer` and `login` are
/// quoted.
const CONTEXT_FIELDS: [&str; 8] = [
    "client",
    "server",
    "login",
    "upstream",
    "request",
    "subrequest",
    "host",
    "referrer",
];

/// One parsed line of an nginx error log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NginxErrorLine {
    /// Seconds since the epoch (the log's local time read as UTC).
    pub ts: i64,
    pub level: String,
    pub pid: u64,
    pub tid: u64,
    /// The connection number (`*8812`), when the line has one.
    pub connection: Option<u64>,
    pub message: String,
    /// Context fields after the message, by name (`client`, `server`, `request`,
    /// `upstream`, `host`, …), quotes removed, in line order.
    pub context: Vec<(String, String)>,
}

/// Why a line is not an nginx error-log line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LineError(String);

/// A log that does not parse: the first bad line, counted from 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct LogError {
    pub line: usize,
    pub reason: LineError,
}

impl NginxErrorLine {
    /// A context field by name (`upstream`, `client`, …).
    pub fn context(&self, name: &str) -> Option<&str> {
        self.context
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The line as a JSON object: `{ts (RFC 3339, UTC), level, pid, tid, connection?,
    /// message, client?, server?, request?, upstream?, host?, …}`.
    pub fn fields(&self) -> Value {
        let mut map = Map::new();
        map.insert("ts".into(), Value::String(format_rfc3339(self.ts)));
        map.insert("level".into(), Value::String(self.level.clone()));
        map.insert("pid".into(), Value::from(self.pid));
        map.insert("tid".into(), Value::from(self.tid));
        if let Some(connection) = self.connection {
            map.insert("connection".into(), Value::from(connection));
        }
        map.insert("message".into(), Value::String(self.message.clone()));
        for (key, value) in &self.context {
            map.insert(key.clone(), Value::String(value.clone()));
        }
        Value::Object(map)
    }
}

/// Parses a whole log; blank lines are skipped.
pub fn parse_log(text: &str) -> Result<Vec<NginxErrorLine>, LogError> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| {
            parse_line(line).map_err(|reason| LogError {
                line: index + 1,
                reason,
            })
        })
        .collect()
}

/// Parses one line (a trailing `\r` is ignored).
pub fn parse_line(line: &str) -> Result<NginxErrorLine, LineError> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let ts = parse_time(line)?;
    let rest = line
        .get(19..)
        .and_then(|rest| rest.strip_prefix(" ["))
        .ok_or_else(|| fail("expected ` [level]` after the time"))?;
    let (level, rest) = rest
        .split_once("] ")
        .ok_or_else(|| fail("expected `[level] ` after the time"))?;
    if !LEVELS.contains(&level) {
        return Err(fail(format!(
            "unknown level `{level}` (expected one of {})",
            LEVELS.join(", ")
        )));
    }
    let (pid, rest) = leading_number(rest).ok_or_else(|| fail("expected `pid#tid: `"))?;
    let rest = rest
        .strip_prefix('#')
        .ok_or_else(|| fail("expected `#` after the pid"))?;
    let (tid, rest) = leading_number(rest).ok_or_else(|| fail("expected a tid after `#`"))?;
    let rest = rest
        .strip_prefix(": ")
        .ok_or_else(|| fail("expected `: ` after `pid#tid`"))?;
    let (connection, rest) = match rest.strip_prefix('*') {
        Some(after_star) => {
            let (number, after) = leading_number(after_star)
                .ok_or_else(|| fail("expected a connection number after `*`"))?;
            let after = after
                .strip_prefix(' ')
                .ok_or_else(|| fail("expected a space after the connection number"))?;
            (Some(number), after)
        }
        None => (None, rest),
    };
    let (message, context) = split_context(rest)?;
    Ok(NginxErrorLine {
        ts,
        level: level.to_owned(),
        pid,
        tid,
        connection,
        message: message.to_owned(),
        context,
    })
}

fn fail(reason: impl Into<String>) -> LineError {
    LineError(reason.into())
}

/// `YYYY/MM/DD HH:MM:SS` at the start of the line, read as UTC.
fn parse_time(line: &str) -> Result<i64, LineError> {
    let bad = || fail("expected a `YYYY/MM/DD HH:MM:SS` time at the start of the line");
    let head = line.get(..19).ok_or_else(bad)?.as_bytes();
    let shape_ok = head[4] == b'/'
        && head[7] == b'/'
        && head[10] == b' '
        && head[13] == b':'
        && head[16] == b':';
    if !shape_ok {
        return Err(bad());
    }
    let number = |from: usize, to: usize| -> Result<i64, LineError> {
        let digits = &head[from..to];
        if !digits.iter().all(u8::is_ascii_digit) {
            return Err(bad());
        }
        Ok(digits
            .iter()
            .fold(0, |total, digit| total * 10 + i64::from(digit - b'0')))
    };
    let (year, month, day) = (number(0, 4)?, number(5, 7)?, number(8, 10)?);
    let (hour, minute, second) = (number(11, 13)?, number(14, 16)?, number(17, 19)?);
    utc_seconds(year, month, day, hour, minute, second)
        .ok_or_else(|| fail("the time at the start of the line is not a valid date and time"))
}

/// A run of ASCII digits at the start of `text` (at most 19, so it fits) and what follows.
fn leading_number(text: &str) -> Option<(u64, &str)> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 19 {
        return None;
    }
    let number = text.get(..digits)?.parse().ok()?;
    Some((number, text.get(digits..)?))
}

type Context = Vec<(String, String)>;

/// Splits `message, client: …, server: …` into the message and its context fields. The
/// context starts at the first `, client: ` (nginx always writes the client first).
fn split_context(text: &str) -> Result<(&str, Context), LineError> {
    let Some(start) = text.find(", client: ") else {
        return Ok((text, Vec::new()));
    };
    let message = &text[..start];
    let mut rest = &text[start + 2..];
    let mut context = Vec::new();
    while !rest.is_empty() {
        let (key, after_key) = rest
            .split_once(": ")
            .filter(|(key, _)| CONTEXT_FIELDS.contains(key))
            .ok_or_else(|| fail(format!("unexpected text after the message: `{rest}`")))?;
        let (value, after_value) = if let Some(quoted) = after_key.strip_prefix('"') {
            split_quoted(quoted)
                .ok_or_else(|| fail(format!("unterminated quoted value of `{key}`")))?
        } else {
            split_unquoted(after_key)
        };
        context.push((key.to_owned(), value.to_owned()));
        rest = after_value.strip_prefix(", ").unwrap_or(after_value);
    }
    Ok((message, context))
}

/// A quoted value (the opening quote already removed): it ends at the first `"` followed
/// by the end of the line or by the next context field.
fn split_quoted(text: &str) -> Option<(&str, &str)> {
    text.match_indices('"').find_map(|(index, _)| {
        let after = &text[index + 1..];
        (after.is_empty() || starts_next_field(after)).then(|| (&text[..index], after))
    })
}

/// An unquoted value: it ends at the next context field or the end of the line.
fn split_unquoted(text: &str) -> (&str, &str) {
    text.match_indices(", ")
        .map(|(index, _)| index)
        .find(|&index| starts_next_field(&text[index..]))
        .map_or((text, ""), |index| (&text[..index], &text[index..]))
}

/// Whether `text` is `, name: …` for a known context field.
fn starts_next_field(text: &str) -> bool {
    text.strip_prefix(", ").is_some_and(|rest| {
        CONTEXT_FIELDS.iter().any(|key| {
            rest.strip_prefix(key)
                .is_some_and(|after| after.starts_with(": "))
        })
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const TIMED_OUT: &str = "2026/03/14 09:12:03 [error] 2211#2211: *8812 upstream timed out (110: Connection timed out) while reading response header from upstream, client: 10.0.3.7, server: api.example.internal, request: \"POST /orders HTTP/1.1\", upstream: \"http://10.0.5.21:8080/orders\", host: \"api.example.internal\"";

    #[test]
    fn an_upstream_timeout_parses_with_its_context() {
        let line = parse_line(TIMED_OUT).unwrap();
        assert_eq!(line.ts, utc_seconds(2026, 3, 14, 9, 12, 3).unwrap());
        assert_eq!(line.level, "error");
        assert_eq!(
            (line.pid, line.tid, line.connection),
            (2211, 2211, Some(8812))
        );
        assert_eq!(
            line.message,
            "upstream timed out (110: Connection timed out) while reading response header from upstream"
        );
        assert_eq!(
            line.context("upstream"),
            Some("http://10.0.5.21:8080/orders")
        );
        assert_eq!(
            line.fields(),
            json!({
                "ts": "2026-03-14T09:12:03Z", "level": "error", "pid": 2211, "tid": 2211,
                "connection": 8812,
                "message": "upstream timed out (110: Connection timed out) while reading response header from upstream",
                "client": "10.0.3.7", "server": "api.example.internal",
                "request": "POST /orders HTTP/1.1", "upstream": "http://10.0.5.21:8080/orders",
                "host": "api.example.internal"
            })
        );
    }

    #[test]
    fn refused_connections_and_no_live_upstreams_parse() {
        let refused = parse_line("2026/03/14 09:13:41 [error] 2211#2212: *9001 connect() failed (111: Connection refused) while connecting to upstream, client: 10.0.3.9, server: api.example.internal, request: \"GET /orders/17 HTTP/1.1\", upstream: \"http://10.0.5.22:8080/orders/17\", host: \"api.example.internal\"").unwrap();
        assert_eq!(
            refused.message,
            "connect() failed (111: Connection refused) while connecting to upstream"
        );
        assert_eq!(refused.tid, 2212);
        assert_eq!(refused.context("client"), Some("10.0.3.9"));
        assert_eq!(refused.context("request"), Some("GET /orders/17 HTTP/1.1"));

        let no_live = parse_line("2026/03/14 09:14:00 [error] 2211#2211: *9050 no live upstreams while connecting to upstream, client: 10.0.3.7, server: api.example.internal, request: \"POST /orders HTTP/1.1\", upstream: \"http://orders_backend/orders\", host: \"api.example.internal:443\", referrer: \"https://app.example.internal/, checkout\"").unwrap();
        assert_eq!(
            no_live.message,
            "no live upstreams while connecting to upstream"
        );
        assert_eq!(
            no_live.context("upstream"),
            Some("http://orders_backend/orders")
        );
        assert_eq!(no_live.context("host"), Some("api.example.internal:443"));
        assert_eq!(
            no_live.context("referrer"),
            Some("https://app.example.internal/, checkout")
        );
    }

    #[test]
    fn a_line_without_connection_or_context_parses() {
        let line =
            parse_line("2026/03/14 08:00:00 [notice] 1#1: signal process started\r").unwrap();
        assert_eq!(line.connection, None);
        assert_eq!(line.level, "notice");
        assert_eq!(line.message, "signal process started");
        assert!(line.context.is_empty());
        assert_eq!(line.fields().get("connection"), None);

        let warn = parse_line("2026/03/14 08:00:01 [warn] 7#7: *3 an upstream response is buffered to a temporary file /var/cache/nginx/1/00/0000000001 while reading upstream, client: 10.0.3.7, server: _, request: \"GET /export HTTP/1.1\", upstream: \"http://10.0.5.21:8080/export\", host: \"api\"").unwrap();
        assert_eq!(warn.context("server"), Some("_"));
    }

    #[test]
    fn malformed_lines_are_errors_naming_the_line() {
        for bad in [
            "",
            "2026-03-14 09:12:03 [error] 1#1: boom",
            "2026/03/14 09:12:03 error 1#1: boom",
            "2026/03/14 09:12:03 [fatal] 1#1: boom",
            "2026/03/14 09:12:03 [error] 1: boom",
            "2026/03/14 09:12:03 [error] 1#1 boom",
            "2026/03/14 09:12:03 [error] 1#1: *x boom",
            "2026/02/30 09:12:03 [error] 1#1: boom",
            "2026/03/14 09:12:03 [error] 1#1: boom, client: 1.2.3.4, request: \"GET /",
            "２０２６/03/14 09:12:03 [error] 1#1: boom",
            "2026/03/14 09:12:03 [error] 99999999999999999999#1: boom",
        ] {
            assert!(parse_line(bad).is_err(), "{bad}");
        }
        let log = format!("{TIMED_OUT}\n\n   upstream timed out without a header\n");
        let error = parse_log(&log).unwrap_err();
        assert_eq!(error.line, 3);
        assert!(error.to_string().starts_with("line 3: "), "{error}");
        assert_eq!(
            parse_log(&format!("{TIMED_OUT}\n{TIMED_OUT}\n"))
                .unwrap()
                .len(),
            2
        );
    }
}
