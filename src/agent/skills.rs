//! Skills: Markdown files with front matter (`name`, `description`) in a skills folder.
//! The system prompt lists their names and descriptions; `load_skill` returns a body on
//! demand (progressive disclosure). Loaded once at start; bad files are skipped with a
//! warning.

use std::path::Path;

/// Largest skill file read.
const MAX_SKILL_BYTES: u64 = 64 * 1024;

#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    pub body: String,
}

#[derive(Debug, Clone, Default)]
pub struct Skills(Vec<Skill>);

impl Skills {
    /// Reads every `*.md` file of `dir` (none when the folder is missing).
    pub fn load(dir: &Path) -> Self {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Self::default();
        };
        let mut skills: Vec<Skill> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .filter(|p| {
                std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.len() <= MAX_SKILL_BYTES)
            })
            .filter_map(|p| {
                let text = std::fs::read_to_string(&p).ok()?;
                let skill = parse_skill(&text);
                if skill.is_none() {
                    tracing::warn!(
                        "skill file {} has no name/description front matter",
                        p.display()
                    );
                }
                skill
            })
            .collect();
        skills.sort_by(|a, b| a.name.cmp(&b.name));
        Self(skills)
    }

    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.0.iter().find(|s| s.name == name)
    }

    /// "- name: description" lines for the system prompt.
    pub fn listing(&self) -> String {
        self.0
            .iter()
            .map(|s| format!("- {}: {}", s.name, s.description))
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `---\nname: …\ndescription: …\n---\nbody`.
pub fn parse_skill(text: &str) -> Option<Skill> {
    let rest = text.trim_start_matches('\u{feff}').strip_prefix("---")?;
    let (front, body) = rest.split_once("\n---")?;
    let field = |key: &str| {
        front.lines().find_map(|line| {
            let (k, v) = line.split_once(':')?;
            (k.trim() == key).then(|| v.trim().trim_matches('"').to_owned())
        })
    };
    let name = field("name").filter(|n| !n.is_empty() && n.len() <= 80)?;
    let description = field("description").unwrap_or_default();
    Some(Skill {
        name,
        description,
        body: body.trim_start_matches('-').trim().to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_gives_name_description_and_body() {
        let skill = parse_skill(
            "---\nname: disk-triage\ndescription: Free disk space safely\n---\n# Steps\n1. df -h\n",
        )
        .unwrap();
        assert_eq!(skill.name, "disk-triage");
        assert_eq!(skill.description, "Free disk space safely");
        assert!(skill.body.starts_with("# Steps"));
        assert!(parse_skill("# no front matter").is_none());
        assert!(parse_skill("---\ndescription: x\n---\nbody").is_none());
    }
}
