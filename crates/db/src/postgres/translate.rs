//! Rewrites the SQLite spelling the call sites use into PostgreSQL's, once per SQL text (the
//! result is cached with the prepared statement).
//!
//! The rewrite is lexical and deliberately small: parameters (`?N` → `$N`, bare `?` → the next
//! number, as SQLite numbers them, and the unary plus of `LIMIT +?2` dropped), SQLite's index
//! hints (`INDEXED BY x`, `NOT INDEXED`) dropped, and `instr(` → `strpos(` (same argument
//! order). Everything else is written portably by the call sites. String literals, quoted
//! identifiers, dollar-quoted bodies and comments are copied untouched.

/// A statement as PostgreSQL reads it, and what the connection must know about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Translated {
    /// The rewritten SQL.
    pub(super) sql: String,
    /// Its transaction-control statements, in order.
    pub(super) controls: Vec<Control>,
    /// How many statements it holds (counted by their first words).
    pub(super) statements: usize,
}

impl Translated {
    /// Whether one of its statements is `COMMIT` (or `END`): a connection lost while it runs
    /// leaves the transaction's outcome unknown.
    pub(super) fn commits(&self) -> bool {
        self.controls.contains(&Control::Commit)
    }
}

/// A statement that begins or ends a transaction, by which the connection follows the state of
/// its session's transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Control {
    /// `BEGIN` or `START TRANSACTION`.
    Begin,
    /// `COMMIT` or `END`.
    Commit,
    /// `ROLLBACK` or `ABORT` (the whole transaction).
    Rollback,
    /// `ROLLBACK TO [SAVEPOINT] name`: the transaction stays open, usable again.
    RollbackToSavepoint,
}

/// Words after which a `+` directly before a parameter is unary (the previous token is not an
/// operand). SQLite call sites write `LIMIT +?2` so that its planner does not re-plan per value;
/// PostgreSQL cannot resolve a unary plus on a parameter of unknown type, and needs no hint.
const WORDS_BEFORE_UNARY: &[&str] = &[
    "and",
    "between",
    "by",
    "case",
    "else",
    "in",
    "is",
    "like",
    "limit",
    "not",
    "offset",
    "on",
    "or",
    "return",
    "returning",
    "select",
    "set",
    "then",
    "values",
    "when",
    "where",
];

/// Translates one SQL text (one or more statements).
pub(super) fn translate(sql: &str) -> Translated {
    let mut lexer = Lexer {
        sql,
        bytes: sql.as_bytes(),
        pos: 0,
    };
    let mut out = String::with_capacity(sql.len() + 8);
    let mut state = State {
        parameter_max: 0,
        unary_allowed: true,
        statement_start: true,
    };
    let mut controls = Vec::new();
    let mut statements = 0;
    while let Some(token) = lexer.next_token() {
        match token {
            Token::Verbatim(text) => out.push_str(text),
            Token::Operand(text) => {
                out.push_str(text);
                state.operand();
            }
            Token::Punctuation(text) => {
                out.push_str(text);
                state.unary_allowed = !text.starts_with(')');
                state.statement_start = text == ";";
            }
            Token::Parameter(number) => {
                let number = number.unwrap_or(state.parameter_max + 1);
                state.parameter_max = state.parameter_max.max(number);
                out.push('$');
                out.push_str(&number.to_string());
                state.operand();
            }
            Token::Plus => {
                // Kept unless unary and directly before a parameter.
                if !(state.unary_allowed && lexer.peek_byte() == Some(b'?')) {
                    out.push('+');
                }
                state.unary_allowed = true;
            }
            Token::Word(word) => {
                if state.statement_start {
                    statements += 1;
                    controls.extend(lexer.control(word));
                    state.statement_start = false;
                }
                if let Some(end) = lexer.index_hint_end(word) {
                    trim_trailing_blanks(&mut out);
                    lexer.pos = end;
                    continue;
                }
                if word.eq_ignore_ascii_case("instr") && lexer.call_follows() && !out.ends_with('.')
                {
                    out.push_str("strpos");
                } else {
                    out.push_str(word);
                }
                state.unary_allowed = WORDS_BEFORE_UNARY
                    .iter()
                    .any(|known| word.eq_ignore_ascii_case(known));
            }
        }
    }
    Translated {
        sql: out,
        controls,
        statements,
    }
}

