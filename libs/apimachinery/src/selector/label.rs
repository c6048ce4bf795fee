//! The label selector lexer and parser (k8s.io/apimachinery `pkg/labels/selector.go`), with
//! Kubernetes' key and value validation. Errors name the problem and its character position.

use std::collections::BTreeSet;

use super::{Operator, Requirement, SelectorError};

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Identifier(String),
    Not,
    NotEquals,
    Equals,
    DoubleEquals,
    GreaterThan,
    LessThan,
    OpenParen,
    CloseParen,
    Comma,
    End,
}

/// A token and the character position it starts at.
#[derive(Clone, Debug)]
struct Lexed {
    token: Token,
    pos: usize,
}

struct Parser {
    tokens: Vec<Lexed>,
    next: usize,
}

/// The requirements of a selector, in the order written.
pub(super) fn parse(s: &str) -> Result<Vec<Requirement>, SelectorError> {
    let mut parser = Parser {
        tokens: lex(s),
        next: 0,
    };
    parser.selector()
}

/// A validated requirement; `pos` is where it starts (for messages).
pub(super) fn requirement(
    key: &str,
    operator: Operator,
    values: Vec<String>,
    pos: usize,
) -> Result<Requirement, SelectorError> {
    validate_key(key).map_err(|e| at(pos, &format!("invalid label key \"{key}\": {e}")))?;
    let values: Vec<String> = values
        .into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    check_value_count(operator, values.len()).map_err(|why| at(pos, why))?;
    if matches!(operator, Operator::GreaterThan | Operator::LessThan)
        && values[0].parse::<i64>().is_err()
    {
        let why = format!(
            "for 'Gt', 'Lt' operators, the value must be an integer, not \"{}\"",
            values[0]
        );
        return Err(at(pos, &why));
    }
    for value in &values {
        validate_value(value)
            .map_err(|e| at(pos, &format!("invalid label value \"{value}\": {e}")))?;
    }
    Ok(Requirement {
        key: key.to_owned(),
        operator,
        values,
    })
}

fn check_value_count(operator: Operator, count: usize) -> Result<(), &'static str> {
    match operator {
        Operator::In | Operator::NotIn if count == 0 => {
            Err("for 'in', 'notin' operators, values set can't be empty")
        }
        Operator::Exists | Operator::DoesNotExist if count != 0 => {
            Err("values set must be empty for exists and does not exist")
        }
        Operator::Equals
        | Operator::DoubleEquals
        | Operator::NotEquals
        | Operator::GreaterThan
        | Operator::LessThan
            if count != 1 =>
        {
            Err("exact-match compatibility requires one single value")
        }
        _ => Ok(()),
    }
}

// === impl Parser ===

impl Parser {
    fn peek(&self) -> &Lexed {
        &self.tokens[self.next.min(self.tokens.len() - 1)]
    }

    fn consume(&mut self) -> Lexed {
        let lexed = self.peek().clone();
        self.next += 1;
        lexed
    }

    fn selector(&mut self) -> Result<Vec<Requirement>, SelectorError> {
        let mut requirements = Vec::new();
        loop {
            let lexed = self.peek().clone();
            match lexed.token {
                Token::End => return Ok(requirements),
                Token::Identifier(_) | Token::Not => {}
                other => {
                    let why = format!(
                        "found '{}', expected: !, identifier, or 'end of string'",
                        literal(&other)
                    );
                    return Err(at(lexed.pos, &why));
                }
            }
            requirements.push(self.requirement()?);
            let after = self.consume();
            match after.token {
                Token::End => return Ok(requirements),
                Token::Comma => self.expect_requirement_after_comma()?,
                other => {
                    let why = format!(
                        "found '{}', expected: ',' or 'end of string'",
                        literal(&other)
                    );
                    return Err(at(after.pos, &why));
                }
            }
        }
    }

    fn expect_requirement_after_comma(&self) -> Result<(), SelectorError> {
        let lexed = self.peek();
        if matches!(lexed.token, Token::Identifier(_) | Token::Not) {
            return Ok(());
        }
        let why = format!(
            "found '{}', expected: identifier after ','",
            literal(&lexed.token)
        );
        Err(at(lexed.pos, &why))
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        let start = self.peek().pos;
        let (key, inferred) = self.key_and_inferred_operator()?;
        if let Some(operator) = inferred {
            return requirement(&key, operator, Vec::new(), start);
        }
        let operator = self.operator()?;
        let values = match operator {
            Operator::In | Operator::NotIn => self.value_set()?,
            _ => vec![self.exact_value()?],
        };
        requirement(&key, operator, values, start)
    }

    /// The key, and `Exists`/`DoesNotExist` when no operator follows.
    fn key_and_inferred_operator(&mut self) -> Result<(String, Option<Operator>), SelectorError> {
        let mut lexed = self.consume();
        let negated = lexed.token == Token::Not;
        if negated {
            lexed = self.consume();
        }
        let Token::Identifier(key) = lexed.token else {
            let why = format!("found '{}', expected: identifier", literal(&lexed.token));
            return Err(at(lexed.pos, &why));
        };
        if negated {
            return Ok((key, Some(Operator::DoesNotExist)));
        }
        let ends = matches!(self.peek().token, Token::End | Token::Comma);
        Ok((key, ends.then_some(Operator::Exists)))
    }

