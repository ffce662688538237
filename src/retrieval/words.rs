//! Which words of a query could name something: a tool, a product, a setting
//! (`hostnamectl`, `certbot`, `mod_rewrite`, `Istio`). Everything else is an ordinary word
//! — one of the English words of SCOWL (embedded, see `words/README.md`) or a common word
//! of computing — or something a user pastes about their own system (hosts, addresses,
//! versions: words with digits, dots, slashes or hyphens), which is never taken for a name.
//! Pure functions over the embedded lists; the index decides which names the knowledge
//! bases mention.

use std::collections::HashSet;
use std::io::Read;
use std::sync::OnceLock;

/// SCOWL's English words (American and British, size 50), lowercase, one a line, gzipped.
const ENGLISH: &[u8] = include_bytes!("words/english.txt.gz");
/// Words of computing that name nothing but are not in the English list.
const COMPUTING: &str = include_str!("words/computing.txt");

/// Letters a word needs to be taken for a name ("ls" and "vi" are too short to tell).
const MIN_NAME_LETTERS: usize = 3;

/// The words of `query` that could name a tool, product or setting, as written, each once
/// (whatever its case), in order: words of ASCII letters (and `_`) of at least three
/// letters that are neither ordinary English nor common computing words. Chinese text
/// around them is skipped.
pub fn name_candidates(query: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for raw in query.split(|c: char| {
        c.is_whitespace() || !c.is_ascii() || "()[]{}<>\"`,;!?*|=+~#$%^&".contains(c)
    }) {
        let word = raw.trim_matches(|c: char| ".:'".contains(c));
        let word = word.strip_suffix("'s").unwrap_or(word);
        let plain = word.chars().all(|c| c.is_ascii_alphabetic() || c == '_');
        let letters = word.chars().filter(char::is_ascii_alphabetic).count();
        if !plain || letters < MIN_NAME_LETTERS {
            continue;
        }
        let lower = word.to_ascii_lowercase();
        if !is_ordinary(&lower) && !names.iter().any(|name| name.eq_ignore_ascii_case(word)) {
            names.push(word.to_owned());
        }
    }
    names
}

/// Whether a lowercase word is an ordinary word: in either list as it is, or as the word
/// it inflects ("configs" → "config", "timed" → "time").
pub fn is_ordinary(word: &str) -> bool {
    let known = ordinary_words();
    if known.contains(word) {
        return true;
    }
    const ENDINGS: &[(&str, &str)] = &[
        ("ies", "y"),
        ("es", ""),
        ("s", ""),
        ("ed", ""),
        ("ed", "e"),
        ("ing", ""),
        ("ing", "e"),
        ("ly", ""),
    ];
    ENDINGS.iter().any(|(ending, restore)| {
        word.strip_suffix(ending)
            .filter(|stem| stem.len() >= MIN_NAME_LETTERS)
            .is_some_and(|stem| known.contains(&format!("{stem}{restore}")))
    })
}

/// Both lists, read once. The English list is part of the binary: it cannot fail to read
/// unless the build is broken, and then no word is ordinary and names are only checked more.
fn ordinary_words() -> &'static HashSet<String> {
    static WORDS: OnceLock<HashSet<String>> = OnceLock::new();
    WORDS.get_or_init(|| {
        let mut text = String::new();
        if let Err(err) = flate2::read::GzDecoder::new(ENGLISH).read_to_string(&mut text) {
            tracing::error!("the embedded English word list does not read: {err}");
        }
        text.lines()
            .chain(COMPUTING.lines().filter(|line| !line.starts_with('#')))
            .map(str::trim)
            .filter(|word| !word.is_empty())
            .map(str::to_owned)
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_products_and_settings_are_candidates_and_english_words_are_not() {
        assert_eq!(
            name_candidates("How do I change the hostname permanently with hostnamectl?"),
            vec!["hostnamectl"]
        );
        assert_eq!(
            name_candidates("What is Nginx's default client_max_body_size?"),
            vec!["Nginx", "client_max_body_size"]
        );
        assert_eq!(
            name_candidates("怎样用 certbot 申请证书，Apache 怎么配置？"),
            vec!["certbot", "Apache"]
        );
        assert!(name_candidates("Which tool summarises the slow query log?").is_empty());
        assert!(name_candidates("Why did the configs time out after the reboot?").is_empty());
    }

    #[test]
    fn what_a_user_pastes_about_their_own_system_is_not_a_name() {
        assert!(name_candidates(
            "Why is web01 at 97% on /var/lib/pgsql, and payments-api slow on 10.0.0.5 v2.3?"
        )
        .is_empty());
        // Two letters are too few to tell a name from an abbreviation.
        assert!(name_candidates("Is ls or vi on the box?").is_empty());
    }

    #[test]
    fn inflected_words_are_ordinary() {
        for word in [
            "configs", "timeouts", "rotated", "rotating", "queries", "quickly",
        ] {
            assert!(is_ordinary(word), "{word}");
        }
        for word in ["hostnamectl", "certbot", "nftables", "xfs_quota"] {
            assert!(!is_ordinary(word), "{word}");
        }
    }
}
