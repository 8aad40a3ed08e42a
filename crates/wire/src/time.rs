//! The calendar arithmetic the wire's dates need, in one place: days
//! since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
//! `days_from_civil`), for time stamps read from upstreams and from image
//! recipes alike, and E2B's RFC 3339 times.

/// Unix seconds of `year-month-day hour:minute:second` UTC (the caller
/// checks the fields' ranges).
pub fn unix_seconds(year: i64, month: i64, day: i64, hour: i64, minute: i64, second: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * 86_400 + hour * 3600 + minute * 60 + second
}

/// The civil date and time (UTC) of unix seconds `t`: the inverse of
/// [`unix_seconds`] (Howard Hinnant's `civil_from_days`).
fn civil(t: i64) -> (i64, i64, i64, i64, i64, i64) {
    let days = t.div_euclid(86_400);
    let rest = t.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, rest / 3600, rest % 3600 / 60, rest % 60)
}

/// The UTC date of unix seconds `t`, `YYYY-MM-DD`.
pub fn utc_date(t: i64) -> String {
    let (year, month, day, ..) = civil(t);
    format!("{year:04}-{month:02}-{day:02}")
}

/// Unix seconds as RFC 3339 in UTC (`2026-12-01T21:30:00Z`), the way E2B's
/// API writes its times.
pub fn rfc3339(t: i64) -> String {
    let (year, month, day, hour, minute, second) = civil(t);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z")
}

/// Unix seconds of an RFC 3339 time (`YYYY-MM-DDTHH:MM:SS`, optional
/// fraction, `Z` or `±HH:MM`); the fraction is dropped. `None` if it is not
/// one.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let number = |s: &str| -> Option<i64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let (date, time) = text.split_once(['T', 't', ' '])?;
    let mut date_parts = date.split('-');
    let year = number(date_parts.next()?)?;
    let month = number(date_parts.next()?)?;
    let day = number(date_parts.next()?)?;
    if date_parts.next().is_some() {
        return None;
    }
    let (clock, offset) = if let Some(clock) = time.strip_suffix(['Z', 'z']) {
        (clock, 0)
    } else {
        let at = time.rfind(['+', '-'])?;
        let (clock, zone) = time.split_at(at);
        let sign = if zone.starts_with('-') { -1 } else { 1 };
        let (hours, minutes) = zone.get(1..)?.split_once(':')?;
        (
            clock,
            sign * (number(hours)? * 3600 + number(minutes)? * 60),
        )
    };
    let clock = clock.split_once('.').map_or(clock, |(whole, _)| whole);
    let mut clock_parts = clock.split(':');
    let hour = number(clock_parts.next()?)?;
    let minute = number(clock_parts.next()?)?;
    let second = number(clock_parts.next()?)?;
    if clock_parts.next().is_some()
        || !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    Some(unix_seconds(year, month, day, hour, minute, second) - offset)
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_are_civil_dates() {
        use super::utc_date;
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(59 * 86_400), "1970-03-01");
        assert_eq!(utc_date(11_016 * 86_400 + 86_399), "2000-02-29");
        assert_eq!(utc_date(20_790 * 86_400), "2026-12-03");
    }

    use super::*;

    #[test]
    fn dates_become_unix_seconds() {
        assert_eq!(unix_seconds(1970, 1, 1, 0, 0, 0), 0);
        assert_eq!(unix_seconds(2000, 3, 1, 0, 0, 0), 951_868_800);
        assert_eq!(unix_seconds(2025, 2, 19, 12, 30, 15), 1_739_968_215);
        assert_eq!(unix_seconds(1969, 12, 31, 23, 59, 59), -1);
    }

    #[test]
    fn rfc3339_round_trips() {
        for t in [0, 951_868_800, 1_739_968_215, -1, 1_798_000_000] {
            assert_eq!(parse_rfc3339(&rfc3339(t)), Some(t));
        }
        assert_eq!(rfc3339(1_739_968_215), "2025-02-19T12:30:15Z");
        assert_eq!(
            parse_rfc3339("2025-02-19T14:30:15.123456+02:00"),
            Some(1_739_968_215)
        );
        assert_eq!(parse_rfc3339("2025-02-19"), None);
        assert_eq!(parse_rfc3339("2025-13-19T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("yesterday"), None);
    }
}
