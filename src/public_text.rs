//! Text shown to users who are not administrators: internal file paths (the data folder,
//! model files, knowledge-base roots) are replaced by `[path]`, so an error message cannot
//! tell a viewer how the host is laid out. Administrators read the full text in the logs.

/// `text` with every absolute or dot-relative file path (`/var/lib/…`, `./models/…`,
/// `../x/y`) written as `[path]`. A path ends at whitespace, a quote or a bracket.
pub fn without_paths(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = next_path_start(rest) {
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        let len = tail.find(ends_path).unwrap_or(tail.len());
        let candidate = &tail[..len];
        // A trailing full stop, comma or colon belongs to the sentence, not the path.
        let kept = candidate.trim_end_matches(['.', ',', ':', ';']);
        if looks_like_path(kept) {
            out.push_str("[path]");
            out.push_str(&candidate[kept.len()..]);
        } else {
            out.push_str(candidate);
        }
        rest = &tail[len..];
    }
    out.push_str(rest);
    out
}

/// Where the next word that could be a path starts: a `/` or `.` at the start of the text
/// or after a separator.
fn next_path_start(text: &str) -> Option<usize> {
    let mut previous: Option<char> = None;
    for (index, c) in text.char_indices() {
        let after_separator = previous.is_none_or(|p| ends_path(p) || matches!(p, '=' | ':'));
        // `scheme://host/…` is an address, not a file: its `//` after a colon is kept.
        let url = previous == Some(':') && text[index..].starts_with("//");
        if after_separator && !url && (c == '/' || c == '.') {
            return Some(index);
        }
        previous = Some(c);
    }
    None
}

fn ends_path(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '"' | '\'' | '`' | '(' | ')' | '[' | ']' | '<' | '>' | '{' | '}'
        )
}

/// `/a/b`, `./a`, `../a`: an absolute path of at least two parts, or a dot-relative one.
fn looks_like_path(word: &str) -> bool {
    if let Some(relative) = word.strip_prefix("./").or_else(|| word.strip_prefix("../")) {
        return !relative.is_empty();
    }
    word.starts_with('/') && word[1..].contains('/') && word.len() > 3
}

#[cfg(test)]
mod tests {
    use super::without_paths;

    #[test]
    fn paths_are_replaced_and_the_rest_kept() {
        assert_eq!(
            without_paths("cannot open /var/lib/warden/models/x.gguf: permission denied"),
            "cannot open [path]: permission denied"
        );
        assert_eq!(
            without_paths("read \"./kb/runbooks/a.md\" failed (see ../logs/x)."),
            "read \"[path]\" failed (see [path])."
        );
        assert_eq!(without_paths("file=/srv/data/secret.txt."), "file=[path].");
        for kept in [
            "the model answered 3.5 tokens/s",
            "and/or / either",
            "ratio 1/2 and .5",
            "version 1.2.3",
            "the server at http://10.0.0.5:8080/v1/models did not answer",
            "",
            "中文 /根/目录 说明",
        ] {
            let expected = if kept.contains("/根/目录") {
                "中文 [path] 说明".to_owned()
            } else {
                kept.to_owned()
            };
            assert_eq!(without_paths(kept), expected, "{kept}");
        }
    }
}
