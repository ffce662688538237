//! Durations stated in free-text log lines ("duration_ms=3904", "took 2.9s", "deadline
//! exceeded after 8000ms", "耗时 3.2秒"), read in code so that a playbook can ask for a slow
//! request by number rather than by the wording of one application's logs.

use std::sync::LazyLock;

use regex::Regex;

/// `name_ms=3904`, `latency_s: 3.1`: the unit is the key's suffix.
static KEYED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b[a-z0-9]+_(ms|millis|s|sec|secs|seconds)\s*[=:]\s*(\d+(?:\.\d+)?)")
        .expect("a valid pattern")
});

/// `3904ms`, `2.9 s`, `8 seconds`, `3.2秒`: the unit follows the number.
static SUFFIXED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)(?:^|[^\d.])(\d+(?:\.\d+)?)\s*(ms|msec|millis|milliseconds|s|sec|secs|seconds|毫秒|秒)(?:$|[^a-zA-Z0-9_])",
    )
    .expect("a valid pattern")
});

fn to_ms(value: &str, unit: &str) -> Option<f64> {
    let value: f64 = value.parse().ok()?;
    let factor = match unit.to_lowercase().as_str() {
        "ms" | "msec" | "millis" | "milliseconds" | "毫秒" => 1.0,
        _ => 1000.0,
    };
    Some(value * factor)
}

/// The longest duration `message` states, in milliseconds.
pub fn longest_ms(message: &str) -> Option<f64> {
    let keyed = KEYED
        .captures_iter(message)
        .filter_map(|c| to_ms(c.get(2)?.as_str(), c.get(1)?.as_str()));
    let suffixed = SUFFIXED
        .captures_iter(message)
        .filter_map(|c| to_ms(c.get(1)?.as_str(), c.get(2)?.as_str()));
    keyed.chain(suffixed).reduce(f64::max)
}

#[cfg(test)]
mod tests {
    use super::longest_ms;

    #[test]
    fn durations_are_read_in_their_units() {
        let cases = [
            (
                "request completed status=200 duration_ms=3904 policy=PL-1",
                Some(3904.0),
            ),
            ("handler deadline exceeded after 8000ms", Some(8000.0)),
            (
                "points expiry sweep: 1207 accounts, 0 errors, took 2.9s",
                Some(2900.0),
            ),
            (
                "http 5m: served=22207 errors=3 p99_ms=42 inflight=15",
                Some(42.0),
            ),
            ("查询耗时3.2秒，超过阈值", Some(3200.0)),
            ("等待200毫秒后重试", Some(200.0)),
            ("upstream latency_s: 1.5, retry in 200 ms", Some(1500.0)),
            ("status=504 listening on 127.0.0.1:8080", None),
            ("released v2.19.0 to 3 pods", None),
        ];
        for (message, expected) in cases {
            assert_eq!(longest_ms(message), expected, "{message}");
        }
    }
}
