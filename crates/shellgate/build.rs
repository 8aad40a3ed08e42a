//! Stamps the binary with what `shellgate --version` shows beside the
//! package version: the commit it was built from and its build date.
//!
//! Both come from the environment when the builder sets them (a tarball
//! without `.git`, a packager): `SHELLGATE_BUILD_COMMIT`, and
//! `SOURCE_DATE_EPOCH` (the reproducible-builds convention) for the date.
//! Otherwise from git: the commit `HEAD` names and that commit's date, so
//! the same commit always gives the same binary (a wall-clock date would
//! make every build differ). Without either, `unknown`.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=SHELLGATE_BUILD_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // A new commit (HEAD moving, or the branch it names) stamps again.
    for path in ["HEAD", "packed-refs"] {
        if let Some(file) = git_path(path) {
            println!("cargo:rerun-if-changed={}", file.display());
        }
    }
    if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(file) = git_path(&reference) {
            println!("cargo:rerun-if-changed={}", file.display());
        }
    }

    let commit = std::env::var("SHELLGATE_BUILD_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    let date = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|epoch| epoch.trim().parse::<i64>().ok())
        .map(civil_date)
        .or_else(|| {
            git(&["show", "-s", "--format=%ct", "HEAD"])
                .and_then(|epoch| epoch.parse::<i64>().ok())
                .map(civil_date)
        })
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=SHELLGATE_BUILD_COMMIT={commit}");
    println!("cargo:rustc-env=SHELLGATE_BUILD_DATE={date}");
}

/// A git command's trimmed output, `None` when git is missing, this is not
/// a work tree (a release tarball), or the command fails.
fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}

/// Where git keeps `name` for this work tree (worktrees keep `HEAD` apart
/// from the shared refs), if it exists.
fn git_path(name: &str) -> Option<PathBuf> {
    let path = PathBuf::from(git(&[
        "rev-parse",
        "--path-format=absolute",
        "--git-path",
        name,
    ])?);
    path.exists().then_some(path)
}

/// Seconds since the epoch as a UTC calendar date (YYYY-MM-DD), by Howard
/// Hinnant's days-from-civil inverse: a build script has no date crate.
fn civil_date(epoch_seconds: i64) -> String {
    let days = epoch_seconds.div_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}
