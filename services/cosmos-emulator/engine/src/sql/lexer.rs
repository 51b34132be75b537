//! Tokeniser for the Cosmos SQL subset.

use super::SqlError;

#[derive(Debug, Clone, PartialEq)]
pub enum Token {
    Ident(String),
    Param(String),
    Str(String),
    Num(f64),
    Symbol(&'static str),
}

const SYMBOLS: [&str; 21] = [
    "!=", "<>", "<=", ">=", "||", "=", "<", ">", "(", ")", "[", "]", "{", "}", ",", ".", "*", "+",
    "-", "/", ":",
];

/// Longest queries the emulator accepts; real Cosmos caps query text at 256 KB too.
pub const MAX_QUERY_LEN: usize = 256 * 1024;

pub fn tokenize(text: &str) -> Result<Vec<Token>, SqlError> {
    if text.len() > MAX_QUERY_LEN {
        return Err(SqlError::new("query text is longer than 256 KB"));
    }
    let mut tokens = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'-' && bytes.get(i + 1) == Some(&b'-') {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == b'_' || c == b'@' {
            let start = i;
            i += 1;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let word = &text[start..i];
            if c == b'@' {
                if word.len() == 1 {
                    return Err(SqlError::new("a parameter name must follow '@'"));
                }
                tokens.push(Token::Param(word.to_owned()));
            } else {
                tokens.push(Token::Ident(word.to_owned()));
            }
        } else if c.is_ascii_digit() {
            let start = i;
            while i < bytes.len()
                && (bytes[i].is_ascii_digit()
                    || bytes[i] == b'.'
                    || bytes[i] == b'e'
                    || bytes[i] == b'E'
                    || ((bytes[i] == b'+' || bytes[i] == b'-')
                        && matches!(bytes[i - 1], b'e' | b'E')))
            {
                i += 1;
            }
            let literal = &text[start..i];
            let value: f64 = literal
                .parse()
                .map_err(|_| SqlError::new(format!("invalid number literal '{literal}'")))?;
            tokens.push(Token::Num(value));
        } else if c == b'\'' || c == b'"' {
            let (value, next) = read_string(text, i)?;
            tokens.push(Token::Str(value));
            i = next;
        } else if let Some(symbol) = SYMBOLS.iter().find(|s| text[i..].starts_with(**s)) {
            tokens.push(Token::Symbol(symbol));
            i += symbol.len();
        } else {
            let ch = text[i..].chars().next().unwrap_or('?');
            return Err(SqlError::new(format!(
                "unexpected character '{ch}' at offset {i}"
            )));
        }
    }
    Ok(tokens)
}

/// Reads a quoted string starting at `start` (the quote), returning its value and
/// the offset after the closing quote.
fn read_string(text: &str, start: usize) -> Result<(String, usize), SqlError> {
    let quote = text.as_bytes()[start] as char;
    let mut value = String::new();
    let mut chars = text[start + 1..].char_indices();
    while let Some((offset, ch)) = chars.next() {
        match ch {
            c if c == quote => return Ok((value, start + 1 + offset + 1)),
            '\\' => match chars.next() {
                Some((_, 'n')) => value.push('\n'),
                Some((_, 't')) => value.push('\t'),
                Some((_, 'r')) => value.push('\r'),
                Some((_, 'b')) => value.push('\u{8}'),
                Some((_, 'f')) => value.push('\u{c}'),
                Some((offset, 'u')) => {
                    let at = start + 1 + offset + 1;
                    let ch = text
                        .get(at..at + 4)
                        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                        .and_then(char::from_u32)
                        .ok_or_else(|| {
                            SqlError::new(format!(
                                "invalid \\u escape at offset {} (four hex digits naming a character)",
                                at - 2
                            ))
                        })?;
                    value.push(ch);
                    for _ in 0..4 {
                        chars.next();
                    }
                }
                Some((_, other)) => value.push(other),
                None => break,
            },
            other => value.push(other),
        }
    }
    Err(SqlError::new(format!(
        "unterminated string literal starting at offset {start}"
    )))
}