/// What the translator remembers between tokens.
struct State {
    /// The highest parameter number seen so far: a bare `?` takes the next one (SQLite's rule).
    parameter_max: u32,
    /// Whether a `+` here would be unary (no operand precedes it).
    unary_allowed: bool,
    /// Whether the next word starts a statement.
    statement_start: bool,
}

impl State {
    fn operand(&mut self) {
        self.unary_allowed = false;
        self.statement_start = false;
    }
}

fn trim_trailing_blanks(out: &mut String) {
    let kept = out.trim_end_matches([' ', '\t']).len();
    out.truncate(kept);
}

/// One lexical token; only the ones the rewrite looks at are told apart.
#[derive(Debug)]
enum Token<'a> {
    /// Copied as is, with no effect on what follows: whitespace and comments.
    Verbatim(&'a str),
    /// A literal, a quoted identifier or a number.
    Operand(&'a str),
    /// Any other symbol (operators, parentheses, commas, semicolons).
    Punctuation(&'a str),
    /// `?N` (`Some(N)`) or a bare `?` (`None`).
    Parameter(Option<u32>),
    /// A `+`.
    Plus,
    /// An identifier or keyword.
    Word(&'a str),
}

struct Lexer<'a> {
    sql: &'a str,
    bytes: &'a [u8],
    /// Always on a UTF-8 boundary: it only stops at ASCII bytes or the end.
    pos: usize,
}

fn is_word_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'$' || byte >= 0x80
}

impl<'a> Lexer<'a> {
    fn peek_byte(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn take(&mut self, end: usize) -> &'a str {
        let start = self.pos;
        self.pos = end.min(self.bytes.len());
        &self.sql[start..self.pos]
    }

    fn skip_while(&self, mut at: usize, keep: impl Fn(u8) -> bool) -> usize {
        while at < self.bytes.len() && keep(self.bytes[at]) {
            at += 1;
        }
        at
    }

    fn next_token(&mut self) -> Option<Token<'a>> {
        let byte = self.peek_byte()?;
        let next = self.bytes.get(self.pos + 1).copied();
        let token = match byte {
            b'\'' => Token::Operand(self.quoted(self.pos, b'\'', false)),
            b'"' => Token::Operand(self.quoted(self.pos, b'"', false)),
            b'e' | b'E' if next == Some(b'\'') => {
                Token::Operand(self.quoted(self.pos + 1, b'\'', true))
            }
            b'-' if next == Some(b'-') => {
                Token::Verbatim(self.take(self.skip_while(self.pos, |b| b != b'\n')))
            }
            b'/' if next == Some(b'*') => Token::Verbatim(self.block_comment()),
            b'$' => self.dollar(),
            b'?' => {
                let end = self.skip_while(self.pos + 1, |b| b.is_ascii_digit());
                let digits = &self.sql[self.pos + 1..end];
                self.pos = end;
                Token::Parameter(digits.parse().ok())
            }
            b'+' => {
                self.pos += 1;
                Token::Plus
            }
            b if b.is_ascii_whitespace() => {
                Token::Verbatim(self.take(self.skip_while(self.pos, |b| b.is_ascii_whitespace())))
            }
            b if b.is_ascii_digit() => Token::Operand(
                self.take(self.skip_while(self.pos, |b| is_word_byte(b) || b == b'.')),
            ),
            b if is_word_byte(b) => Token::Word(self.take(self.skip_while(self.pos, is_word_byte))),
            _ => Token::Punctuation(self.take(self.pos + 1)),
        };
        Some(token)
    }

    /// A literal or quoted identifier whose opening quote is at `open` (after an `E` prefix, if
    /// any). A doubled quote stays inside; with `backslash`, so does an escaped one. Unclosed, it
    /// runs to the end (the server reports the error).
    fn quoted(&mut self, open: usize, quote: u8, backslash: bool) -> &'a str {
        let mut at = open + 1;
        while at < self.bytes.len() {
            let byte = self.bytes[at];
            let escaped = backslash && byte == b'\\';
            let doubled = byte == quote && self.bytes.get(at + 1) == Some(&quote);
            if escaped || doubled {
                at += 2;
            } else if byte == quote {
                return self.take(at + 1);
            } else {
                at += 1;
            }
        }
        self.take(self.bytes.len())
    }

    /// A `/* … */` comment; PostgreSQL nests them.
    fn block_comment(&mut self) -> &'a str {
        let mut depth = 0_usize;
        let mut at = self.pos;
        while at + 1 < self.bytes.len() {
            match (self.bytes[at], self.bytes[at + 1]) {
                (b'/', b'*') => {
                    depth += 1;
                    at += 2;
                }
                (b'*', b'/') => {
                    depth -= 1;
                    at += 2;
                    if depth == 0 {
                        return self.take(at);
                    }
                }
                _ => at += 1,
            }
        }
        self.take(self.bytes.len())
    }

    /// `$tag$ … $tag$` (a dollar-quoted body, copied whole), or a `$N` already in PostgreSQL's
    /// spelling (an operand).
    fn dollar(&mut self) -> Token<'a> {
        let tag_end = self.skip_while(self.pos + 1, |b| b.is_ascii_alphanumeric() || b == b'_');
        let is_tag = self.bytes.get(tag_end) == Some(&b'$')
            && !self.bytes.get(self.pos + 1).is_some_and(u8::is_ascii_digit);
        if !is_tag {
            return Token::Operand(self.take(tag_end.max(self.pos + 1)));
        }
        let tag = &self.sql[self.pos..=tag_end];
        let body = tag_end + 1;
        let end = self.sql[body..]
            .find(tag)
            .map_or(self.bytes.len(), |at| body + at + tag.len());
        Token::Operand(self.take(end))
    }

    /// The next word after `from`, skipping whitespace: `(start, end)`.
    fn word_after(&self, from: usize) -> Option<(usize, usize)> {
        let start = self.skip_while(from, |b| b.is_ascii_whitespace());
        let end = self.skip_while(start, is_word_byte);
        (end > start && start > from).then_some((start, end))
    }

    /// Where an index hint starting with `word` (already taken) ends: `INDEXED BY name` or
    /// `NOT INDEXED`.
    fn index_hint_end(&self, word: &str) -> Option<usize> {
        let (start, end) = self.word_after(self.pos)?;
        let second = &self.sql[start..end];
        if word.eq_ignore_ascii_case("not") && second.eq_ignore_ascii_case("indexed") {
            return Some(end);
        }
        if word.eq_ignore_ascii_case("indexed") && second.eq_ignore_ascii_case("by") {
            let (start, end) = self.word_after(end)?;
            if self.bytes[start].is_ascii_digit() {
                return None;
            }
            return Some(end);
        }
        None
    }

    /// The transaction control a statement starting with `word` (already taken) performs.
    fn control(&self, word: &str) -> Option<Control> {
        let is = |known: &str| word.eq_ignore_ascii_case(known);
        if is("begin") || is("start") {
            return Some(Control::Begin);
        }
        if is("commit") || is("end") {
            return Some(Control::Commit);
        }
        if is("abort") {
            return Some(Control::Rollback);
        }
        if !is("rollback") {
            return None;
        }
        // `ROLLBACK [WORK | TRANSACTION] TO …` keeps the transaction.
        let mut next = self.word_after(self.pos);
        if let Some((start, end)) = next {
            let noise = &self.sql[start..end];
            if noise.eq_ignore_ascii_case("work") || noise.eq_ignore_ascii_case("transaction") {
                next = self.word_after(end);
            }
        }
        let to = next.is_some_and(|(start, end)| self.sql[start..end].eq_ignore_ascii_case("to"));
        Some(if to {
            Control::RollbackToSavepoint
        } else {
            Control::Rollback
        })
    }

    /// Whether an opening parenthesis follows (after optional whitespace).
    fn call_follows(&self) -> bool {
        let at = self.skip_while(self.pos, |b| b.is_ascii_whitespace());
        self.bytes.get(at) == Some(&b'(')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sql(text: &str) -> String {
        translate(text).sql
    }

    #[test]
    fn numbered_and_bare_parameters_take_sqlite_numbers() {
        assert_eq!(sql("SELECT ?1, ?2, ?1"), "SELECT $1, $2, $1");
        assert_eq!(
            sql("INSERT INTO t VALUES (?, ?, ?)"),
            "INSERT INTO t VALUES ($1, $2, $3)"
        );
        // SQLite gives a bare `?` the largest number so far plus one.
        assert_eq!(sql("SELECT ?3, ?, ?1, ?"), "SELECT $3, $4, $1, $5");
        assert_eq!(sql("x=?10"), "x=$10");
    }

    #[test]
    fn literals_identifiers_and_comments_are_copied_untouched() {
        let text = "SELECT '?1 it''s', \"col?\"\"?\", E'\\'?', $$ ? $$, $t$ ?2 $t$ -- ?3 instr(\n\
                    /* ?4 /* nested ? */ ? */ ?";
        let want = "SELECT '?1 it''s', \"col?\"\"?\", E'\\'?', $$ ? $$, $t$ ?2 $t$ -- ?3 instr(\n\
                    /* ?4 /* nested ? */ ? */ $1";
        assert_eq!(sql(text), want);
        assert_eq!(sql("SELECT 'unclosed ?"), "SELECT 'unclosed ?");
        assert_eq!(sql("SELECT $1, ?"), "SELECT $1, $1");
    }

    #[test]
    fn a_unary_plus_before_a_parameter_is_dropped() {
        assert_eq!(sql("SELECT x FROM t LIMIT +?2"), "SELECT x FROM t LIMIT $2");
        assert_eq!(
            sql("WHERE a = +?1 AND b IN (+?2)"),
            "WHERE a = $1 AND b IN ($2)"
        );
        // A binary plus stays.
        assert_eq!(
            sql("SELECT a +?1, (a) + ?2, 1+?3, 'x'+?4"),
            "SELECT a +$1, (a) + $2, 1+$3, 'x'+$4"
        );
        assert_eq!(sql("SELECT a + 1"), "SELECT a + 1");
    }

    #[test]
    fn index_hints_are_dropped() {
        assert_eq!(
            sql("SELECT id FROM executions AS e INDEXED BY executions_claimable\n WHERE x"),
            "SELECT id FROM executions AS e\n WHERE x"
        );
        assert_eq!(
            sql("SELECT a FROM t not indexed WHERE b"),
            "SELECT a FROM t WHERE b"
        );
        assert_eq!(
            sql("SELECT 'INDEXED BY x' FROM t"),
            "SELECT 'INDEXED BY x' FROM t"
        );
        assert_eq!(
            sql("SELECT a AS indexed FROM t"),
            "SELECT a AS indexed FROM t"
        );
        assert_eq!(
            sql("SELECT not_indexed FROM t"),
            "SELECT not_indexed FROM t"
        );
    }

    #[test]
    fn instr_becomes_strpos() {
        assert_eq!(
            sql("WHERE (?3 IS NULL OR instr(name, ?3) > 0) AND INSTR (a, 'b')"),
            "WHERE ($3 IS NULL OR strpos(name, $3) > 0) AND strpos (a, 'b')"
        );
        assert_eq!(
            sql("SELECT instr, s.instr(x), 'instr(' FROM t"),
            "SELECT instr, s.instr(x), 'instr(' FROM t"
        );
    }

    #[test]
    fn transaction_controls_are_recognised_at_statement_starts_only() {
        use Control::{Begin, Commit, Rollback, RollbackToSavepoint};
        let controls = |text: &str| translate(text).controls;
        assert_eq!(controls("COMMIT"), [Commit]);
        assert_eq!(controls(" commit;"), [Commit]);
        assert_eq!(controls("BEGIN; UPDATE t SET a = 1; END"), [Begin, Commit]);
        assert_eq!(controls("-- done\nCOMMIT"), [Commit]);
        assert_eq!(
            controls("START TRANSACTION ISOLATION LEVEL REPEATABLE READ"),
            [Begin]
        );
        assert_eq!(controls("ROLLBACK"), [Rollback]);
        assert_eq!(controls("abort"), [Rollback]);
        assert_eq!(controls("ROLLBACK TO SAVEPOINT s"), [RollbackToSavepoint]);
        assert_eq!(controls("rollback work to s"), [RollbackToSavepoint]);
        assert!(controls("SELECT CASE WHEN a THEN 1 END").is_empty());
        assert!(controls("SELECT 'COMMIT'").is_empty());
        assert!(controls("INSERT INTO commit_log VALUES (1)").is_empty());
        assert!(translate("UPDATE t SET a = 1; END").commits());
        assert!(!translate("ROLLBACK").commits());
        assert_eq!(translate("SELECT 1; SELECT 2;").statements, 2);
    }

    #[test]
    fn non_ascii_text_survives() {
        assert_eq!(
            sql("SELECT 'é?' , ?, \"ñ\" FROM ü"),
            "SELECT 'é?' , $1, \"ñ\" FROM ü"
        );
    }
}