    fn operator(&mut self) -> Result<Operator, SelectorError> {
        let lexed = self.consume();
        let operator = match &lexed.token {
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::NotEquals => Operator::NotEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::Identifier(word) if word == "in" => Operator::In,
            Token::Identifier(word) if word == "notin" => Operator::NotIn,
            other => {
                let why = format!(
                    "found '{}', expected: '=', '!=', '==', 'in', 'notin', '>' or '<'",
                    literal(other)
                );
                return Err(at(lexed.pos, &why));
            }
        };
        Ok(operator)
    }

    /// `(a,b,c)`; empty entries (`()`, `(a,)`, `(,a)`) stand for the empty value.
    fn value_set(&mut self) -> Result<Vec<String>, SelectorError> {
        let open = self.consume();
        if open.token != Token::OpenParen {
            let why = format!("found '{}', expected: '('", literal(&open.token));
            return Err(at(open.pos, &why));
        }
        let mut values = Vec::new();
        let mut expect_value = true;
        loop {
            let lexed = self.consume();
            match (lexed.token, expect_value) {
                (Token::Identifier(v), true) => {
                    values.push(v);
                    expect_value = false;
                }
                (Token::Comma, true) => values.push(String::new()),
                (Token::Comma, false) => expect_value = true,
                (Token::CloseParen, true) => {
                    values.push(String::new());
                    return Ok(values);
                }
                (Token::CloseParen, false) => return Ok(values),
                (other, _) => {
                    let want = if expect_value {
                        "',', ')' or identifier"
                    } else {
                        "',' or ')'"
                    };
                    let why = format!("found '{}', expected: {want}", literal(&other));
                    return Err(at(lexed.pos, &why));
                }
            }
        }
    }

    /// The value after `=`, `==`, `!=`, `>`, `<`; nothing before `,` or the end is `""`.
    fn exact_value(&mut self) -> Result<String, SelectorError> {
        if matches!(self.peek().token, Token::End | Token::Comma) {
            return Ok(String::new());
        }
        let lexed = self.consume();
        match lexed.token {
            Token::Identifier(v) => Ok(v),
            other => {
                let why = format!("found '{}', expected: identifier", literal(&other));
                Err(at(lexed.pos, &why))
            }
        }
    }
}

fn lex(s: &str) -> Vec<Lexed> {
    let chars: Vec<char> = s.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_whitespace() {
            i += 1;
            continue;
        }
        let (token, len) = lex_one(&chars[i..]);
        tokens.push(Lexed { token, pos: i });
        i += len;
    }
    tokens.push(Lexed {
        token: Token::End,
        pos: chars.len(),
    });
    tokens
}

/// The token at the start of `chars` (not whitespace) and its length.
fn lex_one(chars: &[char]) -> (Token, usize) {
    match (chars[0], chars.get(1).copied()) {
        ('!', Some('=')) => (Token::NotEquals, 2),
        ('!', _) => (Token::Not, 1),
        ('=', Some('=')) => (Token::DoubleEquals, 2),
        ('=', _) => (Token::Equals, 1),
        ('>', _) => (Token::GreaterThan, 1),
        ('<', _) => (Token::LessThan, 1),
        ('(', _) => (Token::OpenParen, 1),
        (')', _) => (Token::CloseParen, 1),
        (',', _) => (Token::Comma, 1),
        _ => {
            let len = chars
                .iter()
                .take_while(|c| !c.is_whitespace() && !is_special(**c))
                .count();
            (Token::Identifier(chars[..len].iter().collect()), len)
        }
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '!' | '=' | '>' | '<' | '(' | ')' | ',')
}

fn literal(token: &Token) -> &str {
    match token {
        Token::Identifier(s) => s,
        Token::Not => "!",
        Token::NotEquals => "!=",
        Token::Equals => "=",
        Token::DoubleEquals => "==",
        Token::GreaterThan => ">",
        Token::LessThan => "<",
        Token::OpenParen => "(",
        Token::CloseParen => ")",
        Token::Comma => ",",
        Token::End => "",
    }
}

fn at(pos: usize, why: &str) -> SelectorError {
    SelectorError::new(format!(
        "unable to parse requirement: {why} (at position {pos})"
    ))
}

/// A qualified name: `[prefix/]name`, prefix a DNS-1123 subdomain, name at most 63 characters
/// of alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
pub(crate) fn validate_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Err("prefix part must be non-empty".into());
        }
        if !is_dns1123_subdomain(prefix) {
            return Err(
                "prefix part must be a lowercase RFC 1123 subdomain: lower case \
                        alphanumeric characters, '-' or '.', starting and ending with an \
                        alphanumeric character, at most 253 characters"
                    .into(),
            );
        }
    }
    if name.is_empty() {
        return Err("name part must be non-empty".into());
    }
    if name.len() > 63 {
        return Err("name part must be no more than 63 characters".into());
    }
    if !is_label_value_shape(name) {
        return Err(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and \
                    must start and end with an alphanumeric character"
                .into(),
        );
    }
    Ok(())
}

/// Empty, or at most 63 characters of alphanumerics, `-`, `_`, `.`, starting and ending
/// alphanumeric.
pub(crate) fn validate_value(value: &str) -> Result<(), String> {
    if value.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    if !value.is_empty() && !is_label_value_shape(value) {
        return Err(
            "a valid label must be an empty string or consist of alphanumeric \
                    characters, '-', '_' or '.', and must start and end with an alphanumeric \
                    character"
                .into(),
        );
    }
    Ok(())
}

fn is_label_value_shape(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    s.starts_with(alnum)
        && s.ends_with(alnum)
        && s.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
}

fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
            part.starts_with(ok) && part.ends_with(ok) && part.chars().all(|c| ok(c) || c == '-')
        })
}
