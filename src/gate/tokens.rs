//! Real BPE token counts (OpenAI's o200k vocabulary, shipped inside `tiktoken-rs`), for what a
//! manifest costs and what gating saved. Counted once per tool per catalog change.

/// Tokens in a serialised tool definition.
pub fn count(json: &[u8]) -> u32 {
    let text = String::from_utf8_lossy(json);
    u32::try_from(tiktoken_rs::o200k_base_singleton().encode_ordinary(&text).len()).unwrap_or(u32::MAX)
}

/// Tokens in a text (context items).
pub fn count_text(text: &str) -> u64 {
    tiktoken_rs::o200k_base_singleton().encode_ordinary(text).len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_real_bpe_tokens() {
        assert_eq!(count_text("hello world"), 2);
        assert!(count(br#"{"name":"get_weather","description":"Get the weather for a city."}"#) > 10);
        assert_eq!(count(b""), 0);
    }
}
