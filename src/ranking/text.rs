//! Text analysis for lexical ranking: split identifiers the way people write them
//! (`get_user_info`, `getUserInfo`, `math.factorial`, `HTTPServer2`), lower-case, drop stop
//! words, and stem, so "factorials" finds `math.factorial` and "user details" finds
//! `get_user_info`'s description.

use std::sync::OnceLock;

use rust_stemmers::{Algorithm, Stemmer};

/// Words that carry no meaning for choosing a tool (plus the ever-present "tool", "function").
const STOP_WORDS: &[&str] = &[
    "a", "about", "an", "and", "any", "are", "as", "at", "be", "been", "but", "by", "can", "could", "do", "does",
    "for", "from", "function", "get", "give", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "me",
    "my", "need", "of", "on", "or", "our", "please", "should", "so", "some", "tell", "that", "the", "their", "them",
    "then", "there", "these", "this", "to", "tool", "us", "using", "want", "was", "we", "what", "when", "where",
    "which", "who", "will", "with", "would", "you", "your",
];

fn stemmer() -> &'static Stemmer {
    static STEMMER: OnceLock<Stemmer> = OnceLock::new();
    STEMMER.get_or_init(|| Stemmer::create(Algorithm::English))
}

/// Splits `text` into identifier-aware words, before stop-word removal and stemming.
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            flush(&mut current, &mut out);
            continue;
        }
        if let Some(&prev) = i.checked_sub(1).and_then(|p| chars.get(p)) {
            let next = chars.get(i + 1).copied();
            let boundary = (prev.is_lowercase() && c.is_uppercase())
                // "HTTPServer" → "HTTP", "Server": an upper followed by a lower starts a word.
                || (prev.is_uppercase() && c.is_uppercase() && next.is_some_and(char::is_lowercase))
                || (prev.is_alphabetic() && c.is_ascii_digit())
                || (prev.is_ascii_digit() && c.is_alphabetic());
            if boundary {
                flush(&mut current, &mut out);
            }
        }
        current.extend(c.to_lowercase());
    }
    flush(&mut current, &mut out);
    out
}

fn flush(current: &mut String, out: &mut Vec<String>) {
    if !current.is_empty() {
        out.push(std::mem::take(current));
    }
}

/// The terms a text contributes to an index or a query: words minus stop words, stemmed.
pub fn terms(text: &str) -> Vec<String> {
    words(text)
        .into_iter()
        // Numbers in a request are argument values, not what a tool is for; rare ones would
        // otherwise score as highly specific terms.
        .filter(|w| !STOP_WORDS.contains(&w.as_str()) && !w.chars().all(|c| c.is_ascii_digit()))
        .map(|w| stemmer().stem(&w).into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_split_like_people_write_them() {
        assert_eq!(words("get_user_info"), ["get", "user", "info"]);
        assert_eq!(words("getUserInfo"), ["get", "user", "info"]);
        assert_eq!(words("math.factorial"), ["math", "factorial"]);
        assert_eq!(words("HTTPServer2Go"), ["http", "server", "2", "go"]);
        assert_eq!(words("v2beta-API"), ["v", "2", "beta", "api"]);
    }

    #[test]
    fn terms_drop_stop_words_and_stem() {
        assert_eq!(terms("Get the factorials of numbers"), ["factori", "number"]);
        assert_eq!(terms("calculate_triangle_area"), terms("Calculating triangle areas"));
    }
}
