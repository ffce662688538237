//! Times as text: RFC 3339 to seconds since the epoch and back, in UTC, on the proleptic
//! Gregorian calendar. Alertmanager payloads, scenario packs and diagnostic tools all go
//! through here; nothing else in Warden parses or formats calendar dates.

/// Seconds since the epoch of an RFC 3339 time (`2024-03-01T12:34:56.789Z`,
/// `…+02:00`); fractions of a second are dropped. `None` when malformed.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    let separators_ok = bytes.len() >= 20
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && matches!(bytes[10], b'T' | b't' | b' ')
        && bytes[13] == b':'
        && bytes[16] == b':';
    if !separators_ok {
        return None;
    }
    let number = |from: usize, to: usize| -> Option<i64> {
        let digits = text.get(from..to)?;
        if !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    };
    let (year, month, day) = (number(0, 4)?, number(5, 7)?, number(8, 10)?);
    let (hour, minute, second) = (number(11, 13)?, number(14, 16)?, number(17, 19)?);
    let local = utc_seconds(year, month, day, hour, minute, second)?;
    let mut rest = text.get(19..)?;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        rest = fraction.get(digits..)?;
    }
    Some(local - offset_seconds(rest)?)
}

/// An RFC 3339 time in UTC with whole seconds: `2024-03-01T12:34:56Z`. Years outside
/// 0000–9999 are written with as many digits (and a sign) as they need.
pub fn format_rfc3339(seconds: i64) -> String {
    let days = seconds.div_euclid(86_400);
    let second_of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60,
    );
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z")
}

/// Seconds since the epoch of a UTC date and time of day, checked: `None` for a month,
/// day, hour, minute or second out of range (a leap second, 60, is accepted).
pub fn utc_seconds(
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
) -> Option<i64> {
    let valid_date = (1..=12).contains(&month) && (1..=days_in_month(year, month)).contains(&day);
    let valid_time = (0..=23).contains(&hour) && (0..=59).contains(&minute);
    if !valid_date || !valid_time || !(0..=60).contains(&second) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(days * 86_400 + hour * 3600 + minute * 60 + second)
}

/// The offset east of UTC, in seconds, of an RFC 3339 zone: `Z`, `+HH:MM` or `-HH:MM`.
fn offset_seconds(zone: &str) -> Option<i64> {
    if matches!(zone, "Z" | "z") {
        return Some(0);
    }
    let sign = match zone.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let (hours, minutes) = zone.get(1..)?.split_once(':')?;
    let two_digits = |s: &str| s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit());
    if !two_digits(hours) || !two_digits(minutes) {
        return None;
    }
    let (hours, minutes): (i64, i64) = (hours.parse().ok()?, minutes.parse().ok()?);
    if hours > 23 || minutes > 59 {
        return None;
    }
    Some(sign * (hours * 3600 + minutes * 60))
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    // Count years from March, so the leap day is the last day of the counted year.
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date (year, month, day) that is `days` after 1970-01-01; the inverse of
/// `days_from_civil`.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times_parse_to_epoch_seconds() {
        for (text, expected) in [
            ("1970-01-01T00:00:00Z", Some(0)),
            ("2024-03-01T12:34:56Z", Some(1_709_296_496)),
            ("2024-03-01T12:34:56.789123456Z", Some(1_709_296_496)),
            ("2024-03-01T14:34:56+02:00", Some(1_709_296_496)),
            ("2024-03-01T10:04:56.5-02:30", Some(1_709_296_496)),
            ("2000-02-29T00:00:00Z", Some(951_782_400)),
            ("0001-01-01T00:00:00Z", Some(-62_135_596_800)),
            ("2023-02-29T00:00:00Z", None),
            ("2024-13-01T00:00:00Z", None),
            ("2024-03-01T24:00:00Z", None),
            ("2024-03-01T12:34:56", None),
            ("2024-03-01T12:34:56.Z", None),
            ("2024-03-01T12:34:56+0200", None),
            ("2024-03-01 12:34:5xZ", None),
            ("yesterday", None),
            ("2024-03-01T12:34:56Zjunk", None),
            ("2024-03-01T12:34:56+24:00", None),
            ("2024-03-01T12:34:56.123", None),
            ("２０２４-03-01T12:34:56Z", None),
        ] {
            assert_eq!(parse_rfc3339(text), expected, "{text}");
        }
    }

    #[test]
    fn times_format_in_utc_and_round_trip() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(1_709_296_496), "2024-03-01T12:34:56Z");
        assert_eq!(format_rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_rfc3339(-1), "1969-12-31T23:59:59Z");
        assert_eq!(format_rfc3339(-62_135_596_800), "0001-01-01T00:00:00Z");
        for seconds in [
            -62_135_596_800,
            -86_401,
            0,
            59,
            951_868_799,
            1_709_296_496,
            4_102_444_800,
            253_402_300_799,
        ] {
            assert_eq!(
                parse_rfc3339(&format_rfc3339(seconds)),
                Some(seconds),
                "{seconds}"
            );
        }
        // Any i64 formats without overflow.
        assert!(format_rfc3339(i64::MAX).ends_with('Z'));
        assert!(format_rfc3339(i64::MIN).ends_with('Z'));
    }

    #[test]
    fn utc_parts_are_checked() {
        assert_eq!(utc_seconds(2024, 3, 1, 12, 34, 56), Some(1_709_296_496));
        assert_eq!(utc_seconds(2024, 2, 30, 0, 0, 0), None);
        assert_eq!(utc_seconds(2024, 1, 1, 0, 60, 0), None);
        assert_eq!(utc_seconds(2024, 1, 1, -1, 0, 0), None);
    }
}
