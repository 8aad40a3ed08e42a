//! `SKILL.md`: YAML front matter with a `name` and a `description`, then
//! the instructions (the open Agent Skills format).
//!
//! Only the front matter's flat `key: value` lines are read (plain, quoted,
//! or a folded/literal block `>` / `|` with indented lines); everything
//! else in it is ignored.

/// Longest skill name.
pub const MAX_NAME: usize = 64;
/// Longest description.
pub const MAX_DESCRIPTION: usize = 1024;

/// A skill's name and description, as its manifest gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub name: String,
    pub description: String,
}

/// Why a manifest was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SKILL.md: {0}")]
pub struct ManifestError(pub String);

fn refuse(message: impl Into<String>) -> ManifestError {
    ManifestError(message.into())
}

/// Whether `name` is a skill name: lowercase letters, digits and single
/// hyphens, not at either end.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Reads a manifest.
pub fn parse(text: &str) -> Result<Manifest, ManifestError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Err(refuse(
            "must start with YAML front matter (a `---` line, `name:` and `description:`, `---`)",
        ));
    }
    let mut front = Vec::new();
    let mut closed = false;
    for line in lines {
        if line.trim_end() == "---" {
            closed = true;
            break;
        }
        front.push(line);
    }
    if !closed {
        return Err(refuse("the front matter is not closed by a `---` line"));
    }
    let name = field(&front, "name")?.ok_or_else(|| refuse("the front matter has no `name`"))?;
    let description = field(&front, "description")?
        .ok_or_else(|| refuse("the front matter has no `description`"))?;
    if !valid_name(&name) {
        return Err(refuse(format!(
            "name {name:?} must be 1 to {MAX_NAME} lowercase letters, digits and single hyphens"
        )));
    }
    if description.is_empty() || description.chars().count() > MAX_DESCRIPTION {
        return Err(refuse(format!(
            "description must be 1 to {MAX_DESCRIPTION} characters"
        )));
    }
    Ok(Manifest { name, description })
}

/// The value of a top-level `key:` of the front matter.
fn field(front: &[&str], key: &str) -> Result<Option<String>, ManifestError> {
    let Some(at) = front.iter().position(|line| {
        line.strip_prefix(key)
            .is_some_and(|rest| rest.trim_start().starts_with(':'))
    }) else {
        return Ok(None);
    };
    let value = front[at][key.len()..]
        .trim_start()
        .trim_start_matches(':')
        .trim();
    if value == ">" || value == "|" || value == ">-" || value == "|-" {
        // A block: the indented lines that follow.
        let block: Vec<&str> = front[at + 1..]
            .iter()
            .take_while(|line| line.is_empty() || line.starts_with([' ', '\t']))
            .map(|line| line.trim())
            .collect();
        let joiner = if value.starts_with('>') { " " } else { "\n" };
        return Ok(Some(
            block
                .iter()
                .filter(|line| !line.is_empty())
                .copied()
                .collect::<Vec<_>>()
                .join(joiner),
        ));
    }
    let unquoted = match value.as_bytes() {
        [b'"', .., b'"'] | [b'\'', .., b'\''] if value.len() >= 2 => &value[1..value.len() - 1],
        [b'"' | b'\'', ..] => return Err(refuse(format!("`{key}` has an unclosed quote"))),
        _ => value,
    };
    Ok(Some(unquoted.trim().to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_gives_name_and_description() {
        let manifest = parse(
            "---\nname: csv-workbench\ndescription: \"Analyze CSV files.\"\n---\n\nUse it.\n",
        )
        .unwrap();
        assert_eq!(manifest.name, "csv-workbench");
        assert_eq!(manifest.description, "Analyze CSV files.");
        let folded =
            parse("---\nname: a\ndescription: >\n  one\n  two\nlicense: MIT\n---\n").unwrap();
        assert_eq!(folded.description, "one two");
    }

    #[test]
    fn bad_manifests_say_why() {
        for (text, why) in [
            ("no front matter", "must start with"),
            ("---\nname: a\n", "not closed"),
            ("---\ndescription: d\n---\n", "no `name`"),
            ("---\nname: a\n---\n", "no `description`"),
            ("---\nname: Bad_Name\ndescription: d\n---\n", "lowercase"),
            ("---\nname: a--b\ndescription: d\n---\n", "single hyphens"),
            ("---\nname: a\ndescription: \"open\n---\n", "unclosed quote"),
            ("---\nname: a\ndescription: \n---\n", "1 to 1024"),
        ] {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.contains(why), "{text:?}: {error}");
        }
        let long = format!("---\nname: {}\ndescription: d\n---\n", "a".repeat(65));
        assert!(parse(&long).is_err());
    }
}
