//! The calendar arithmetic the wire's dates need, in one place: days
//! since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
//! `days_from_civil`), for time stamps read from upstreams and from image
//! recipes alike.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_become_unix_seconds() {
        assert_eq!(unix_seconds(1970, 1, 1, 0, 0, 0), 0);
        assert_eq!(unix_seconds(2000, 3, 1, 0, 0, 0), 951_868_800);
        assert_eq!(unix_seconds(2025, 2, 19, 12, 30, 15), 1_739_968_215);
        assert_eq!(unix_seconds(1969, 12, 31, 23, 59, 59), -1);
    }
}
